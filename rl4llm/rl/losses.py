"""Policy losses: `(logp, old_logp, advantages, mask, *, <hyper-parameters>, agg_mode, ...) -> (loss, metrics)`.

Shapes: `logp, old_logp, mask: [N, T]`; `advantages: [N]` (broadcast over tokens) or `[N, T]`.
`loss` is a scalar to minimise; `metrics` is a dict of scalars (masked means over the given batch).

Common keyword arguments:
- `agg_mode`: a mode of `aggregation.aggregate` (default "token-mean").
- `agg_weights[N, T]`: if given, the loss is `Σ L·agg_weights` instead of `aggregate(L, mask, agg_mode)`.
  This is the micro-batching path: weights come from `aggregation_weights` on the whole batch's mask.
- `is_weights[N, T]`: per-token importance weights (e.g. truncated IS against the sampler), multiplied
  into the per-token loss after clipping (verl `rollout_is_weights`). Treated as constants.
- `token_stats[N, T]` (losses that select or weight tokens by statistics of the batch: clip_cov, kl_cov,
  lp_reg, hapo, steer): the per-token selection / score / weight computed on the WHOLE minibatch by the
  loss's `*_selection` function (`registry.TOKEN_STATISTICS`), sliced to the micro-batch. None: computed
  from the arrays given. Passing the whole-minibatch values makes these losses, and their gradients,
  independent of micro-batching (verl selects per micro-batch); sharded arrays under jit are global anyway.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from rl4llm.rl.aggregation import (abs_torch_grad, aggregate, clip_torch_grad, masked_mean, masked_quantile, masked_sum,
                                   masked_var, replicated, require, weighted_sum)
from rl4llm.rl.entropy import normalized_entropy_scores, steer_token_weights
from rl4llm.rl.kl import estimate

Metrics = dict[str, jax.Array]

_LOG_RATIO_CLAMP = 20.0  # verl clamps the token log-ratio to ±20 before exp


def _clamped_log_ratio(logp: jax.Array, old_logp: jax.Array) -> jax.Array:  # [N, T]
    """`clamp(logp − old_logp, −20, 20)` as verl (torch.clamp: gradient 1 up to and including the bounds)."""
    return clip_torch_grad(logp - old_logp, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)


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

    Ties (torch/verl conventions, which we match): the clamps (log-ratio ±20, ratio to [1 − clip_low,
    1 + clip_high]) pass the gradient up to and including their bounds (`aggregation.clip_torch_grad`;
    `jnp.clip` would pass ½ there); `max(L1, L2)` and the dual clip's `min` split the gradient ½/½ at a tie
    (torch.maximum / torch.min do too). So on-policy (ρ = 1 exactly, every first update on a rollout batch)
    dL/dlogp_t = −A_t·w_t (w = aggregation weight) whatever the clip ranges, clip_low = 0 or clip_high = 0
    included; at ρ = c exactly for A < 0 the dual clip halves the gradient (verl too).

    Metrics (masked means over valid tokens): clip_frac = mean[L2 > L1] (verl pg_clipfrac: tokens whose
    gradient the clip cuts), clip_frac_high = mean[A > 0 and ρ > 1 + clip_high], clip_frac_low =
    mean[A < 0 and ρ < 1 − clip_low] (the two sides of clip_frac), dual_clip_frac = mean[(Lc > −A·c) & (A < 0)]
    (verl pg_clipfrac_lower), approx_kl = mean(−lr) (verl `ppo_kl`), ratio_mean/max/min.
    """
    adv = _token_advantages(advantages)
    log_ratio = _clamped_log_ratio(logp, old_logp)
    token_loss, metrics = _ppo_token_loss(adv, log_ratio, mask, clip_low, clip_high, dual_clip)
    return _reduce(token_loss, mask, agg_mode, agg_weights, is_weights), metrics


def _ppo_token_loss(
    adv: jax.Array,  # [N, T] or [N, 1]
    log_ratio: jax.Array,  # [N, T], already clamped
    mask: jax.Array,  # [N, T]
    clip_low: float | jax.Array,  # scalar or per-token [N, T]
    clip_high: float | jax.Array,
    dual_clip: Optional[float],
) -> tuple[jax.Array, Metrics]:
    """verl "vanilla" per-token loss and metrics (see `ppo_clip`)."""
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (or None to disable), got {dual_clip}")
    ratio = jnp.exp(log_ratio)
    loss1 = -adv * ratio
    loss2 = -adv * clip_torch_grad(ratio, 1.0 - clip_low, 1.0 + clip_high)
    clipped = jnp.maximum(loss1, loss2)  # tie (e.g. ρ = 1): ½/½, as torch.maximum
    if dual_clip is None:
        token_loss = clipped
        dual = jnp.zeros_like(clipped)
    else:
        loss3 = -adv * dual_clip
        token_loss = jnp.where(adv < 0, jnp.minimum(loss3, clipped), clipped)  # tie: ½/½, as torch.min
        dual = ((clipped > loss3) & (adv < 0)).astype(jnp.float32)
    ratio_sg = jax.lax.stop_gradient(ratio)
    metrics = {
        "clip_frac": masked_mean((loss2 > loss1).astype(jnp.float32), mask),
        "clip_frac_high": _frac((adv > 0) & (ratio_sg > 1.0 + clip_high), mask),
        "clip_frac_low": _frac((adv < 0) & (ratio_sg < 1.0 - clip_low), mask),
        "dual_clip_frac": masked_mean(dual, mask),
        "approx_kl": masked_mean(jax.lax.stop_gradient(-log_ratio), mask),
        **_ratio_metrics(ratio, mask),
    }
    return token_loss, metrics


def _approx_kl(log_ratio: jax.Array, mask: jax.Array) -> jax.Array:
    """verl `ppo_kl`: masked mean of −(logp − old_logp)."""
    return masked_mean(jax.lax.stop_gradient(-log_ratio), mask)


def _frac(condition: jax.Array, mask: jax.Array) -> jax.Array:
    return masked_mean(condition.astype(jnp.float32), mask)


def _selected_mean(values: jax.Array, weights: jax.Array) -> jax.Array:
    """`Σ v·w / Σ w` over the selected tokens (w ≥ 0), 0 when nothing is selected."""
    total = jnp.sum(weights)
    return masked_sum(values, weights) / jnp.where(total > 0, total, 1.0)


def gspo(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    *,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    agg_mode: str = "seq-mean-token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """GSPO sequence-level ratio, token-level gradient (Zheng et al. 2025, "GSPO"; verl `gspo`).

    ```
    lr_seq_i = Σ_t m·(logp − old_logp) / max(Σ_t m, 1)                       (not clamped)
    log s_it = min(logp_it − sg(logp_it) + sg(lr_seq_i), 10);  s = exp(·)
    L = max(−A·s, −A·clip(s, 1 − clip_low, 1 + clip_high))
    ```
    Always aggregated with "seq-mean-token-mean" (`agg_mode` is ignored, as in verl; see
    `registry.FORCED_AGG_MODE`). No dual clip. Defaults are the GSPO paper's ε (3e-4, 4e-4).
    Ties as verl: the `min(·, 10)` and the clip are torch clamps (gradient 1 up to and including the bound),
    `max(L1, L2)` splits ½/½; on-policy (s = 1) dL/dlogp_it = −A_i·w_it for any clip range.
    Metrics: clip_frac = mean[L2 > L1] over valid tokens (verl); seq_clip_frac = fraction of the sequences
    with a valid token whose clip binds: A_i > 0 and s_i > 1 + clip_high, or A_i < 0 and s_i < 1 − clip_low
    (A_i's sign is that of Σ_t m·A: the sequence advantage when `advantages` is [N]).
    """
    adv = _token_advantages(advantages)
    log_ratio = logp - old_logp
    seq_log_ratio = masked_sum(log_ratio, mask, axis=-1) / jnp.maximum(jnp.sum(mask, axis=-1), 1)  # [N]
    log_s = logp - jax.lax.stop_gradient(logp) + jax.lax.stop_gradient(seq_log_ratio)[:, None]
    s = jnp.exp(clip_torch_grad(log_s, None, 10.0))
    loss1 = -adv * s
    loss2 = -adv * clip_torch_grad(s, 1.0 - clip_low, 1.0 + clip_high)
    token_loss = jnp.maximum(loss1, loss2)
    loss = _reduce(token_loss, mask, "seq-mean-token-mean", agg_weights, is_weights)
    seq_s = jnp.exp(jnp.minimum(jax.lax.stop_gradient(seq_log_ratio), 10.0))  # [N]
    seq_adv = masked_sum(jnp.broadcast_to(adv, logp.shape), mask, axis=-1)  # [N], sign of A_i
    seq_clipped = ((seq_adv > 0) & (seq_s > 1.0 + clip_high)) | ((seq_adv < 0) & (seq_s < 1.0 - clip_low))
    has_token = (jnp.sum(mask, axis=-1) > 0).astype(jnp.float32)
    return loss, {
        "clip_frac": _frac(loss2 > loss1, mask),
        "seq_clip_frac": jnp.sum(seq_clipped * has_token) / jnp.maximum(jnp.sum(has_token), 1.0),
        "approx_kl": _approx_kl(log_ratio, mask),
        **_ratio_metrics(s, mask),
    }


def sapo(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    *,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    agg_mode: str = "seq-mean-token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """SAPO soft-gated surrogate (Gao et al. 2025, "Soft Adaptive Policy Optimization"; verl `sapo`).

    `ρ = exp(clip(lr, ±20))`, `τ = τ_pos if A > 0 else τ_neg`, `f = sigmoid(τ(ρ − 1))·4/τ`, `L = −f·A`.
    Always "seq-mean-token-mean" (`agg_mode` is ignored, as in verl). df/dρ = 1 at ρ = 1, so on-policy the
    gradient is REINFORCE's, −A_t·w_t (A = 0 takes τ_neg, irrelevant since L = 0 there).
    Metric gate_mean = masked mean of the soft gate's gradient weight df/dρ = 4·σ(1 − σ), σ = sigmoid(τ(ρ − 1)):
    1 at ρ = 1 (nothing attenuated), → 0 as ρ leaves 1 in either direction — SAPO's smooth counterpart of
    PPO's 0/1 clip weight (1 − gate_mean plays the part of clip_frac).
    """
    adv = _token_advantages(advantages)
    log_ratio = _clamped_log_ratio(logp, old_logp)
    ratio = jnp.exp(log_ratio)
    tau = jnp.where(adv > 0, tau_pos, tau_neg)
    sig = jax.nn.sigmoid(tau * (ratio - 1.0))
    gate = sig * (4.0 / tau)
    loss = _reduce(-gate * adv, mask, "seq-mean-token-mean", agg_weights, is_weights)
    return loss, {
        "gate_mean": masked_mean(jax.lax.stop_gradient(4.0 * sig * (1.0 - sig)), mask),
        "approx_kl": _approx_kl(log_ratio, mask),
        **_ratio_metrics(ratio, mask),
    }


def cispo(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    *,
    clip_low: float = 1.0,
    clip_high: float = 0.2,
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """CISPO clipped-IS-weight REINFORCE (MiniMax-M1, 2025; verl `cispo`).

    `ρ = exp(clip(lr, ±20))`; `L = −sg(clip(ρ, 1 − clip_low, 1 + clip_high))·A·logp`: every token keeps a
    gradient, only its weight is truncated. Defaults: upper cap only (clip_low = 1 makes the lower bound
    0, same as verl's example clip_ratio_low = 10); TRL instead caps at an absolute `epsilon_high`.
    No tie issue: the weight is a constant, so on-policy (ρ = 1, weight 1) dL/dlogp_t = −A_t·w_t.
    Metrics: is_clip_frac = fraction of valid tokens whose weight was truncated (ρ outside [1 − clip_low,
    1 + clip_high], either bound); is_weight_mean = masked mean of the truncated weight.
    """
    adv = _token_advantages(advantages)
    log_ratio = _clamped_log_ratio(logp, old_logp)
    ratio = jax.lax.stop_gradient(jnp.exp(log_ratio))
    clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    token_loss = -clipped * adv * logp
    loss = _reduce(token_loss, mask, agg_mode, agg_weights, is_weights)
    return loss, {
        "is_clip_frac": _frac(ratio != clipped, mask),
        "is_weight_mean": masked_mean(clipped, mask),
        "approx_kl": _approx_kl(log_ratio, mask),
        **_ratio_metrics(ratio, mask),
    }


def reinforce(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    *,
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """Plain policy gradient `L = −A·logp` (Williams 1992), verl `gpg` (GPG, Chu et al. 2025) and
    `bypass_mode` REINFORCE (with `is_weights` as the IS correction). No ratio, no clipping;
    `old_logp` only feeds the approx_kl metric.
    """
    adv = _token_advantages(advantages)
    loss = _reduce(-adv * logp, mask, agg_mode, agg_weights, is_weights)
    return loss, {"approx_kl": _approx_kl(logp - old_logp, mask)}


def gmpo(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    *,
    clip_low: float = 0.4,
    clip_high: float = 0.4,
    agg_mode: str = "seq-mean-token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """GMPO geometric-mean policy optimisation (Zhao et al. 2025, "GMPO"; verl `geo_mean`).

    ```
    lr = logp − old_logp (not clamped);  l = sgn(A)·min(sgn(A)·lr, sgn(A)·clip(lr, −clip_low, clip_high))
    ρ_i = exp(Σ_t m·l / (Σ_t m + 1e-8));  Â_i = Σ_t m·A / (Σ_t m + 1e-8);  L_i = −Â_i·ρ_i
    ```
    (clip in log space: the paper's (e^−0.4, e^0.4) range.) `is_weights` enter as their per-sequence
    geometric mean. The loss is the mean of L_i over sequences (`agg_mode` is ignored, as in verl).
    Difference from verl: rows with no valid token are left out of that mean instead of counting as 0.
    With `agg_weights` the loss is `Σ_i L_i·Σ_t w_it` (weights of "seq-mean-token-mean").

    Ties as verl: the log-space clip is a torch clamp (gradient 1 up to and including its bounds, so a zero
    clip side at lr = 0 still passes the gradient) and the `min` splits ½/½ at lr = clip(lr); on-policy
    (lr = 0) dL/dlogp_it = −Â_i·v_i·m_it/n_i/Σ_i v_i, the sequence-mean policy gradient (A = 0 tokens,
    whose sgn is 0, contribute 0 to ρ_i's exponent — torch.sign(0) = 0 too).
    Metrics: clip_frac_high = mean[A > 0 and lr > clip_high], clip_frac_low = mean[A < 0 and lr < −clip_low]
    (the tokens whose bound binds, i.e. whose gradient is cut), clip_frac = their sum. verl's geo_mean
    pg_clipfrac / pg_clipfrac_lower count a token outside EITHER bound on the A > 0 / A < 0 side, including
    the bound that does not bind (A > 0, lr < −clip_low); ours count only the binding one, as ppo_clip's.
    """
    adv = jnp.broadcast_to(_token_advantages(advantages), logp.shape)
    log_ratio = logp - old_logp
    sign = jnp.sign(adv)
    clamped = clip_torch_grad(log_ratio, -clip_low, clip_high)
    bounded = sign * jnp.minimum(sign * log_ratio, sign * clamped)  # tie: ½/½, as torch.min
    tokens = jnp.sum(mask, axis=-1)  # [N]
    ratio = jnp.exp(masked_sum(bounded, mask, axis=-1) / (tokens + 1e-8))  # [N]
    seq_adv = masked_sum(adv, mask, axis=-1) / (tokens + 1e-8)  # [N]
    seq_loss = -seq_adv * ratio
    if is_weights is not None:
        log_w = jnp.log(jax.lax.stop_gradient(is_weights) + 1e-10)
        seq_loss = seq_loss * jnp.exp(masked_sum(log_w, mask, axis=-1) / (tokens + 1e-8))
    if agg_weights is not None:
        loss = jnp.sum(seq_loss * jnp.sum(agg_weights, axis=-1))
    else:
        valid = (tokens > 0).astype(seq_loss.dtype)
        loss = jnp.sum(seq_loss * valid) / jnp.maximum(jnp.sum(valid), 1.0)
    lr = jax.lax.stop_gradient(log_ratio)
    high = (adv > 0) & (lr > clip_high)
    low = (adv < 0) & (lr < -clip_low)
    return loss, {
        "clip_frac": _frac(high | low, mask),
        "clip_frac_high": _frac(high, mask),
        "clip_frac_low": _frac(low, mask),
        "approx_kl": _approx_kl(log_ratio, mask),
        **_ratio_metrics(jnp.exp(log_ratio), mask),
    }


def _ranks(keys: jax.Array) -> jax.Array:
    """0-based rank of each element of a flat array in ascending order (ties by position)."""
    keys = replicated(keys)
    return jnp.argsort(jnp.argsort(keys, stable=True), stable=True)


def clip_cov_selection(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    key: jax.Array,
    *,
    clip_low: float,
    clip_high: float,
    clip_cov_ratio: float,
    clip_cov_lb: float,
    clip_cov_ub: float,
) -> jax.Array:  # [N, T] float {0, 1}: tokens whose gradient Clip-Cov cuts
    """The tokens `clip_cov` detaches (see its docstring), from statistics of the batch given."""
    require("clip_cov_ratio", clip_cov_ratio, 0 < clip_cov_ratio <= 1, "must lie in (0, 1]")
    require("clip_cov_ub", clip_cov_ub, clip_cov_ub > clip_cov_lb, f"must be > clip_cov_lb={clip_cov_lb}")
    logp = jax.lax.stop_gradient(logp)
    adv = jnp.broadcast_to(_token_advantages(advantages), logp.shape)
    ratio = jnp.exp(logp - old_logp)
    loss1 = -adv * ratio
    loss2 = -adv * jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    cov = (adv - masked_mean(adv, mask)) * (logp - masked_mean(logp, mask))
    candidate = (mask != 0) & ~(loss2 > loss1) & (cov > clip_cov_lb) & (cov < clip_cov_ub)
    n_clip = jnp.maximum(jnp.floor(clip_cov_ratio * jnp.sum(mask)), 1.0)
    draw = jnp.where(candidate, jax.random.uniform(key, logp.shape), 2.0).reshape(-1)
    picked = candidate.reshape(-1) & (_ranks(draw) < n_clip)
    return picked.reshape(logp.shape).astype(jnp.float32)


def clip_cov(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    key: jax.Array,  # PRNG key for the random choice of tokens
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_cov_ratio: float = 2e-4,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
    token_stats: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs"; verl `clip_cov`).

    ```
    ρ = exp(lr) (not clamped);  L1 = −A·ρ;  L2 = −A·clip(ρ, 1 − clip_low, 1 + clip_high)
    cov = (A − mean_m A)·(logp − mean_m sg(logp))              (token level, over the whole minibatch)
    candidates: valid tokens with lb < cov < ub that are not already PPO-clipped (L2 > L1)
    pick min(max(⌊ratio·Σm⌋, 1), #candidates) candidates uniformly at random (from `key`)
    L = max(L1, L2)·corr, corr = 0 on picked tokens (their gradient is cut) and 1 elsewhere
    ```
    The pick is `clip_cov_selection` (deterministic given `key`; verl uses torch.randperm): the
    n_clip candidates with the smallest of one uniform draw per token of the [N, T] minibatch. Given
    as `token_stats` (computed on the whole minibatch) it does not depend on micro-batching; verl
    picks per micro-batch. The authors' recipe sets clip_low = clip_high = 1.
    Ties as `ppo_clip` (torch clamp, ½/½ max); on-policy dL/dlogp_t = −A_t·w_t·(1 − picked_t).
    Metrics: clip_cov_frac = fraction of valid tokens picked (detached; verl logs it as pg_clipfrac),
    clip_frac = mean[L2 > L1], the PPO clip fraction.
    """
    adv = _token_advantages(advantages)
    if token_stats is None:
        token_stats = clip_cov_selection(logp, old_logp, advantages, mask, key, clip_low=clip_low, clip_high=clip_high,
                                         clip_cov_ratio=clip_cov_ratio, clip_cov_lb=clip_cov_lb,
                                         clip_cov_ub=clip_cov_ub)
    picked = jax.lax.stop_gradient(token_stats)
    ratio = jnp.exp(logp - old_logp)
    loss1 = -adv * ratio
    loss2 = -adv * clip_torch_grad(ratio, 1.0 - clip_low, 1.0 + clip_high)
    token_loss = jnp.maximum(loss1, loss2) * (1.0 - picked)
    loss = _reduce(token_loss, mask, agg_mode, agg_weights, is_weights)
    return loss, {
        "clip_cov_frac": masked_mean(picked, mask),
        "clip_frac": _frac(loss2 > loss1, mask),
        "approx_kl": _approx_kl(logp - old_logp, mask),
        **_ratio_metrics(ratio, mask),
    }


def kl_cov_selection(
    logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    *,
    kl_cov_ratio: float,
) -> jax.Array:  # [N, T] float {0, 1}: tokens KL-Cov penalises
    """The k = max(1, ⌊N_valid·kl_cov_ratio⌋) valid tokens of largest cov (see `kl_cov`); ties to the earlier."""
    require("kl_cov_ratio", kl_cov_ratio, 0 < kl_cov_ratio <= 1, "must lie in (0, 1]")
    logp = jax.lax.stop_gradient(logp)
    adv = jnp.broadcast_to(_token_advantages(advantages), logp.shape)
    valid = mask != 0
    cov = (adv - masked_mean(adv, mask)) * (logp - masked_mean(logp, mask))
    k = jnp.maximum(jnp.floor(jnp.sum(valid) * kl_cov_ratio), 1.0)
    order = jnp.where(valid, -cov, jnp.inf).reshape(-1)
    picked = valid.reshape(-1) & (_ranks(order) < k)
    return picked.reshape(logp.shape).astype(jnp.float32)


def kl_cov(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    *,
    kl_cov_ratio: float = 2e-4,
    ppo_kl_coef: float = 0.1,
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
    token_stats: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """KL-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs"; verl `kl_cov`).

    ```
    ρ = exp(lr) (not clamped);  L = −A·ρ (no PPO clipping)
    cov = (A − mean_valid A)·(logp − mean_valid logp)   (detached, over valid tokens of the whole minibatch)
    the k = max(1, ⌊N_valid·kl_cov_ratio⌋) valid tokens with the largest cov get L = −A·ρ + coef·|lr|
    ```
    The selection is `kl_cov_selection` (deterministic, ties go to the earlier token); given as
    `token_stats` it does not depend on micro-batching (verl selects per micro-batch). Defaults are
    verl's config (ratio 2e-4, coef 0.1); the paper/recipe use ratio 2e-3 (7B) or 2e-4 (32B) with
    coef 1. Ties: |lr| has torch's gradient sign(lr) = 0 at lr = 0 (`aggregation.abs_torch_grad`), so
    on-policy the penalty is inert and dL/dlogp_t = −A_t·w_t (verl); the top-k keeps the earlier token at
    equal cov (torch.topk leaves the order of ties unspecified).
    Metrics: kl_cov_frac = fraction of valid tokens penalised; abs_kl = masked mean of |lr| over valid tokens
    (verl's `ppo_kl` for this loss); kl_cov_abs_lr = mean |lr| over the penalised tokens only (0 if none).
    """
    require("ppo_kl_coef", ppo_kl_coef, ppo_kl_coef >= 0, "must be >= 0")
    adv = _token_advantages(advantages)
    if token_stats is None:
        token_stats = kl_cov_selection(logp, advantages, mask, kl_cov_ratio=kl_cov_ratio)
    picked = jax.lax.stop_gradient(token_stats)
    log_ratio = logp - old_logp
    ratio = jnp.exp(log_ratio)
    token_loss = -adv * ratio + picked * ppo_kl_coef * abs_torch_grad(log_ratio)
    loss = _reduce(token_loss, mask, agg_mode, agg_weights, is_weights)
    return loss, {
        "kl_cov_frac": masked_mean(picked, mask),
        "abs_kl": masked_mean(jax.lax.stop_gradient(jnp.abs(log_ratio)), mask),
        "kl_cov_abs_lr": _selected_mean(jax.lax.stop_gradient(jnp.abs(log_ratio)), picked * mask),
        "approx_kl": _approx_kl(log_ratio, mask),
        **_ratio_metrics(ratio, mask),
    }


def gbpo(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T] regression weights z (GRPO advantages)
    mask: jax.Array,  # [N, T]
    target_advantages: jax.Array,  # [N] or [N, T] target signal z̃ (`advantages.gbpo_targets`)
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """GBPO bounded-ratio regression (Ao et al. 2026, "Bounded Ratio RL"; bounded-ratio-rl verl `gbpo`).

    ```
    ρ = exp(clip(lr, ±20));  ρ* = 1 − clip_low + (clip_low + clip_high)·sigmoid(sg(z̃))
    L = |(ρ − ρ*)·sg(A)|
    ```
    The ratio is regressed toward a bounded target instead of being clipped. z̃ = (s − median_g)/(σ_g +
    eps)/temperature comes from `advantages.gbpo_targets`. Defaults are the authors' TTRL scripts
    (0.2 / 0.28). Ties: |x| has torch's gradient sign(x) = 0 at x = 0 (`aggregation.abs_torch_grad`), so a
    ratio exactly at its target (on-policy ρ = 1 = ρ* when clip_low = clip_high and z̃ = 0) gets no gradient;
    elsewhere on-policy dL/dlogp_t = sign(1 − ρ*_t)·|A_t|·w_t: −|A_t|·w_t (pushed up) when the target is above
    1, +|A_t|·w_t when it is below. Metric clip_frac = fraction of ratios outside [1 − clip_low, 1 + clip_high].
    """
    adv = _token_advantages(advantages)
    target = 1.0 - clip_low + (clip_low + clip_high) * jax.nn.sigmoid(
        jax.lax.stop_gradient(_token_advantages(target_advantages)))
    log_ratio = _clamped_log_ratio(logp, old_logp)
    ratio = jnp.exp(log_ratio)
    token_loss = abs_torch_grad((ratio - target) * jax.lax.stop_gradient(adv))
    loss = _reduce(token_loss, mask, agg_mode, agg_weights, is_weights)
    return loss, {
        "clip_frac": _frac((ratio > 1.0 + clip_high) | (ratio < 1.0 - clip_low), mask),
        "approx_kl": _approx_kl(log_ratio, mask),
        **_ratio_metrics(ratio, mask),
    }


def kimi(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] r_i − mean_g r (e.g. "dr_grpo" advantages)
    mask: jax.Array,  # [N, T]
    *,
    tau: float = 0.1,
    agg_mode: str = "seq-mean-token-sum",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """Kimi k1.5 online-mirror-descent surrogate (Kimi Team 2025, "Kimi k1.5", §2.3.2).

    With sequence log-ratio `Δ_i = Σ_t m·(logp − old_logp)` and `A_i = r_i − r̄` (r̄ = τ·log Z estimate):
    `L_i = −A_i·Σ_t m·logp + (τ/2)·Δ_i²`, whose gradient is the paper's
    `−(r − r̄)·∇log π + (τ/2)·∇Δ²`. Written per token as `−A·logp_t + (τ/2)·Δ_i²/n_i`, so the mean of
    L_i over sequences is "seq-mean-token-sum" (forced; `agg_mode` is ignored). τ is not published; 0.1
    is our default. No ties: on-policy Δ_i = 0 and dL/dlogp_it = −A_i·m_it/Σ_i v_i.
    Metric seq_log_ratio_sq = mean of Δ_i² over the sequences with a valid token (what the τ-penalty acts on).
    """
    adv = _token_advantages(advantages)
    log_ratio = logp - old_logp
    tokens = jnp.sum(mask, axis=-1, keepdims=True)  # [N, 1]
    seq_log_ratio = masked_sum(log_ratio, mask, axis=-1)[:, None]  # [N, 1]
    token_loss = -adv * logp + 0.5 * tau * jnp.square(seq_log_ratio) / jnp.maximum(tokens, 1.0)
    loss = _reduce(token_loss, mask, "seq-mean-token-sum", agg_weights, is_weights)
    has_token = (tokens[:, 0] > 0).astype(jnp.float32)
    return loss, {
        "seq_log_ratio_sq": _selected_mean(jax.lax.stop_gradient(jnp.square(seq_log_ratio[:, 0])), has_token),
        "approx_kl": _approx_kl(log_ratio, mask),
    }


def value_loss(
    values: jax.Array,  # [N, T] current value predictions
    old_values: jax.Array,  # [N, T] values at rollout time
    returns: jax.Array,  # [N, T] GAE returns
    mask: jax.Array,  # [N, T]
    *,
    clip: float = 0.5,
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """Clipped value loss (verl `compute_value_loss`, from TRL/PPO2).

    `v_clip = clip(v, v_old − c, v_old + c)`; `L = ½·agg(max((v − R)², (v_clip − R)²))`;
    metric vf_clip_frac = mean[(v_clip − R)² > (v − R)²].
    Ties as verl: its `clip_by_value` is `max(min(v, hi), lo)` (not torch.clamp), so a bound splits the
    gradient ½/½ exactly as `jnp.clip` does; at the first critic update v = v_old lies strictly inside
    (c > 0) and the tie of the two squares splits ½/½ (torch.max), giving the plain (v − R)·w gradient.
    """
    clipped = jnp.clip(values, old_values - clip, old_values + clip)
    loss1 = jnp.square(values - returns)
    loss2 = jnp.square(clipped - returns)
    loss = 0.5 * _reduce(jnp.maximum(loss1, loss2), mask, agg_mode, agg_weights, None)
    return loss, {"vf_clip_frac": _frac(loss2 > loss1, mask)}


def explained_variance(
    values: jax.Array,  # [N, T] value predictions
    returns: jax.Array,  # [N, T] value targets
    mask: jax.Array,  # [N, T]
) -> jax.Array:  # []
    """`1 − Var_m(R − V) / (Var_m(R) + 1e-5)` over the valid tokens of the batch (verl `vf_explained_var`,
    unbiased masked variances): 1 for a perfect critic, 0 for a constant one at the mean, < 0 worse."""
    return 1.0 - masked_var(returns - values, mask) / (masked_var(returns, mask) + 1e-5)


def truncated_is_weights(
    old_logp: jax.Array,  # [N, T] learner log-probs of the rollout policy
    sampler_logp: jax.Array,  # [N, T] log-probs reported by the sampler
    mask: jax.Array,  # [N, T]
    *,
    cap: float = 2.0,
    level: str = "token",
) -> jax.Array:  # [N, T]
    """Truncated importance sampling against the sampler (Yao et al. 2025, "Your efficient RL framework
    secretly brings you off-policy RL training"; verl `rollout_correction`, TRL vLLM IS correction).

    token:    `w_t = min(exp(old_logp_t − sampler_logp_t), cap)`
    sequence: `w_i = min(exp(Σ_t m·(old_logp − sampler_logp)), cap)` broadcast over tokens
    Log-ratios are clamped to ±20 before exp. Returned as constants (stop-gradient), zero outside the
    mask; pass as `is_weights` to any loss. TRL's default cap is 3.0.
    """
    log_ratio = jnp.clip(old_logp - sampler_logp, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    if level == "sequence":
        seq = jnp.clip(masked_sum(log_ratio, mask, axis=-1), -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
        log_ratio = jnp.broadcast_to(seq[:, None], old_logp.shape)
    elif level != "token":
        raise ValueError(f"level must be 'token' or 'sequence', got {level!r}")
    weights = jnp.minimum(jnp.exp(log_ratio), cap)
    return jax.lax.stop_gradient(jnp.where(mask != 0, weights, 0.0))


def lp_reg_selection(
    logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    proxy_logp: jax.Array,  # [N, T]
    *,
    rho_neg: float,
) -> jax.Array:  # [N, T] float {0, 1}: tokens Lp-Reg regularises
    """Valid tokens with A < 0, logp ≤ the `rho_neg` quantile (linear) of logp over the batch's negative
    tokens, and logp < proxy_logp (see `lp_reg`)."""
    require("rho_neg", rho_neg, 0 < rho_neg <= 1, "must lie in (0, 1]")
    current = jax.lax.stop_gradient(logp)
    negative = (mask != 0) & (jnp.broadcast_to(_token_advantages(advantages), logp.shape) < 0)
    threshold = masked_quantile(current, negative, rho_neg)
    return (negative & (current <= threshold) & (current < proxy_logp)).astype(jnp.float32)


def lp_reg(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    proxy_logp: jax.Array,  # [N, T] log π_proxy(o_t) (`entropy.minp_proxy_logprobs` on old logits)
    *,
    rho_neg: float = 0.01,
    beta: float = 1.0,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: Optional[float] = 3.0,
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
    token_stats: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """Lp-Reg: protect low-probability exploratory tokens (Huang et al. 2025, "Low-probability Tokens
    Sustain Exploration in RLVR"; CarlanLark/Lp-Reg).

    Selected tokens (`lp_reg_selection`): valid, A < 0, logp in the lowest `rho_neg` quantile of the
    whole minibatch's negative tokens, and logp < proxy_logp (the token survived the min-p filter, so
    the proxy gives it more mass). They get `L = −A·ρ + β·k3(logp, proxy_logp)` (k3 = KL(π‖π_proxy)
    estimate, verl clamps); every other token gets the `ppo_clip` loss. Filtered ("noise") tokens have
    proxy_logp ≈ −∞ and are never selected. Given as `token_stats` the selection does not depend on
    micro-batching (the reference selects per micro-batch). The authors' scripts use an
    almost-unclipped PPO (clip_low = 1, clip_high = 9), ρ_neg = 1%, β = 1.
    On-policy (ρ = 1) dL/dlogp_t = −A_t·w_t on every token, plus β·(1 − π_proxy/π)_t·w_t on the selected ones
    (k3's gradient; it vanishes only where logp = proxy_logp: the penalty legitimately acts on-policy).
    Metrics: `ppo_clip`'s (clip_frac, clip_frac_high/low, dual_clip_frac over all valid tokens, the selected
    ones included) and lp_reg_frac = fraction of valid tokens selected.
    """
    require("beta", beta, beta >= 0, "must be >= 0")
    adv = _token_advantages(advantages)
    log_ratio = _clamped_log_ratio(logp, old_logp)
    token_loss, metrics = _ppo_token_loss(adv, log_ratio, mask, clip_low, clip_high, dual_clip)
    if token_stats is None:
        token_stats = lp_reg_selection(logp, advantages, mask, proxy_logp, rho_neg=rho_neg)
    selected = jax.lax.stop_gradient(token_stats) != 0
    regularised = -adv * jnp.exp(log_ratio) + beta * estimate(logp, jax.lax.stop_gradient(proxy_logp), "k3")
    token_loss = jnp.where(selected, regularised, token_loss)
    loss = _reduce(token_loss, mask, agg_mode, agg_weights, is_weights)
    return loss, {**metrics, "lp_reg_frac": _frac(selected, mask)}


def hapo(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    entropy: jax.Array,  # [N, T] token entropy of the current policy
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    alpha: float = 1.0,
    beta: float = 1.0,
    pivot: float = 0.8,
    dual_clip: Optional[float] = 10.0,
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
    token_stats: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """HAPO entropy-adaptive clipping and advantage redistribution (Liu et al. 2025, "From Uniform to
    Heterogeneous: Tailoring Policy Optimization to Every Token's Nature"; starriver030515/HAPO
    `ada_clip`, `ada_advantage`).

    With ĥ = `entropy.normalized_entropy_scores(entropy, mask, pivot=pivot)` ∈ [−1, 1] (the whole
    minibatch's scores when given as `token_stats`; the reference computes them per micro-batch):
    ```
    clip:  ε_lo = clip_low·(1 − α·ĥ) if ĥ ≤ 0 else clip_low;   ε_hi = clip_high·(1 + α·ĥ) if ĥ > 0 else clip_high
    redistribution:  A_ent = A·(1 + β·ĥ);  neutral zone ρ ∈ (1 − ε_lo/2, 1 + ε_hi/2)  (ρ = exp(clip(lr, ±20)))
           ĥ > 0 (high entropy): A inside the neutral zone, A_ent outside
           ĥ ≤ 0 (low entropy):  A_ent inside the neutral zone, A outside
    L = ppo_clip(ρ, Â, ε_lo, ε_hi, dual_clip)   (dual clip on Â < 0; c = 10 as in the HAPO recipes)
    ```
    Low-entropy tokens get room to decrease, high-entropy ones room to increase; high-entropy tokens
    far from the old policy have their advantage amplified, low-entropy ones near it damped. The
    recipes use α = β = 1, pivot 0.8; α = β = 0 is exactly `ppo_clip` (β ≤ 1 keeps the sign of A).
    Not here: HAPO's adaptive sampling temperature (`config.sampling.temperature_tau`,
    `train.companions.adaptive_temperature`); its token-level group advantage is `advantages.hapo`. On-policy ρ = 1 lies strictly inside the neutral zone (for clip ranges
    > 0), so dL/dlogp_t = −A_t·(1 + β·ĥ_t if ĥ_t ≤ 0 else 1)·w_t; clip ties as `ppo_clip`.
    Metrics: `ppo_clip`'s with the per-token ranges (clip_frac_high = mean[Â > 0 and ρ > 1 + ε_hi], ...) and
    neutral_frac = fraction of valid tokens inside the neutral zone.
    """
    require("alpha", alpha, alpha >= 0, "must be >= 0")
    require("beta", beta, 0 <= beta <= 1, "must lie in [0, 1] (larger values flip the sign of A at ĥ = −1)")
    score = normalized_entropy_scores(entropy, mask, pivot=pivot) if token_stats is None else token_stats
    score = jax.lax.stop_gradient(score)
    low = jnp.where(score <= 0, clip_low * (1.0 - alpha * score), clip_low)
    high = jnp.where(score > 0, clip_high * (1.0 + alpha * score), clip_high)
    log_ratio = _clamped_log_ratio(logp, old_logp)
    ratio = jax.lax.stop_gradient(jnp.exp(log_ratio))
    adv = _token_advantages(advantages)
    adv_ent = adv * (1.0 + beta * score)
    neutral = (ratio > 1.0 - low / 2) & (ratio < 1.0 + high / 2)
    adv = jnp.where(score > 0, jnp.where(neutral, adv, adv_ent), jnp.where(neutral, adv_ent, adv))
    token_loss, metrics = _ppo_token_loss(adv, log_ratio, mask, low, high, dual_clip)
    metrics["neutral_frac"] = _frac(neutral, mask)
    return _reduce(token_loss, mask, agg_mode, agg_weights, is_weights), metrics


def steer(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    entropy: jax.Array,  # [N, T] token entropy of the current policy
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: Optional[float] = 10.0,
    weight_min: float = 0.8,
    weight_max: float = 1.0,
    mapping: str = "exponential",
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
    token_stats: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """STEER: `ppo_clip` (dual clip) with each token's loss multiplied by its entropy-change weight
    (Hao et al. 2025, "Rethinking Entropy Interventions in RLVR"; zz-haooo/STEER `entropy_control`).

    `L = ppo_clip_token_loss(ρ, A; clip_low, clip_high, dual_clip)·w`, `w = entropy.steer_token_weights(
    logp, old_logp, A, mask, entropy; weight_min, weight_max, mapping)` (constants; whole-minibatch weights
    when given as `token_stats`, per micro-batch in the reference). Defaults are the authors' run scripts
    (0.2 / 0.28, c = 10, exponential mapping, w_min = 0.8, w_max = 1). Clip ties as `ppo_clip`; on-policy
    dL/dlogp_t = −A_t·w_t·agg_t (w the STEER weight). Metrics: ppo_clip's plus token_weight_mean /
    token_weight_min over valid tokens.
    """
    if token_stats is None:
        token_stats = steer_token_weights(logp, old_logp, advantages, mask, entropy, weight_min=weight_min,
                                          weight_max=weight_max, mapping=mapping)
    weights = jax.lax.stop_gradient(token_stats)
    adv = _token_advantages(advantages)
    log_ratio = _clamped_log_ratio(logp, old_logp)
    token_loss, metrics = _ppo_token_loss(adv, log_ratio, mask, clip_low, clip_high, dual_clip)
    metrics["token_weight_mean"] = masked_mean(weights, mask)
    metrics["token_weight_min"] = _masked_min(weights, mask)
    return _reduce(token_loss * weights, mask, agg_mode, agg_weights, is_weights), metrics
