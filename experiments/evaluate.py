r"""Evaluates a run's checkpoint on its held-out split: greedy accuracy, pass@k, avg@k, maj@k, response length
and answer entropy (`rl4llm.train.evaluate`).

    python -m experiments.evaluate --workdir=/tmp/rl4llm/default --k=1,8,64
    python -m experiments.evaluate --workdir=/tmp/rl4llm/default --k=1,4 --stage=sft --num_examples=128

Rebuilds task, tokenizer and model from <workdir>/config.json, restores the params of the newest RL checkpoint
(else the newest SFT one; --stage / --step pick another), draws n = max(k) samples per held-out prompt with the
run's rollout sampling settings plus one greedy completion, and writes <workdir>/eval_<stage>_<step>.json
({"workdir", "stage", "step", "n", "k", "num_examples", "seed", "metrics"}). The evaluation key is the one the
trainer's in-training evaluation uses (fold_in(key(config.seed), 2), or key(--seed) when given), so with the
run's own k (max k = config.eval.pass_n) and num_examples it reproduces the metrics logged at that step.
"""

import json
import os
import sys

from absl import app
from absl import flags
from absl import logging

from rl4llm.train import runs

_WORKDIR = flags.DEFINE_string("workdir", None, "A run's workdir (written by experiments/train.py).", required=True)
_K = flags.DEFINE_list("k", ["1", "8", "64"], "Comma-separated k of pass@k / avg@k / maj@k; n = max(k) samples.")
_STAGE = flags.DEFINE_enum("stage", "auto", ["auto", "rl", "sft"], "Checkpoint stage; auto: RL if any, else SFT.")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the stage's newest).")
_NUM_EXAMPLES = flags.DEFINE_integer("num_examples", None, "Held-out prompts (default: config.eval.num_examples).")
_SEED = flags.DEFINE_integer("seed", None, "Evaluation key key(seed) (default: the trainer's evaluation key).")


def parse_ks(values) -> tuple[int, ...]:
    """Sorted distinct k >= 1 of the --k list; ValueError naming the flag otherwise."""
    try:
        ks = sorted({int(v) for v in values})
    except ValueError:
        raise ValueError(f"--k={','.join(values)}: expected comma-separated integers, e.g. --k=1,8,64") from None
    if not ks or ks[0] < 1:
        raise ValueError(f"--k={','.join(values)}: every k must be >= 1")
    return tuple(ks)


def evaluate_workdir(
    workdir: str, ks: tuple[int, ...], *, stage: str = "auto", step: int | None = None,
    num_examples: int | None = None, seed: int | None = None,
) -> dict:
    """Evaluates checkpoint (stage, step) of `workdir` (module docstring), writes and returns the result."""
    import dataclasses

    import jax

    from rl4llm.train import evaluate as evaluate_lib

    with runs.restore_policy(workdir, stage, step, num_examples=num_examples) as policy:
        spec = dataclasses.replace(policy.setup.eval_spec, pass_n=max(ks), pass_k=tuple(ks))
        key = jax.random.key(seed) if seed is not None else jax.random.fold_in(jax.random.key(policy.config.seed), 2)
        metrics = evaluate_lib.evaluate(
            policy.setup.model_cfg, policy.params, policy.setup.tokenizer, policy.setup.eval_examples, key, spec,
            policy.setup.score_fn,
        )
        result = {
            "workdir": os.path.abspath(workdir),
            "stage": policy.stage,
            "step": policy.step,
            "n": max(ks),
            "k": list(ks),
            "num_examples": len(policy.setup.eval_examples),
            "seed": seed,
            "metrics": metrics,
        }
    with open(runs.eval_path(workdir, result["stage"], result["step"]), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    return result


def format_table(result: dict) -> str:
    """The metrics of an evaluation result as a two-column table."""
    title = f"{result['workdir']}: {result['stage']} step {result['step']}, {result['num_examples']} held-out prompts, n={result['n']}"
    rows = [title] + [f"  {key.removeprefix('eval/'):32s} {value:10.4f}" for key, value in result["metrics"].items()]
    return "\n".join(rows)


def main(argv):
    del argv
    try:
        ks = parse_ks(_K.value)
        result = evaluate_workdir(
            _WORKDIR.value, ks, stage=_STAGE.value, step=_STEP.value, num_examples=_NUM_EXAMPLES.value, seed=_SEED.value
        )
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")
    print(format_table(result))
    print(f"wrote {runs.eval_path(result['workdir'], result['stage'], result['step'])}", flush=True)


if __name__ == "__main__":
    logging.set_verbosity(logging.WARNING)  # hide Orbax's INFO chatter (--verbosity=0 shows it)
    app.run(main)
