"""Knapsack RL rollout-budget allocation (Li et al. 2025, "Knapsack RL: Unlocking Exploration of LLMs via Optimizing
Budget Allocation"; digest ``rewards_and_data_efficiency.md`` §7.3).

A step has a fixed budget of ``budget = B·G`` rollouts for its B prompts. Each prompt's success rate p_i (from its
last rollouts) decides how many it gets:

* unseen prompts (p unknown): ``default_n`` (= G);
* p ∈ {0, 1}: ``min_n`` (no gradient expected; enough to notice a change);
* 0 < p < 1: ``min_n`` plus ``k_i`` extras, the 0/1 multiple-choice knapsack
  ``max Σ_i v(min_n + k_i, p_i)`` s.t. ``Σ_i k_i = R`` (R = the budget left after the base counts),
  ``0 <= k_i <= max_n - min_n``, with the value of N rollouts
  ``v(N, p) = (1 - p^N - (1-p)^N) · p(1-p)^2`` = P[the group has both outcomes] × information gain ≈ p(1-p)^2.

Fallback (the paper's): if the prompts with 0 < p < 1 are all covered, ``Σ_i min(max_n, cost_i) - min_n <= R`` with
``cost_i = int(ln(1-α)/ln(max(p, 1-p)))`` rollouts to see both outcomes with confidence α = 0.9, they get
``min(max_n, cost_i)`` and the surplus goes uniformly to the p = 0 prompts (hard prompts get large budgets), or to
all prompts when none has p = 0. The DP here lets ``k_i = 0`` (the paper's code starts at 1), so it is feasible for
any R. Counts always sum to ``budget``.
"""

from __future__ import annotations

import math

import numpy as np


def knapsack_value(n: np.ndarray | int, p: np.ndarray | float) -> np.ndarray:
    """``v(N, p) = (1 - p^N - (1-p)^N) · p · (1-p)^2``."""
    n = np.asarray(n, np.float64)
    p = np.asarray(p, np.float64)
    return (1.0 - p**n - (1.0 - p) ** n) * p * (1.0 - p) ** 2


def coverage_cost(p: float, max_n: int, confidence: float = 0.9) -> int:
    """Rollouts to see both outcomes with probability ``confidence``: ``int(ln(1-α)/ln(max(p, 1-p)))``, at most
    ``max_n`` (``max_n`` for p ∈ {0, 1})."""
    q = max(p, 1.0 - p)
    if q >= 1.0:
        return max_n
    return min(max_n, int(math.log(1.0 - confidence) / math.log(q)))


def _spread(counts: np.ndarray, idx: np.ndarray, amount: int) -> None:
    """Adds ``amount`` to ``counts[idx]`` as evenly as possible (the first ones get the remainder)."""
    if amount <= 0 or idx.size == 0:
        return
    counts[idx] += amount // idx.size
    counts[idx[: amount % idx.size]] += 1


def solve_knapsack(p: np.ndarray, extras: int, *, min_n: int, max_extra: int) -> np.ndarray:  # [m] -> [m]
    """Extras ``k_i ∈ [0, max_extra]`` with ``Σ k_i = extras`` maximising ``Σ v(min_n + k_i, p_i)`` (exact DP over the
    budget; ties go to fewer extras for earlier prompts). ValueError if ``extras > m·max_extra``."""
    m = len(p)
    if extras > m * max_extra:
        raise ValueError(f"cannot place {extras} extra rollouts on {m} prompts of at most {max_extra} extras")
    ks = np.arange(min(max_extra, extras) + 1)
    values = knapsack_value(min_n + ks[None, :], np.asarray(p)[:, None])  # [m, K+1]
    best = np.full(extras + 1, -np.inf)
    best[0] = 0.0
    choice = np.zeros((m, extras + 1), np.int64)
    for i in range(m):
        candidates = np.full((ks.size, extras + 1), -np.inf)  # [k, r]: best[r - k] + v_i(k)
        for k in ks:
            candidates[k, k:] = best[: extras + 1 - k] + values[i, k]
        choice[i] = np.argmax(candidates, axis=0)
        best = candidates[choice[i], np.arange(extras + 1)]
    out = np.zeros(m, np.int64)
    r = extras
    for i in reversed(range(m)):
        out[i] = choice[i, r]
        r -= out[i]
    return out


def allocate(
    p: np.ndarray,  # [B] success rates; negative = unseen
    budget: int,
    *,
    default_n: int,
    min_n: int = 2,
    max_n: int = 64,
    confidence: float = 0.9,
) -> np.ndarray:  # [B] int rollouts per prompt, summing to budget
    """Rollouts per prompt (module docstring). ValueError when the base counts exceed the budget."""
    p = np.asarray(p, np.float64)
    unseen = p < 0
    extreme = ~unseen & ((p <= 0) | (p >= 1))
    effective = np.flatnonzero(~unseen & ~extreme)
    counts = np.where(unseen, default_n, min_n).astype(np.int64)
    remaining = budget - int(counts.sum())
    if remaining < 0:
        raise ValueError(f"base rollouts {int(counts.sum())} exceed the budget {budget}; lower min_n/default_n")
    covered = np.array([coverage_cost(p[i], max_n, confidence) for i in effective], np.int64)
    need = int(np.maximum(covered - min_n, 0).sum())
    if need <= remaining:  # every informative prompt covered: the surplus goes to the hardest ones
        counts[effective] = np.maximum(covered, min_n)
        hard = np.flatnonzero(~unseen & (p <= 0))
        _spread(counts, hard if hard.size else np.arange(len(p)), remaining - need)
    else:
        counts[effective] += solve_knapsack(p[effective], remaining, min_n=min_n, max_extra=max_n - min_n)
    return counts
