"""Combining reward components, and majority-vote pseudo-labels (host numpy, per step).

* :func:`combine` — ``r = main + Σ_k w_k · extra_k`` (``mode="sum"``), or conditionally
  ``r = main + 1[main >= threshold] · Σ_k w_k · extra_k`` (``mode="if_correct"``: e.g. a format or length bonus
  that only counts on a correct answer, GDPO's advice against easy rewards dominating the hard one).
  Per-component GDPO normalisation (normalise each component within its group, then sum) is an advantage
  estimator, not a reward; it takes these components as its input.
* :func:`conditioned` — each extra component as it enters :func:`combine` (the reward components of GDPO).
* :func:`with_model_score` — an outcome reward model's score s in the reward: ``r' = w · s`` (``mode="replace"``)
  or ``r' = r + w · s`` (``mode="add"``: a learned bonus on the rule reward r); ``rl4llm.train.rollouts`` applies it
  to the pipeline's reward.
* :func:`parse_weights` — ``"format_think_answer:0.2,answer_tag:0.1"`` -> ``{"format_think_answer": 0.2, ...}``.
* :func:`majority_vote` — TTRL (Zuo et al. 2025): for a label-free prompt, the pseudo-label of each group is the
  most frequent extracted answer among its G samples (ties -> the answer seen first; samples with no answer do
  not vote; a group where none has an answer gets no label). Each sample is then scored against its group's
  label, so ``r_i = 1[answer_i = majority]`` for exact-match rewards.
"""

from __future__ import annotations

import collections
from typing import Mapping, Sequence

import numpy as np

COMBINE_MODES = ("sum", "if_correct")
REWARD_MODEL_MODES = ("replace", "add")


def combine(
    main: np.ndarray, extras: Mapping[str, np.ndarray], weights: Mapping[str, float], *, mode: str = "sum",
    threshold: float = 1.0,
) -> np.ndarray:
    """The combined reward [N] of the main component [N] and weighted extra components (module docstring)."""
    if set(extras) != set(weights):
        raise ValueError(f"extra components {sorted(extras)} do not match the weights {sorted(weights)}")
    main = np.asarray(main, np.float64)
    bonus = np.zeros_like(main)
    for name, values in conditioned(main, extras, mode=mode, threshold=threshold).items():
        bonus += weights[name] * values
    return (main + bonus).astype(np.float32)


def conditioned(
    main: np.ndarray, extras: Mapping[str, np.ndarray], *, mode: str = "sum", threshold: float = 1.0
) -> dict[str, np.ndarray]:
    """Each extra component [N] (float64) as it enters :func:`combine`: ``extra_k`` (``mode="sum"``) or
    ``1[main >= threshold] · extra_k`` (``mode="if_correct"``), in the order of ``extras``."""
    if mode not in COMBINE_MODES:
        raise ValueError(f"combine mode {mode!r}; known: {', '.join(COMBINE_MODES)}")
    keep = np.asarray(main, np.float64) >= threshold if mode == "if_correct" else True
    return {name: np.where(keep, np.asarray(values, np.float64), 0.0) for name, values in extras.items()}


def with_model_score(rewards: np.ndarray, model_scores: np.ndarray, *, weight: float, mode: str) -> np.ndarray:
    """The reward [N] float32 with the reward model's scores [N] (module docstring)."""
    if mode not in REWARD_MODEL_MODES:
        raise ValueError(f"reward model mode {mode!r}; known: {', '.join(REWARD_MODEL_MODES)}")
    bonus = weight * np.asarray(model_scores, np.float64)
    return (bonus if mode == "replace" else np.asarray(rewards, np.float64) + bonus).astype(np.float32)


def parse_weights(spec: str) -> dict[str, float]:
    """``"a:0.5,b:1"`` -> ``{"a": 0.5, "b": 1.0}``; ``""`` -> ``{}``; ValueError naming the bad item."""
    weights = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, weight = item.partition(":")
        try:
            weights[name.strip()] = float(weight) if sep else 1.0
        except ValueError:
            raise ValueError(f"reward weight item {item!r}: expected name:weight, e.g. answer_tag:0.1") from None
        if not name.strip():
            raise ValueError(f"reward weight item {item!r}: the name is empty")
    return weights


def majority_vote(answers: Sequence[str | None], group_ids: Sequence[int]) -> list[str | None]:
    """Each sample's group pseudo-label [N] (module docstring)."""
    if len(answers) != len(group_ids):
        raise ValueError(f"{len(answers)} answers but {len(group_ids)} group ids")
    votes: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    first_seen: dict[int, dict[str, int]] = collections.defaultdict(dict)
    for i, (answer, group) in enumerate(zip(answers, group_ids)):
        if answer is not None:
            votes[group][answer] += 1
            first_seen[group].setdefault(answer, i)
    labels = {
        group: max(counter, key=lambda a: (counter[a], -first_seen[group][a])) for group, counter in votes.items()
    }
    return [labels.get(group) for group in group_ids]
