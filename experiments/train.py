r"""The main job: SFT warm start then RL on a built-in task, with Orbax checkpoints.

    python -m experiments.train --workdir=/tmp/rl4llm/default
    python -m experiments.train --config=configs/default.py --workdir=/tmp/rl4llm/g16 \
        --config.rl.num_generations=16

    python -m experiments.train --config=configs/agent_kg_search.py --workdir=/tmp/rl4llm/kg

Re-running with the same --workdir resumes from the newest readable checkpoint. On SIGTERM (preemption) or Ctrl-C
the run finishes its step, writes a checkpoint and exits 0 saying so; a second signal aborts at once.
Several hosts (TPU pod slice, GPU cluster): the same command on every host with --config.distributed.initialize=True
(configs/default.py, "distributed") and a --workdir every host sees (an NFS or gcsfuse mount).
Writes <workdir>/metrics.jsonl, TensorBoard events under <workdir>/tensorboard, and summary.json.
"""

import os
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

_DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "default.py")
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/rl4llm/default", "Where checkpoints, logs and the summary go.")


def main(argv):
    del argv
    from rl4llm.train import host_memory

    host_memory.reuse_freed_memory()  # before JAX starts its threads
    # after flag parsing: absl logs go to stderr
    from rl4llm import config as config_lib
    from rl4llm.parallel import distributed
    from rl4llm.train import checkpointing
    from rl4llm.train import job
    from rl4llm.train import optim
    from rl4llm.train import preemption

    distributed.initialize(flags.FLAGS.config.distributed)  # several hosts: before anything touches a device
    try:
        # A config whose agent section names an env is a multi-turn agent run (configs/agent_*.py).
        job.run(flags.FLAGS.config, _WORKDIR.value)
    except (config_lib.ConfigError, checkpointing.StorageError, optim.NonFiniteError) as e:  # one line, exit 1
        sys.exit(str(e))
    except preemption.Preempted as e:  # a checkpoint of the last step is written: a clean exit
        print(e, flush=True)


if __name__ == "__main__":
    # Overrides naming no field: "unknown field config.rl.lr; did you mean config.rl.learning_rate?", exit 2
    # (checked first: ml_collections would raise a bare AttributeError while defining the flag).
    from rl4llm.config import overrides

    overrides.exit_on_unknown_fields(sys.argv[1:], _DEFAULT_CONFIG)
    config_flags.DEFINE_config_file("config", _DEFAULT_CONFIG, "Run config (ml_collections).", lock_config=True)
    # Progress lines go to stdout; absl INFO (Orbax's per-save chatter) is hidden unless asked for
    # with --verbosity=0.
    logging.set_verbosity(logging.WARNING)
    app.run(main)
