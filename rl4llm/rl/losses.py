"""Policy losses: `(logp, old_logp, advantages, mask, *, <hyper-parameters>, agg_mode, ...) -> (loss, metrics)`.

Shapes: `logp, old_logp, mask: [N, T]`; `advantages: [N]` (broadcast over tokens) or `[N, T]`.
`loss` is a scalar to minimise; `metrics` is a dict of scalars (masked means over the given batch).

Common keyword arguments:
- `agg_mode`: a mode of `aggregation.aggregate` (default "token-mean").
- `agg_weights[N, T]`: if given, the loss is `Σ L·agg_weights` instead of `aggregate(L, mask, agg_mode)`.
  This is the micro-batching path: weights come from `aggregation_weights` on the whole batch's mask.
- `is_weights[N, T]`: per-token importance weights (e.g. truncated IS against the sampler), multiplied
  into the per-token loss after clipping (verl `rollout_is_weights`). Treated as constants.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from rl4llm.rl.aggregation import aggregate, masked_mean, weighted_sum

Metrics = dict[str, jax.Array]

_LOG_RATIO_CLAMP = 20.0  # verl clamps the token log-ratio to ±20 before exp


def _token_advantages(advantages: jax.Array) -> jax.Array:  # [N] | [N, T] -> [N, T] (or [N, 1])
    return advantages[:, None] if advantages.ndim == 1 else advantages


def _reduce(
    token_loss: jax.Array,  # [N, T]
    mask: jax.Array,  # [N, T]
    agg_mode: str,
    agg_weights: Optional[jax.Array],
    is_weights: Optional[jax.Array],
) -> jax.Array:
    if is_weights is not None:
        token_loss = token_loss * jax.lax.stop_gradient(is_weights)
    if agg_weights is not None:
        return weighted_sum(token_loss, agg_weights)
    return aggregate(token_loss, mask, agg_mode)


def _masked_max(x: jax.Array, mask: jax.Array) -> jax.Array:
    return jnp.max(jnp.where(mask != 0, x, -jnp.inf))


def _masked_min(x: jax.Array, mask: jax.Array) -> jax.Array:
    return jnp.min(jnp.where(mask != 0, x, jnp.inf))


def _ratio_metrics(ratio: jax.Array, mask: jax.Array) -> Metrics:
    ratio = jax.lax.stop_gradient(ratio)
    return {
        "ratio_mean": masked_mean(ratio, mask),
        "ratio_max": _masked_max(ratio, mask),
        "ratio_min": _masked_min(ratio, mask),
    }


def ppo_clip(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: Optional[float] = 3.0,
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """PPO clipped surrogate with asymmetric ("clip-higher") and dual clipping — verl "vanilla" exactly.

    Schulman et al. 2017 (PPO); Ye et al. 2020 (dual-clip); Yu et al. 2025 (DAPO clip-higher).
    ```
    lr = clip(logp − old_logp, −20, 20);  ρ = exp(lr)
    L1 = −A·ρ;  L2 = −A·clip(ρ, 1 − clip_low, 1 + clip_high);  Lc = max(L1, L2)
    L  = min(Lc, −A·dual_clip) if A < 0 else Lc          (dual-clip only for negative advantages)
    loss = aggregate(L·is_weights, mask, agg_mode)
    ```
    `dual_clip=None` disables dual clipping (verl always applies it, c=3 by default; must be > 1).
    Metrics: clip_frac = mean[L2 > L1], clip_frac_lower = mean[(Lc > −A·c) & (A < 0)],
    approx_kl = mean(−lr) (verl `ppo_kl`), ratio_mean/max/min over valid tokens.
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (or None to disable), got {dual_clip}")
    adv = _token_advantages(advantages)
    log_ratio = jnp.clip(logp - old_logp, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    ratio = jnp.exp(log_ratio)
    loss1 = -adv * ratio
    loss2 = -adv * jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    clipped = jnp.maximum(loss1, loss2)
    if dual_clip is None:
        token_loss = clipped
        lower = jnp.zeros_like(clipped)
    else:
        loss3 = -adv * dual_clip
        token_loss = jnp.where(adv < 0, jnp.minimum(loss3, clipped), clipped)
        lower = ((clipped > loss3) & (adv < 0)).astype(jnp.float32)
    loss = _reduce(token_loss, mask, agg_mode, agg_weights, is_weights)
    metrics = {
        "clip_frac": masked_mean((loss2 > loss1).astype(jnp.float32), mask),
        "clip_frac_lower": masked_mean(lower, mask),
        "approx_kl": masked_mean(jax.lax.stop_gradient(-log_ratio), mask),
        **_ratio_metrics(ratio, mask),
    }
    return loss, metrics
