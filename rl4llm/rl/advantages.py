"""Advantage estimators (pure functions; verl `core_algos` conventions unless a docstring says otherwise).

Shapes: N sequences, T tokens. `scores[N]` is the scalar outcome reward of each sequence,
`group_ids[N]` are ints in [0, num_groups) naming the prompt each sequence answers; groups need not be
contiguous or equal-sized (rows with an id outside that range are dropped from every group statistic).
`num_groups` must be static under jit. Outcome estimators return `[N]`; losses broadcast over tokens.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _float(x: jax.Array) -> jax.Array:
    return jnp.asarray(x, jnp.result_type(x, jnp.float32))


def _one_hot(group_ids: jax.Array, num_groups: int) -> jax.Array:  # [N] -> [N, G]
    return (group_ids[:, None] == jnp.arange(num_groups)[None, :]).astype(jnp.float32)


def group_sum(values: jax.Array, group_ids: jax.Array, num_groups: int) -> jax.Array:  # [N] -> [G]
    """Sum of `values[N]` within each group.

    Computed as a dense one-hot contraction ([N, G] intermediate) rather than a scatter: deterministic
    on every backend, and shardable over N under both Auto and Explicit mesh axes.
    """
    return jnp.sum(_one_hot(group_ids, num_groups) * values[:, None], axis=0)


def to_members(stats: jax.Array, group_ids: jax.Array, num_groups: int) -> jax.Array:  # [G] -> [N]
    """`stats[group_ids]` (0 for ids outside [0, G)), as a one-hot contraction (see `group_sum`)."""
    return jnp.sum(_one_hot(group_ids, num_groups) * stats[None, :], axis=1)


def group_count(group_ids: jax.Array, num_groups: int) -> jax.Array:  # [G]
    """Number of members of each group."""
    return jnp.sum(_one_hot(group_ids, num_groups), axis=0)


def group_mean(values: jax.Array, group_ids: jax.Array, num_groups: int) -> jax.Array:  # [G]
    """Mean of `values[N]` within each group (0 for an empty group)."""
    return group_sum(values, group_ids, num_groups) / jnp.maximum(group_count(group_ids, num_groups), 1.0)


def group_std(values: jax.Array, group_ids: jax.Array, num_groups: int, ddof: int = 1) -> jax.Array:  # [G]
    """Std of `values[N]` within each group, two-pass, `sqrt(Σ(x − μ_g)² / (n_g − ddof))` (torch.std for ddof=1).

    Groups with n_g ≤ ddof get 0.
    """
    count = group_count(group_ids, num_groups)
    centered = values - to_members(group_mean(values, group_ids, num_groups), group_ids, num_groups)
    sq = group_sum(jnp.square(centered), group_ids, num_groups)
    return jnp.sqrt(jnp.where(count > ddof, sq / jnp.maximum(count - ddof, 1.0), 0.0))


def grpo(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    *,
    num_groups: int,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> jax.Array:  # [N]
    """GRPO group-relative advantage (Shao et al. 2024, DeepSeekMath; verl `compute_grpo_outcome_advantage`).

    `A_i = (s_i − μ_g)/(σ_g + eps)` with μ_g the group mean and σ_g the unbiased (n−1) group std;
    a singleton group has μ=0, σ=1 (so A = s/(1+eps)). `normalize_std=False` gives Dr.GRPO
    (Liu et al. 2025, "Understanding R1-Zero-Like Training"): `A_i = s_i − μ_g`. verl's loop semantics
    (eps added to σ, not inside a sqrt); TRL uses eps=1e-4.
    """
    scores = _float(scores)
    count = to_members(group_count(group_ids, num_groups), group_ids, num_groups)  # [N]
    singleton = count <= 1
    mean = jnp.where(singleton, 0.0, to_members(group_mean(scores, group_ids, num_groups), group_ids, num_groups))
    if not normalize_std:
        return scores - mean
    std = jnp.where(singleton, 1.0, to_members(group_std(scores, group_ids, num_groups), group_ids, num_groups))
    return (scores - mean) / (std + eps)


def rloo(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    *,
    num_groups: int,
) -> jax.Array:  # [N]
    """RLOO leave-one-out baseline (Ahmadian et al. 2024, "Back to Basics"; verl `rloo` loop version).

    For a group of size n > 1: `A_i = s_i·n/(n−1) − μ_g·n/(n−1) = s_i − mean_{j≠i} s_j`.
    A singleton keeps its raw score `A_i = s_i` (verl's loop; `rloo_vectorized` would give 0).
    """
    scores = _float(scores)
    count = to_members(group_count(group_ids, num_groups), group_ids, num_groups)  # [N]
    mean = to_members(group_mean(scores, group_ids, num_groups), group_ids, num_groups)
    scale = count / jnp.maximum(count - 1.0, 1.0)
    return jnp.where(count > 1, scores * scale - mean * scale, scores)
