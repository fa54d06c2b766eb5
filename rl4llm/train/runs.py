"""A run's files read back, for notebooks and `experiments/evaluate.py`.

A workdir written by `experiments/train.py` (`train.job.run`) holds

  config.json                     the run's config                      `load_config`
  metrics.jsonl                   one record per logged (stage, step)   `load_metrics`, `series`
  summary.json                    warm-start and final evaluation       `load_summary`
  eval_<stage>_<step>.json        `evaluate_checkpoint`'s results       `load_evals`, `eval_path`, `pass_at_k_curve`
  checkpoints/{sft,rl}/<step>     Orbax checkpoints                     `checkpoint_steps`, `restore_policy`

`evaluate_checkpoint` is what `experiments/evaluate.py` runs.

Reading metrics, summaries and evaluations needs no JAX; restoring a policy rebuilds the run's task, tokenizer
and model with `train.setup.build_setup` and reads only the params of the checkpoint (`Checkpointer.restore_entry`).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
from typing import Any, Sequence

import ml_collections
import numpy as np

from rl4llm import config as config_lib
from rl4llm.train import metrics as metrics_lib

STAGES = ("sft", "rl")  # in run order
# The checkout this package runs from (pip install -e): its configs/ and experiments/.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _require(workdir: str, name: str, written_by: str) -> str:
    path = os.path.join(workdir, name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist: is --workdir={workdir} a run's workdir? ({written_by})")
    return path


def load_config(workdir: str) -> ml_collections.ConfigDict:
    """The run's config: what `train.job.run` wrote to `<workdir>/config.json`, laid over this checkout's default
    config (`rl4llm.config.defaults()`), so that a run saved before a config field existed reads back with that
    field's default (new features default to off) and list values take their field's type (tuples). Its editable
    form: `rl4llm.config.parse` gives the typed one."""
    with open(_require(workdir, "config.json", "written by experiments/train.py"), encoding="utf-8") as f:
        saved = json.load(f)
    config = config_lib.defaults()
    config.update(saved)
    return config


def load_metrics(workdir: str, stage: str = "rl") -> dict[str, np.ndarray]:
    """{key: array [S]} over the stage's logged steps in order (the last record of each step, as
    `metrics.read_metrics` reads them): "step" as int64, every numeric metric as float64 with NaN on steps
    that did not log it (e.g. `eval/*` between evaluations). Non-numeric entries are left out."""
    _require(workdir, "metrics.jsonl", "written by experiments/train.py")
    records = metrics_lib.read_metrics(workdir, stage)
    keys = {k for r in records for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out = {"step": np.asarray([r["step"] for r in records], np.int64)}
    for key in sorted(keys - {"step"}):
        values = [r.get(key) for r in records]
        if all(v is None or isinstance(v, (int, float)) for v in values):
            out[key] = np.asarray([np.nan if v is None else v for v in values], np.float64)
    return out


def series(metrics: dict[str, np.ndarray], key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps [S'], values [S']) of `key` in `load_metrics`'s result, on the steps that logged it (finite values);
    empty arrays when the run never logged it."""
    if key not in metrics:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    finite = np.isfinite(metrics[key])
    return metrics["step"][finite], metrics[key][finite]


def markdown_table(rows: dict[str, dict], columns: Sequence[str], fmt: str = "{:.3f}", label: str = "run") -> str:
    """A Markdown table: a `label` column of the `rows` keys, then one column per key of `columns` (floats in
    `fmt`, other values as str, "" where a row lacks the key)."""

    def cell(value) -> str:
        return (fmt.format(value) if isinstance(value, float) else str(value)).replace("|", "\\|")

    lines = [f"| {label} | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for name, row in rows.items()]
    return "\n".join(lines)


def load_summary(workdir: str) -> dict:
    """`<workdir>/summary.json` (written when the run finished)."""
    with open(_require(workdir, "summary.json", "written when experiments/train.py finishes"), encoding="utf-8") as f:
        return json.load(f)


def eval_path(workdir: str, stage: str, step: int) -> str:
    """Where `experiments/evaluate.py` writes the evaluation of checkpoint (stage, step)."""
    return os.path.join(workdir, f"eval_{stage}_{step}.json")


def load_evals(workdir: str) -> list[dict]:
    """Every `eval_<stage>_<step>.json` of the workdir, in run order (SFT, then RL by step)."""
    found = []
    for path in glob.glob(os.path.join(workdir, "eval_*_*.json")):
        match = re.fullmatch(r"eval_(sft|rl)_(\d+)\.json", os.path.basename(path))
        if match:
            with open(path, encoding="utf-8") as f:
                found.append((STAGES.index(match[1]), int(match[2]), json.load(f)))
    return [evaluation for *_, evaluation in sorted(found, key=lambda t: t[:2])]


def pass_at_k_curve(metrics: dict, name: str = "pass") -> tuple[np.ndarray, np.ndarray]:
    """(k [K], value [K]) sorted by k, of the `eval/<name>@k` entries of an evaluation's metrics
    (name in {"pass", "avg", "maj"})."""
    points = sorted(
        (int(m[1]), float(v)) for key, v in metrics.items() if (m := re.fullmatch(rf"eval/{name}@(\d+)", key))
    )
    return np.asarray([k for k, _ in points], np.int64), np.asarray([v for _, v in points], np.float64)


def checkpoint_steps(workdir: str, stage: str) -> list[int]:
    """Steps of the stage's saved checkpoints (empty when there is none)."""
    directory = os.path.join(workdir, "checkpoints", stage)
    if not os.path.isdir(directory):
        return []
    from rl4llm.train import checkpointing

    checkpointer = checkpointing.Checkpointer(directory)
    try:
        return checkpointer.all_steps()
    finally:
        checkpointer.close()


def resolve_checkpoint(workdir: str, stage: str = "auto", step: int | None = None) -> tuple[str, int]:
    """(stage, step) of the checkpoint to use: `stage` "auto" means RL if it has a checkpoint (with `step`: one
    of that step), else SFT; `step` None means the stage's newest. Errors name the workdir and what exists."""
    if stage not in ("auto", *STAGES):
        raise ValueError(f"stage={stage!r}; expected auto, sft or rl")
    steps = {s: checkpoint_steps(workdir, s) for s in STAGES}
    if not any(steps.values()):
        raise FileNotFoundError(f"no checkpoint in {workdir} (looked in {os.path.join(workdir, 'checkpoints')}/{{sft,rl}})")
    candidates = ["rl", "sft"] if stage == "auto" else [stage]
    for s in candidates:
        if steps[s] and (step is None or step in steps[s]):
            return s, steps[s][-1] if step is None else step
    raise FileNotFoundError(
        f"no {'' if stage == 'auto' else stage + ' '}checkpoint{'' if step is None else f' at step {step}'} in "
        f"{workdir}; saved steps: sft {steps['sft']}, rl {steps['rl']}"
    )


@dataclasses.dataclass
class Policy:
    """A checkpointed policy with what is needed to sample and score it. Close it to stop the reward workers."""

    config: config_lib.RunConfig
    setup: Any  # train.setup.Setup
    params: Any
    stage: str
    step: int
    meta: dict

    def close(self) -> None:
        self.setup.rewards.close()

    def __enter__(self) -> "Policy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def restore_policy(workdir: str, stage: str = "auto", step: int | None = None, *, num_examples: int | None = None) -> Policy:
    """The params of checkpoint (stage, step) (`resolve_checkpoint`), on the default device, and the run's setup
    (task, tokenizer, model, held-out examples: `config.eval.num_examples` of them, or `num_examples`) rebuilt from
    its config (`load_config`)."""
    import jax

    from rl4llm.train import checkpointing
    from rl4llm.train import setup as setup_lib

    stage, step = resolve_checkpoint(workdir, stage, step)
    config = config_lib.parse(load_config(workdir))
    if num_examples is not None:
        config = config.replace(eval={"num_examples": num_examples})
    setup = setup_lib.build_setup(config, workdir)
    # The params' structure without reading any weights: a random init's shapes (an HF checkpoint has the same).
    shape_config = config.replace(model={"hf_checkpoint": ""})
    target = jax.eval_shape(lambda key: setup_lib.initial_params(shape_config, setup.model_cfg, key), jax.random.key(0))
    checkpointer = checkpointing.Checkpointer(os.path.join(workdir, "checkpoints", stage))
    try:
        params, meta = checkpointer.restore_entry(step, "params", target)  # host arrays (no sharding asked)
    except BaseException:
        setup.rewards.close()
        raise
    finally:
        checkpointer.close()
    return Policy(config, setup, jax.tree.map(jax.numpy.asarray, params), stage, step, meta)


def sample_completions(policy: Policy, num_prompts: int, seed: int = 0) -> list[dict]:
    """`num_prompts` held-out prompts of the run, one completion each at the run's rollout sampling settings:
    dicts with prompt, completion, answer, reward (main reward), length, finished."""
    import jax

    from rl4llm.train import evaluate as evaluate_lib

    examples = policy.setup.eval_examples[:num_prompts]
    completions = evaluate_lib.generate_scored(
        policy.setup.model_cfg, policy.params, policy.setup.tokenizer,
        [e.prompt for e in examples], [e.answer for e in examples], jax.random.key(seed),
        policy.setup.rollout_cfg, policy.setup.eval_spec, policy.setup.score_fn,
    )
    return [
        dict(prompt=e.prompt, completion=text, answer=e.answer, reward=float(r), length=int(n), finished=bool(f))
        for e, text, r, n, f in zip(
            examples, completions.texts, completions.rewards, completions.lengths, completions.finished
        )
    ]


def evaluate_checkpoint(
    workdir: str, ks: Sequence[int], *, stage: str = "auto", step: int | None = None,
    num_examples: int | None = None, seed: int | None = None,
) -> dict:
    """Evaluates checkpoint (stage, step) of `workdir` (`resolve_checkpoint`) on the run's held-out split with
    n = max(ks) samples per prompt (`rl4llm.train.evaluate.evaluate`), writes the result to
    `eval_path(workdir, stage, step)` and returns it: {"workdir", "stage", "step", "n", "k", "num_examples",
    "seed", "metrics"}. The key is the trainer's evaluation key, fold_in(key(config.seed), 2) (`train.loop.run_rl`),
    unless `seed` is given (key(seed)): with the run's own k and num_examples the metrics equal those the
    run logged at that step."""
    import jax

    from rl4llm.train import evaluate as evaluate_lib
    from rl4llm.train import urpo

    if not ks or not all(isinstance(k, int) and k >= 1 for k in ks):
        raise ValueError(f"k={list(ks)}: every k must be an integer >= 1")
    ks = sorted(set(ks))
    with restore_policy(workdir, stage, step, num_examples=num_examples) as policy:
        spec = dataclasses.replace(policy.setup.eval_spec, pass_n=max(ks), pass_k=tuple(ks))
        key = jax.random.key(seed) if seed is not None else jax.random.fold_in(jax.random.key(policy.config.seed), 2)
        metrics = evaluate_lib.evaluate(
            policy.setup.model_cfg, policy.params, policy.setup.tokenizer, policy.setup.eval_examples, key, spec,
            policy.setup.score_fn,
        )
        if policy.config.urpo.eval_pairs:  # the referee's held-out accuracy (URPO), as the run logs it
            metrics.update(urpo.evaluate_referee(policy.config, policy.setup, policy.params, key))
        result = {
            "workdir": os.path.abspath(workdir),
            "stage": policy.stage,
            "step": policy.step,
            "n": max(ks),
            "k": ks,
            "num_examples": len(policy.setup.eval_examples),
            "seed": seed,
            "metrics": metrics,
        }
    with open(eval_path(workdir, policy.stage, policy.step), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    return result


def format_evaluation(result: dict) -> str:
    """An `evaluate_checkpoint` result as a two-column table."""
    title = (
        f"{result['workdir']}: {result['stage']} step {result['step']}, "
        f"{result['num_examples']} held-out prompts, n={result['n']} samples each"
    )
    return "\n".join([title] + [f"  {key.removeprefix('eval/'):32s} {v:10.4f}" for key, v in result["metrics"].items()])
