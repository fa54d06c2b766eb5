"""Length shaping of a batch's rewards (host numpy, after scoring): ``shaped[N] = f(scores[N], lengths[N], ...)``.

All functions share the signature ``(scores, lengths, group_ids, *, max_length, <hyper-parameters>) -> [N]`` so
``config.task.length_shaping`` picks one by name from :data:`LENGTH_SHAPING` and
``config.task.length_shaping_kwargs`` sets its hyper-parameters. ``lengths`` are completion token counts,
``group_ids`` the prompt index of each sample (groups of G completions of one prompt), ``max_length`` the
sampler's ``max_new_tokens``. "Correct" means ``scores >= correct_threshold`` (default 1.0).

* :func:`dapo_overlong` — DAPO soft overlong punishment (Yu et al. 2025; verl ``reward_manager/dapo.py``):
  ``r + clip(-(L - (L_max - L_buf)) / L_buf * factor, -factor, 0)``: 0 up to ``L_max - L_buf``, then linear
  down to ``-factor`` at ``L_max``.
* :func:`dler_truncation` — DLER truncation penalty (Liu et al. 2025, "Doing Length pEnalty Right"):
  ``r * 1[L <= limit]``: any response over the budget scores 0.
* :func:`kimi_length_penalty` — Kimi k1.5 (2025) group length reward, as re-implemented in hkust-nlp/Laser
  ``compute_kimi_penalty``: ``λ_i = 0.5 - (L_i - min_g L) / (max_g L - min_g L)`` (0 when all lengths in the group
  are equal); ``r + weight * (λ_i if correct else min(0, λ_i))``.
* :func:`laser` — LASER (Liu et al. 2025, "Learn to Reason Efficiently with Adaptive Length-based Reward
  Shaping"): ``r + alpha * 1[correct and L <= target]``.
* :func:`laser_d` — LASER-D: the target depends on the group's difficulty from its accuracy ``acc_g`` (fraction
  correct): easy ``acc_g >= 2/3`` -> ``target_easy``, medium ``[1/3, 2/3)`` -> ``target_medium``, hard ->
  ``target_hard``.
  (The paper re-chooses the three targets periodically from a monitoring set; here they are fixed
  hyper-parameters.)
"""

from __future__ import annotations

import numpy as np


def _correct(scores: np.ndarray, threshold: float) -> np.ndarray:
    return np.asarray(scores) >= threshold


def dapo_overlong(scores, lengths, group_ids, *, max_length: int, buffer: int = 0, factor: float = 1.0) -> np.ndarray:
    """DAPO soft overlong punishment added to ``scores`` [N] (module docstring). ``buffer=0``: L_buf = L_max / 4."""
    del group_ids
    buffer = buffer or max(1, max_length // 4)
    exceed = np.asarray(lengths, np.float64) - (max_length - buffer)
    penalty = np.clip(-exceed / buffer * factor, -factor, 0.0)
    return (np.asarray(scores, np.float64) + penalty).astype(np.float32)


def dler_truncation(scores, lengths, group_ids, *, max_length: int, limit: int = 0) -> np.ndarray:
    """DLER: ``scores * 1[L <= limit]`` (``limit=0``: ``max_length``, so only truncated responses lose their reward)."""
    del group_ids
    limit = limit or max_length
    return np.where(np.asarray(lengths) <= limit, scores, 0.0).astype(np.float32)


def kimi_length_penalty(
    scores, lengths, group_ids, *, max_length: int, weight: float = 0.4, correct_threshold: float = 1.0
) -> np.ndarray:
    """Kimi k1.5 group length reward (module docstring); Laser's weight 0.4 by default."""
    del max_length
    lengths = np.asarray(lengths, np.float64)
    group_ids = np.asarray(group_ids)
    lam = np.zeros_like(lengths)
    for g in np.unique(group_ids):
        members = group_ids == g
        low, high = lengths[members].min(), lengths[members].max()
        if high > low:
            lam[members] = 0.5 - (lengths[members] - low) / (high - low)
    bonus = np.where(_correct(scores, correct_threshold), lam, np.minimum(0.0, lam))
    return (np.asarray(scores, np.float64) + weight * bonus).astype(np.float32)


def laser(
    scores, lengths, group_ids, *, max_length: int, target: int = 0, alpha: float = 0.5, correct_threshold: float = 1.0
) -> np.ndarray:
    """LASER step reward: ``scores + alpha * 1[correct and L <= target]`` (``target=0``: ``max_length // 2``)."""
    del group_ids
    target = target or max_length // 2
    bonus = _correct(scores, correct_threshold) & (np.asarray(lengths) <= target)
    return (np.asarray(scores, np.float64) + alpha * bonus).astype(np.float32)


def difficulty_levels(scores, group_ids, *, correct_threshold: float = 1.0) -> np.ndarray:
    """LASER-D difficulty of each sample's group [N]: 0 easy (acc >= 2/3), 1 medium ([1/3, 2/3)), 2 hard (< 1/3)."""
    correct = _correct(scores, correct_threshold).astype(np.float64)
    group_ids = np.asarray(group_ids)
    accuracy = np.zeros_like(correct)
    for g in np.unique(group_ids):
        accuracy[group_ids == g] = correct[group_ids == g].mean()
    # Thresholds compared with a tolerance so 2 of 3 correct counts as >= 2/3.
    return np.where(accuracy >= 2 / 3 - 1e-9, 0, np.where(accuracy >= 1 / 3 - 1e-9, 1, 2))


def laser_d(
    scores,
    lengths,
    group_ids,
    *,
    max_length: int,
    target_easy: int = 0,
    target_medium: int = 0,
    target_hard: int = 0,
    alpha: float = 0.5,
    correct_threshold: float = 1.0,
) -> np.ndarray:
    """LASER-D: LASER with the target of the group's difficulty level (defaults: L_max/4, L_max/2, L_max)."""
    targets = np.array(
        [target_easy or max_length // 4, target_medium or max_length // 2, target_hard or max_length], np.int64
    )
    per_sample = targets[difficulty_levels(scores, group_ids, correct_threshold=correct_threshold)]
    bonus = _correct(scores, correct_threshold) & (np.asarray(lengths) <= per_sample)
    return (np.asarray(scores, np.float64) + alpha * bonus).astype(np.float32)


LENGTH_SHAPING = {
    "dapo_overlong": dapo_overlong,
    "dler_truncation": dler_truncation,
    "kimi_length_penalty": kimi_length_penalty,
    "laser": laser,
    "laser_d": laser_d,
}
# Shapers whose output stays within the task reward's range (they only zero rewards); the others add bonuses or
# penalties, so the shaped reward leaves [0, 1] (what `rl.advantages.bnpo` assumes by default).
RANGE_PRESERVING = frozenset({"dler_truncation"})
# Arguments every shaping function receives from the trainer (not hyper-parameters).
STANDARD_INPUTS = ("scores", "lengths", "group_ids", "max_length")
