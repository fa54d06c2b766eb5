"""Result files of reproduction studies (`experiments/reproduce.py`) and their statistics over seeds.

A study's results are one JSONL file: one record per (arm, seed, step) with the study's metric keys, e.g.
`{"arm": "grpo", "seed": 0, "step": 25, "entropy": 0.11, "eval/greedy_accuracy": 0.70, ...}` (step 0 holds the
shared warm start's evaluation). Missing or non-finite values are written as null and read back as NaN.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Iterable, Sequence

import numpy as np


def write_results(path: str, records: Iterable[dict]) -> int:
    """Writes `records` (dicts with "arm", "seed", "step") to `path` as JSONL, sorted by (arm, seed, step), floats
    rounded to 6 significant digits (the files are committed). Returns the number of records."""
    rows = sorted(records, key=lambda r: (r["arm"], r["seed"], r["step"]))
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")
    return len(rows)


def _clean(value):
    if isinstance(value, float):
        return float(f"{value:.6g}") if math.isfinite(value) else None
    return value


def read_results(path: str) -> list[dict]:
    """The records of a results file (null -> NaN)."""
    with open(path, encoding="utf-8") as f:
        return [{k: (np.nan if v is None else v) for k, v in json.loads(line).items()} for line in f if line.strip()]


@dataclasses.dataclass(frozen=True)
class SeedCurve:
    """A metric of one arm against the step, over seeds: mean and std (ddof = 1; 0 with one seed) at the steps
    that every seed logged."""

    steps: np.ndarray  # [S]
    mean: np.ndarray  # [S]
    std: np.ndarray  # [S]
    values: np.ndarray  # [num_seeds, S]
    seeds: tuple


def seed_curve(records: Sequence[dict], arm: str, key: str) -> SeedCurve:
    """`key` of `arm` over seeds (`SeedCurve`). Steps where a seed has no finite value are left out."""
    per_seed: dict[int, dict[int, float]] = {}
    for r in records:
        if r["arm"] == arm and key in r and np.isfinite(r[key]):
            per_seed.setdefault(r["seed"], {})[r["step"]] = float(r[key])
    if not per_seed:
        raise KeyError(f"no finite {key!r} for arm {arm!r}")
    seeds = tuple(sorted(per_seed))
    steps = np.asarray(sorted(set.intersection(*(set(v) for v in per_seed.values()))), np.int64)
    values = np.asarray([[per_seed[s][t] for t in steps] for s in seeds], np.float64)
    std = values.std(axis=0, ddof=1) if len(seeds) > 1 else np.zeros(len(steps))
    return SeedCurve(steps=steps, mean=values.mean(axis=0), std=std, values=values, seeds=seeds)


def final_values(records: Sequence[dict], arm: str, key: str) -> np.ndarray:
    """`key` of `arm` at each seed's last step that logged it: [num_seeds] (seed order)."""
    last: dict[int, tuple[int, float]] = {}
    for r in records:
        if r["arm"] == arm and key in r and np.isfinite(r[key]):
            if r["seed"] not in last or r["step"] > last[r["seed"]][0]:
                last[r["seed"]] = (r["step"], float(r[key]))
    return np.asarray([last[s][1] for s in sorted(last)], np.float64)


def mean_std(values: Sequence[float]) -> str:
    """"m ± s (n)" of `values` (std with ddof = 1), 3 decimals."""
    values = np.asarray(values, np.float64)
    std = values.std(ddof=1) if values.size > 1 else 0.0
    return f"{values.mean():.3f} ± {std:.3f} (n={values.size})"


def arms(records: Sequence[dict]) -> list[str]:
    """The arms of a study's records, in first-seen order."""
    return list(dict.fromkeys(r["arm"] for r in records))


def _per_seed(records: Sequence[dict], arm: str, key: str) -> dict[int, dict[int, float]]:
    """{seed: {step: value}} of the finite values of `key` for `arm`."""
    out: dict[int, dict[int, float]] = {}
    for r in records:
        if r["arm"] == arm and key in r and np.isfinite(r[key]):
            out.setdefault(r["seed"], {})[r["step"]] = float(r[key])
    return out


def paired_at(records: Sequence[dict], arm: str, x_key: str, y_key: str, window: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(x [P], y [P]) over every seed's steps that logged `y_key` (e.g. the evaluations), x = the mean of `x_key` over
    the `window` logged steps up to and including that step (e.g. the policy entropy of the last few updates, against
    held-out accuracy). Steps without any `x_key` value in the window are left out."""
    xs, ys = [], []
    x_by_seed = _per_seed(records, arm, x_key)
    for seed, y_steps in _per_seed(records, arm, y_key).items():
        x_steps = x_by_seed.get(seed, {})
        for step, y in sorted(y_steps.items()):
            recent = [x_steps[s] for s in sorted(x_steps) if step - window < s <= step]
            if recent:
                xs.append(float(np.mean(recent)))
                ys.append(y)
    return np.asarray(xs, np.float64), np.asarray(ys, np.float64)


def cumulative_curve(records: Sequence[dict], arm: str, key: str) -> SeedCurve:
    """The running sum of `key` over each seed's steps (e.g. generated rollouts -> samples so far), over seeds."""
    per_seed = _per_seed(records, arm, key)
    summed = [{"arm": arm, "seed": seed, "step": step, key: total}
              for seed, steps in per_seed.items()
              for step, total in zip(sorted(steps), np.cumsum([steps[s] for s in sorted(steps)]))]
    return seed_curve(summed, arm, key)
