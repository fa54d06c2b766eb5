"""D³S: dynamic dual-level down-sampling of a GRPO batch (Wang et al. 2025, "Learning More with Less: A Dynamic
Dual-Level Down-Sampling Framework for Efficient Policy Optimization", arXiv 2509.22115).

Only the paper's abstract was available (no code or method section), so the pieces below take the abstract's
definitions and fill the rest with the simplest exact choices, each stated where it is made:

* sample level (`max_variance_subset`): keep the k rollouts whose advantages have the largest variance, across the
  whole batch (D³S) or within each group (D³S-I). Exactly: a max-variance k-subset of real numbers is the j largest
  and k − j smallest for some j (swapping a kept value above the subset's mean for a larger dropped one raises the
  variance, and symmetrically below it), so scanning j = 0..k over the sorted values finds it. With 0/1 rewards the
  kept subset is as balanced between right and wrong as the counts allow.
* token level (`advantage_entropy_token_mask`): keep the tokens whose |A_{i,t}|·H_{i,t} is in the top fraction q of
  the batch's valid tokens (as 80/20's forking tokens, ties at the threshold kept); the others get no gradient and
  the loss's normaliser still counts them (as 80/20; the paper's choice is not known).
* schedule (`keep_fraction`): "starts with aggressive down-sampling ... and gradually relaxes" — here linear in the
  RL step from the start fraction to 1 (no down-sampling) over the anneal steps, then 1 (0 anneal steps: constant).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from rl4llm.rl.advantages import group_count, group_rank, group_sum, to_members
from rl4llm.rl.aggregation import masked_quantile, require


def max_variance_subset(
    advantages: jax.Array,  # [N] one advantage per rollout
    group_ids: jax.Array,  # [N] int in [0, num_groups)
    *,
    num_groups: int,
    keep: int,
) -> jax.Array:  # [N] float {0, 1}
    """In each group, the `keep` rows whose advantages have the largest (population) variance:

    ```
    S_j = {the j largest} ∪ {the keep − j smallest}  (order: value, then row index),
    S = S_j*,  j* = the smallest j of maximal Var(A over S_j), j = 0..keep
    ```
    Groups of at most `keep` rows are kept whole. D³S's cross-group selection is one group (all group_ids 0).
    """
    require("keep", keep, keep >= 1, "must be >= 1")
    advantages = advantages.astype(jnp.float32)
    rank = group_rank(advantages, group_ids)  # [N] ascending within the group
    size = to_members(group_count(group_ids, num_groups), group_ids, num_groups)  # [N]
    top = jnp.arange(keep + 1)[:, None]  # [J, 1]: j rows from the top
    chosen = (rank[None, :] < keep - top) | (rank[None, :] >= size[None, :] - top)  # [J, N]
    sums = jax.vmap(lambda c: group_sum(jnp.where(c, advantages, 0.0), group_ids, num_groups))(chosen)  # [J, G]
    squares = jax.vmap(lambda c: group_sum(jnp.where(c, advantages**2, 0.0), group_ids, num_groups))(chosen)
    variance = squares / keep - (sums / keep) ** 2  # [J, G]
    best = jnp.argmax(variance, axis=0)  # [G]: the first maximum
    keep_row = jnp.take_along_axis(chosen, best[group_ids][None, :], axis=0)[0]
    return jnp.where(size <= keep, 1.0, keep_row.astype(jnp.float32))


def advantage_entropy_token_mask(
    advantages: jax.Array,  # [N] or [N, T]
    entropy: jax.Array,  # [N, T] token entropy of the rollout policy
    mask: jax.Array,  # [N, T]
    *,
    keep_frac: float,
) -> jax.Array:  # [N, T] float {0, 1}
    """D³S token selection: `1[|A_{i,t}|·H_{i,t} ≥ quantile_{1−q}(over the valid tokens of the batch)]·m`, q =
    keep_frac (linear-interpolated quantile; ties at the threshold kept). q = 1 keeps every valid token."""
    require("keep_frac", keep_frac, 0 < keep_frac <= 1, "must lie in (0, 1]")
    adv = advantages if advantages.ndim == 2 else advantages[:, None]
    score = jnp.abs(adv) * jax.lax.stop_gradient(entropy)
    threshold = masked_quantile(score, mask, 1.0 - keep_frac)
    return ((score >= threshold) & (mask != 0)).astype(jnp.float32)


def keep_fraction(step: int, *, start: float, anneal_steps: int) -> float:
    """The fraction kept at RL step `step` (1-based): `start` at step 1, rising linearly to 1 at step
    1 + anneal_steps, then 1 (D³S's schedule from aggressive to no down-sampling; its shape is not published);
    anneal_steps = 0 keeps `start` throughout."""
    require("start", start, 0 < start <= 1, "must lie in (0, 1]")
    if anneal_steps <= 0:
        return start
    return min(1.0, start + (1.0 - start) * (step - 1) / anneal_steps)


def rows_kept(fraction: float, rows: int) -> int:
    """How many of `rows` a keep fraction keeps: ceil(fraction·rows), at least 2 (a variance needs two)."""
    return min(rows, max(2, math.ceil(fraction * rows - 1e-9)))
