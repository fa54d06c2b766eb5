r"""Trains an outcome reward model on preference pairs of the built-in arithmetic task
(rl4llm/train/reward_model_job.py): a decoder of config.model plus a scalar head, Bradley-Terry loss (or BCE on
verifier labels), held-out pairwise accuracy, the RM written as an Orbax checkpoint the RL job reads with
--config.reward_model.checkpoint; or a generative judge (objective "judge": P(Yes); "critique": sampled critiques with
a parsed score, rl4llm/train/critique_job.py) the RL job reads with --config.generative_verifier.checkpoint.

    python -m experiments.train_reward_model --workdir=/tmp/rl4llm/rm
    python -m experiments.train_reward_model --workdir=/tmp/rl4llm/rm_bce --config.reward_model.objective=bce \
        --config.reward_model.steps=400
    python -m experiments.train --workdir=/tmp/rl4llm/grpo_rm \
        --config.reward_model.checkpoint=/tmp/rl4llm/rm/reward_model --config.reward_model.mode=add
    # a generative judge instead: P(Yes) ("judge") or a critique writer ("critique", DeepSeek-GRM), for the recipes
    python -m experiments.train_reward_model --config=configs/grpo_critique_verifier.py \
        --config.generative_verifier.checkpoint= --workdir=/tmp/rl4llm/critique_verifier

The training fields are config.reward_model.* (`python -m rl4llm.config`); the model is config.model. Writes
<workdir>/metrics.jsonl (stage "rm"), TensorBoard events, <workdir>/reward_model and summary.json. It does not resume:
a workdir that already holds a reward model is refused.
"""

import os
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

_DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "default.py")
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/rl4llm/rm", "Where the reward model, logs and the summary go.")


def main(argv):
    del argv
    from rl4llm.train import host_memory

    host_memory.reuse_freed_memory()  # before JAX starts its threads
    from rl4llm import config as config_lib
    from rl4llm.train import checkpointing
    from rl4llm.train import reward_model_job

    try:
        reward_model_job.run(flags.FLAGS.config, _WORKDIR.value)
    except (config_lib.ConfigError, checkpointing.StorageError) as e:  # one line, exit 1
        sys.exit(str(e))


if __name__ == "__main__":
    from rl4llm.config import overrides

    overrides.exit_on_unknown_fields(sys.argv[1:], _DEFAULT_CONFIG)
    config_flags.DEFINE_config_file("config", _DEFAULT_CONFIG, "Run config (ml_collections).", lock_config=True)
    logging.set_verbosity(logging.WARNING)
    app.run(main)
