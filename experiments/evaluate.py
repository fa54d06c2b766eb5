r"""Evaluates a run's checkpoint on its held-out split: greedy accuracy, pass@k, avg@k, maj@k, response length
and answer entropy (`rl4llm.train.evaluate`).

    python -m experiments.evaluate --workdir=/tmp/rl4llm/default --k=1,8,64
    python -m experiments.evaluate --workdir=/tmp/rl4llm/default --k=1,4 --stage=sft --num_examples=128

Rebuilds task, tokenizer and model from <workdir>/config.json, restores the params of the newest RL checkpoint
(else the newest SFT one; --stage / --step pick another), draws n = max(k) samples per held-out prompt with the
run's rollout sampling settings plus one greedy completion, prints a table and writes
<workdir>/eval_<stage>_<step>.json (`rl4llm.train.runs.evaluate_checkpoint`). With the run's own k
(max k = config.eval.pass_n) and held-out set it reproduces the evaluation the run logged at that step.
"""

import sys

from absl import app
from absl import flags
from absl import logging

from rl4llm.train import host_memory
from rl4llm.train import runs

_WORKDIR = flags.DEFINE_string("workdir", None, "A run's workdir (written by experiments/train.py).", required=True)
_K = flags.DEFINE_list("k", ["1", "8", "64"], "Comma-separated k of pass@k / avg@k / maj@k; n = max(k) samples.")
_STAGE = flags.DEFINE_enum("stage", "auto", ["auto", "rl", "sft"], "Checkpoint stage; auto: RL if any, else SFT.")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the stage's newest).")
_NUM_EXAMPLES = flags.DEFINE_integer("num_examples", None, "Held-out prompts (default: config.eval.num_examples).",
                                     lower_bound=1)
_SEED = flags.DEFINE_integer("eval_seed", None, "Evaluation key key(eval_seed) (default: the trainer's eval key).")


def main(argv):
    del argv
    host_memory.reuse_freed_memory()  # before JAX starts its threads
    try:
        ks = [int(k) for k in _K.value]
    except ValueError:
        sys.exit(f"error: --k={','.join(_K.value)}: expected comma-separated integers, e.g. --k=1,8,64")
    try:
        result = runs.evaluate_checkpoint(
            _WORKDIR.value, ks, stage=_STAGE.value, step=_STEP.value, num_examples=_NUM_EXAMPLES.value,
            seed=_SEED.value,
        )
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")
    print(runs.format_evaluation(result))
    print(f"wrote {runs.eval_path(result['workdir'], result['stage'], result['step'])}", flush=True)


if __name__ == "__main__":
    logging.set_verbosity(logging.WARNING)  # hide Orbax's INFO chatter (--verbosity=0 shows it)
    app.run(main)
