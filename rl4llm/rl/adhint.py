"""ADHint (Zhang et al. 2025, "ADHint: Adaptive Hints with Difficulty Priors for Reinforcement Learning"): the
advantage and the policy loss of groups that mix unhinted rollouts with rollouts after a prefix of the reference
solution (the hint), the hint trained in the completion as tokens the policy did not sample. The third part, the hint
rate from the sample difficulty prior, is the `adhint` hint schedule (`rl4llm.data.curriculum.adhint_rate`).

A reconstruction (digest §8.3; the paper's code is not released, its abstract names the three parts): the formulas
below are the simplest reading of "Advantage Estimation with Rollout Difficulty Posterior" (`adhint_advantages`) and
of "Consistency-based Gradient Modulation and Selective Masking for Hint Preservation" (`adhint_loss`). Without
hinted rows both are GRPO's: `advantages.grpo` and `losses.ppo_clip` exactly.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from rl4llm.rl.advantages import _float, group_sum, grpo, to_members
from rl4llm.rl.aggregation import require
from rl4llm.rl.losses import Metrics, _reduce, _selected_mean, _token_advantages
from rl4llm.rl.off_policy import _mixed, _trace_tokens


def difficulty_posterior(scores: jax.Array, rows: jax.Array, group_ids: jax.Array, num_groups: int
                         ) -> jax.Array:  # [G]
    """Each group's posterior mean failure rate over its `rows` [N] bool, under a Beta(1, 1) prior:
    `d̂ = (Σ_rows (1 − clip(s, 0, 1)) + 1) / (n_rows + 2)` ((n − k + 1)/(n + 2) for k successes of n binary rewards;
    ½ for a group without such rows)."""
    selected = rows.astype(jnp.float32)
    failures = group_sum(selected * (1.0 - jnp.clip(_float(scores), 0.0, 1.0)), group_ids, num_groups)
    return (failures + 1.0) / (group_sum(selected, group_ids, num_groups) + 2.0)


def adhint_advantages(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    hinted: jax.Array,  # [N] bool: the row's rollout was sampled after a hint
    *,
    num_groups: int,
    eps: float = 1e-6,
) -> jax.Array:  # [N]
    """ADHint's advantage with the rollout difficulty posterior (reconstruction):

    ```
    A_i = (s_i − μ_g)/(σ_g + eps)                         GRPO over the whole group g, hinted and unhinted rows
    d̂_hint, d̂_plain = `difficulty_posterior` of g's hinted and of its unhinted rows
    w_g = min(1, d̂_hint / d̂_plain)                       the hinted rollouts' difficulty relative to the unhinted
    A_i ← w_g·A_i   for a hinted row with A_i > 0          a hinted success counts less than an unhinted one
    ```
    The more the hint made the problem easier, the less its successes are worth: 4 unhinted failures and 4 hinted
    successes give d̂_plain = 5/6, d̂_hint = 1/6, w = 0.2; a hint that did not help (d̂_hint ≥ d̂_plain) leaves
    w = 1. Hinted failures and every unhinted row keep GRPO's advantage; with no hinted row it is `grpo` exactly.

    Departure from the digest's reading "advantages computed separately for hinted and unhinted rollouts": the
    baseline and std are the whole group's. Separate statistics would zero the group hints are for (unhinted all
    fail, hinted all succeed: each part is uniform), so the posterior enters as the scale w_g instead. The
    Beta(1, 1) posterior keeps w > 0 when every hinted rollout succeeds.
    """
    adv = grpo(scores, group_ids, num_groups=num_groups, eps=eps)
    hinted = hinted.astype(bool)
    weight = jnp.minimum(1.0, difficulty_posterior(scores, hinted, group_ids, num_groups)
                         / difficulty_posterior(scores, ~hinted, group_ids, num_groups))
    return jnp.where(hinted & (adv > 0), to_members(weight, group_ids, num_groups) * adv, adv)


def adhint_loss(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    off_policy_mask: Optional[jax.Array] = None,  # [N, T] 1 on the hint's tokens
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: Optional[float] = 3.0,
    mask_threshold: float = 0.05,
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """ADHint's consistency-based gradient modulation and selective masking of the hint tokens (reconstruction):

    ```
    sampled tokens (off = 0): `losses.ppo_clip` (clip_low, clip_high, dual_clip)
    hint tokens (off = 1):    π = π_θ(t) = exp(logp)         (the IS ratio π_θ/π_b with π_b := 1, LUFFY's convention)
                              m = 1[π ≥ τ]·1[A ≥ 0]           (τ = mask_threshold; compared as log π ≥ log τ)
                              L = −A·m·π,  so dL/dlogp = −A·m·sg(π)
    loss = aggregate(L·is_weights, mask, agg_mode)
    ```
    Consistency modulation: a hint token's gradient is weighted by sg(π), the policy's agreement with the hint, so
    a token it finds unlikely moves it little (no over-imitation of off-policy text; plain SFT weights it by 1).
    Selective masking for hint preservation: a hint token the policy disagrees with outright (π < τ) is masked, a
    destructive off-distribution update; so is every hint token of a rollout with a negative advantage (A < 0), which
    would push the reference solution's prefix down: the hint is never unlearned. A tie π = τ keeps the token.
    Every off-policy token is treated as hint (off-policy traces too). Without hint tokens it is `losses.ppo_clip`
    exactly.

    Metrics: `off_policy_frac` (hint tokens / valid tokens); over the valid hint tokens (0 when none):
    `off_is_weight_mean/max/min` (π: the modulation weight before masking; 0 / 1 when none), `off_masked_frac`
    (masked by either rule), `off_low_prob_frac` (π < τ); `ppo_clip`'s over the sampled tokens.
    """
    require("mask_threshold", mask_threshold, 0.0 <= mask_threshold <= 1.0, "must lie in [0, 1]")
    off = _trace_tokens(off_policy_mask, mask)
    hint_logp = jnp.where(off, logp, 0.0)
    policy_prob = jnp.exp(hint_logp)
    adv = _token_advantages(advantages)
    low_prob = hint_logp < jnp.log(mask_threshold)
    kept = ~low_prob & (adv >= 0)
    token_loss, metrics = _mixed(adv, logp, old_logp, mask, off, jnp.where(kept, -adv * policy_prob, 0.0),
                                 policy_prob, 1.0, clip_low, clip_high, True, dual_clip)
    hint_mask = mask * off
    metrics["off_masked_frac"] = _selected_mean((~kept).astype(jnp.float32), hint_mask)
    metrics["off_low_prob_frac"] = _selected_mean(low_prob.astype(jnp.float32), hint_mask)
    return _reduce(token_loss, mask, agg_mode, agg_weights, is_weights), metrics
