"""Metrics sinks: `metrics.jsonl` (one JSON object per logged step), TensorBoard events, console.

Every record has `stage` ("sft" or "rl") and `step`; a resumed run appends, so readers take the
last record of each (stage, step) — `read_metrics` does that.
"""

from __future__ import annotations

import json
import math
import os
import sys

import jax.numpy as jnp
import numpy as np

from rl4llm.rl import aggregation
from rl4llm.train import progress as progress_lib

# Console columns: (metric key, header, format).
CONSOLE_COLUMNS = (
    ("reward", "reward", "{:.3f}"),
    ("eval/greedy_accuracy", "eval_acc", "{:.3f}"),
    ("entropy", "entropy", "{:.3f}"),
    ("kl", "kl", "{:.4f}"),
    ("clip_frac", "clip", "{:.3f}"),
    ("response_length", "resp_len", "{:.1f}"),
    ("tokens_per_s", "tok/s", "{:.0f}"),
)


def extremum(key: str) -> str | None:
    """How a loss metric combines over the micro-batches of an update (the kernels' metric contract): a key ending
    in `_max` / `_min` is a maximum / minimum over the batch's tokens ("max" / "min": the largest / smallest of the
    parts'); every other is a token mean (None: the parts' token-weighted (sum, count), divided once). A step's
    metrics are the means over its updates of each update's (`train.step.learn_on_rollouts`)."""
    return "max" if key.endswith("_max") else "min" if key.endswith("_min") else None


def combine_extremes(a: dict, b: dict) -> dict:
    """Maxima / minima (`extremum`) of two parts of a batch, key by key."""
    return {k: (jnp.maximum if extremum(k) == "max" else jnp.minimum)(a[k], b[k]) for k in a}


def no_extremes(shapes: dict) -> dict:
    """The identity of `combine_extremes`: -inf for maxima, +inf for minima (shapes: abstract values)."""
    return {k: jnp.full(s.shape, -jnp.inf if extremum(k) == "max" else jnp.inf, s.dtype) for k, s in shapes.items()}


def token_statistics(logp, entropy, advantages, mask) -> dict:  # [N, T] each
    """Whole-batch token statistics: entropy percentiles and the log-prob/advantage covariance.

    `cov = mean_valid((A − mean_valid A)·(logp − mean_valid logp))`, the centred token covariance whose
    sign predicts the entropy change under policy gradient (Cui et al. 2025, "The Entropy Mechanism of
    RL for Reasoning LMs", ΔH ≈ −η·Cov(log π, A)).
    """
    centred_adv = advantages - aggregation.masked_mean(advantages, mask)
    centred_logp = logp - aggregation.masked_mean(logp, mask)
    stats = {"cov_logp_adv": aggregation.masked_mean(centred_adv * centred_logp, mask)}
    for q in (10, 50, 90):
        stats[f"entropy_p{q}"] = aggregation.masked_quantile(entropy, mask, q / 100)
    return stats


def _to_python(value):
    value = np.asarray(value).item() if np.ndim(value) == 0 else np.asarray(value).tolist()
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _summary_writer_class():
    """tensorboardX's SummaryWriter, imported with torch hidden. When torch is installed (the test extra installs
    it), tensorboardX imports it only to accept torch tensors: about 5 s and 150 MB at every start of a binary.
    rl4llm passes floats. Setting `sys.modules["torch"] = None` makes `import torch` raise ImportError, which
    tensorboardX tolerates; the entry is removed afterwards, so later `import torch` works as usual."""
    if "torch" not in sys.modules and "tensorboardX" not in sys.modules:
        sys.modules["torch"] = None
        try:
            from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
        finally:
            del sys.modules["torch"]
    from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel,reimported

    return SummaryWriter


class MetricsWriter:
    """Writes metrics of a run to `<workdir>/metrics.jsonl` and `<workdir>/tensorboard/`."""

    def __init__(self, workdir: str):
        os.makedirs(workdir, exist_ok=True)
        self._jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a", encoding="utf-8")
        self._tb = _summary_writer_class()(os.path.join(workdir, "tensorboard"))

    def write(self, stage: str, step: int, metrics: dict, *, console: bool = True,
              progress: progress_lib.StageProgress | None = None) -> None:
        """Appends the record; on the console, its line (`format_console_line`), ending with the stage's
        progress (`StageProgress.suffix`) when given."""
        record = {"stage": stage, "step": int(step), **{k: _to_python(v) for k, v in metrics.items()}}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        for key, value in record.items():
            if isinstance(value, (int, float)) and key != "step":
                self._tb.add_scalar(f"{stage}/{key}", value, step)
        self._tb.flush()
        if console:
            line = format_console_line(record)
            if progress is None:
                print(line, flush=True)
            else:
                progress.write(f"{line} | {progress.suffix()}")

    def close(self) -> None:
        self._jsonl.close()
        self._tb.close()


class NullWriter:
    """A MetricsWriter that writes nothing: every process but process 0 of a multi-host run."""

    def write(self, stage: str, step: int, metrics: dict, *, console: bool = True, progress=None) -> None:
        del stage, step, metrics, console, progress

    def close(self) -> None:
        pass


def format_console_line(record: dict) -> str:
    """`[rl] step   40 | reward 0.412 | eval_acc 0.355 | ...` (only the metrics present)."""
    parts = [f"[{record['stage']}] step {record['step']:>4d}"]
    if "loss" in record:
        parts.append(f"loss {record['loss']:.4f}")
    for key, header, fmt in CONSOLE_COLUMNS:
        if record.get(key) is not None:
            parts.append(f"{header} {fmt.format(record[key])}")
    return " | ".join(parts)


def read_metrics(workdir: str, stage: str | None = None) -> list[dict]:
    """Records of `metrics.jsonl`, the last one of each (stage, step), sorted by stage order then step."""
    path = os.path.join(workdir, "metrics.jsonl")
    latest = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if stage is None or record["stage"] == stage:
                latest[(record["stage"], record["step"])] = record
    order = {"sft": 0, "rl": 1}
    return [latest[k] for k in sorted(latest, key=lambda k: (order.get(k[0], 2), k[0], k[1]))]
