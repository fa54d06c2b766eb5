"""Masked reductions and loss aggregation (verl `agg_loss` semantics).

All reductions are over the arrays they are given. Under `jax.jit` with globally sharded arrays
they are therefore global over the whole batch (across devices). For gradient accumulation over
micro-batches, use `aggregation_weights` on the mask of the WHOLE batch, hand each micro-batch its
slice of the weights, and sum `weighted_sum(values_mb, weights_mb)` over micro-batches: the total
equals `aggregate(values, mask, mode)` on the full batch.

Shapes: N sequences, T tokens; `mask[N, T]` is 1 on tokens the policy produced.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")

_MEAN_EPS = 1e-8  # verl `masked_mean` / `seq-mean-token-mean` epsilon
_WHITEN_EPS = 1e-8  # verl `masked_whiten` epsilon inside rsqrt


def _zero_outside(values: jax.Array, mask: jax.Array) -> jax.Array:
    """`where(mask != 0, values, 0)`: NaN/inf outside the mask never reach a reduction."""
    return jnp.where(mask != 0, values, jnp.zeros_like(values))


def _positive_or_one(x: jax.Array) -> jax.Array:
    """Denominator guard: `x` where x > 0 else 1, so an empty selection gives 0, not NaN."""
    return jnp.where(x > 0, x, jnp.ones_like(x))


def masked_sum(values: jax.Array, mask: jax.Array, axis=None) -> jax.Array:
    """`Σ where(m, x, 0)·m` (verl `masked_sum`; values outside the mask are zeroed, NaN included)."""
    return jnp.sum(_zero_outside(values, mask) * mask, axis=axis)


def masked_mean(values: jax.Array, mask: jax.Array, axis=None) -> jax.Array:
    """`masked_sum(x, m) / (Σ m + 1e-8)` (verl `masked_mean`)."""
    return masked_sum(values, mask, axis) / (jnp.sum(mask, axis=axis) + _MEAN_EPS)


def masked_var(values: jax.Array, mask: jax.Array, unbiased: bool = True) -> jax.Array:
    """Masked variance over all elements: `masked_mean((x − μ)², m) · n/(n−1)`, n = Σ m (verl `masked_var`).

    verl raises when n ≤ 1; inside jit we cannot, so for n ≤ 1 the Bessel factor is skipped
    (the variance of a single element is then 0).
    """
    mean = masked_mean(values, mask)
    var = masked_mean(jnp.square(values - mean), mask)
    if unbiased:
        n = jnp.sum(mask)
        var = var * jnp.where(n > 1, n / jnp.maximum(n - 1, 1), 1.0)
    return var


def masked_whiten(values: jax.Array, mask: jax.Array, shift_mean: bool = True) -> jax.Array:
    """`(x − μ)·rsqrt(var + 1e-8)` with masked mean and unbiased masked variance (verl `masked_whiten`).

    With `shift_mean=False` the mean is added back: `(x − μ)·rsqrt(var + 1e-8) + μ`.
    Positions outside the mask are transformed too (not zeroed), exactly as in verl.
    """
    mean = masked_mean(values, mask)
    var = masked_var(values, mask)
    whitened = (values - mean) * jax.lax.rsqrt(var + _WHITEN_EPS)
    return whitened if shift_mean else whitened + mean


def abs_torch_grad(x: jax.Array) -> jax.Array:
    """`|x|` whose gradient is `sign(x)`, i.e. 0 at x = 0, as torch's `abs` (JAX's `jnp.abs` has gradient 1 at 0).

    Losses that penalise `|log_ratio|` are evaluated on-policy at exactly log_ratio = 0 (the first update on a
    rollout batch); with `jnp.abs` every such token would get a spurious gradient that torch (verl) does not give.
    """
    return jnp.sign(jax.lax.stop_gradient(x)) * x


def clip_torch_grad(x: jax.Array, lo=None, hi=None) -> jax.Array:
    """`clip(x, lo, hi)` whose gradient is 1 where `lo ≤ x ≤ hi` (bounds INCLUDED) and 0 outside, as torch's `clamp`.

    `jnp.clip` is `minimum(maximum(x, lo), hi)`, whose gradient splits ties: ½ at a bound and ¼ when lo == hi.
    Ratio clips are evaluated on-policy at exactly ρ = 1, which is a bound whenever a clip range is 0
    (clip_low = 0 or clip_high = 0, GMPO's log-space clip with a zero side); there torch (verl) passes the whole
    gradient. The value is `jnp.clip`'s, bit for bit; `lo` / `hi` may be None (one-sided) or arrays.
    """
    inside = jnp.ones(jnp.shape(x), bool)
    if lo is not None:
        inside = inside & (x >= lo)
    if hi is not None:
        inside = inside & (x <= hi)
    return jnp.where(inside, x, jax.lax.stop_gradient(jnp.clip(x, lo, hi)))


def require(name: str, value, ok: bool, requirement: str) -> None:
    """Raise ValueError("name=value: requirement") unless `ok`, for a method hyper-parameter given as a
    Python number or string (traced values are not checked). Config validation reports these messages
    under the method's `*_kwargs` field before anything compiles."""
    if isinstance(value, (int, float, str)) and not ok:
        raise ValueError(f"{name}={value!r}: {requirement}")


def _check_mode(mode: str) -> None:
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; known modes: {', '.join(AGG_MODES)}")


def aggregate(
    values: jax.Array,  # [N, T]
    mask: jax.Array,  # [N, T]
    mode: str,
    *,
    norm_length: Optional[float] = None,
) -> jax.Array:
    """Aggregate a token loss matrix to a scalar exactly like verl `agg_loss` (local path, dp_size=1).

    With `m = mask`, `v_i = [Σ_t m_it > 0]` (sequences with no valid token are ignored):

    - "token-mean"               `Σ L·m / Σ m`                                   (DAPO)
    - "seq-mean-token-mean"      `Σ_i v_i·(Σ_t L·m / (Σ_t m + 1e-8)) / Σ_i v_i`  (original GRPO)
    - "seq-mean-token-sum"       `Σ_i v_i·(Σ_t L·m) / Σ_i v_i`
    - "seq-mean-token-sum-norm"  `Σ_i v_i·(Σ_t L·m) / (C·Σ_i v_i)`, C = `norm_length` or T (padded length) (Dr.GRPO)

    "seq-mean-token-sum-norm" is Dr. GRPO's `(1/G) Σ_i Σ_t L_it / C` with C the maximum response length, as current
    verl computes it (`agg_loss(..., loss_scale_factor=C)`: token sums / C, averaged over the sequences). The paper
    needs ONE C for the whole run: pass `norm_length` (the trainer passes `config.rl.agg_norm_length`, default the
    run's response budget); without it C is this batch's padded length, which moves when T does. Older verl
    (< 0.5) returned `Σ L·m / T` without the average over sequences; TRL's `loss_type="dr_grpo"` divides by
    (rows in the batch)·max_completion_length, i.e. counts empty rows too.

    Difference from verl: an all-masked batch gives 0 instead of NaN (the denominators Σm and Σv are
    replaced by 1 when they are 0); otherwise identical.
    """
    _check_mode(mode)
    values = _zero_outside(values, mask) * mask  # [N, T]
    if mode == "token-mean":
        return jnp.sum(values) / _positive_or_one(jnp.sum(mask))
    tokens_per_seq = jnp.sum(mask, axis=-1)  # [N]
    seq_valid = (tokens_per_seq > 0).astype(values.dtype)  # [N]
    seq_loss = jnp.sum(values, axis=-1)  # [N]
    if mode == "seq-mean-token-mean":
        seq_loss = seq_loss / (tokens_per_seq + _MEAN_EPS)
    elif mode == "seq-mean-token-sum-norm":
        seq_loss = seq_loss / (mask.shape[-1] if norm_length is None else norm_length)
    return jnp.sum(seq_loss * seq_valid) / _positive_or_one(jnp.sum(seq_valid))


def aggregation_weights(
    mask: jax.Array,  # [N, T]
    mode: str,
    *,
    norm_length: Optional[float] = None,
) -> jax.Array:  # [N, T]
    """Per-token weights w with `aggregate(L, mask, mode) == Σ L·w` for every L (up to float rounding).

    The weights depend only on the mask of the whole batch:

    - "token-mean"               `w = m / Σ m`
    - "seq-mean-token-mean"      `w_it = m_it·v_i / ((Σ_t m_it + 1e-8)·Σ_i v_i)`
    - "seq-mean-token-sum"       `w_it = m_it·v_i / Σ_i v_i`
    - "seq-mean-token-sum-norm"  `w_it = m_it·v_i / (C·Σ_i v_i)`

    Splitting a batch into micro-batches and summing `weighted_sum(L_mb, w_mb)` (and its gradients)
    reproduces the full-batch aggregate exactly, unlike verl's legacy per-micro-batch mean ÷ grad_accum.
    """
    _check_mode(mode)
    mask = mask.astype(jnp.result_type(mask.dtype, jnp.float32))
    if mode == "token-mean":
        return mask / _positive_or_one(jnp.sum(mask))
    tokens_per_seq = jnp.sum(mask, axis=-1, keepdims=True)  # [N, 1]
    seq_valid = (tokens_per_seq > 0).astype(mask.dtype)  # [N, 1]
    weights = mask * seq_valid / _positive_or_one(jnp.sum(seq_valid))  # [N, T]
    if mode == "seq-mean-token-mean":
        weights = weights / (tokens_per_seq + _MEAN_EPS)
    elif mode == "seq-mean-token-sum-norm":
        weights = weights / (mask.shape[-1] if norm_length is None else norm_length)
    return weights


def weighted_sum(values: jax.Array, weights: jax.Array) -> jax.Array:
    """`Σ L·w`, with values where w == 0 zeroed first (so NaN in padding never leaks)."""
    return jnp.sum(_zero_outside(values, weights) * weights)


def replicated(x: jax.Array) -> jax.Array:
    """`x` gathered onto every device when it is sharded over Explicit mesh axes; unchanged otherwise.

    Sorts and pairwise comparisons need a whole axis at once: under Auto axes XLA inserts the gather itself,
    under Explicit axes it must be asked for. Used only on small arrays ([N] scores, flattened [N·T] keys).
    """
    sharding = jax.typeof(x).sharding
    if not sharding.mesh.explicit_axes:
        return x
    return jax.sharding.reshard(x, NamedSharding(sharding.mesh, PartitionSpec(*[None] * x.ndim)))


def masked_quantile(values: jax.Array, mask: jax.Array, q: float, *, interpolation: str = "linear") -> jax.Array:
    """Quantile `q` ∈ [0, 1] of the valid elements (torch.quantile semantics over `values[mask != 0]`).

    "linear" interpolates between the two nearest order statistics at position q·(n − 1); "nearest"
    takes the order statistic at round(q·(n − 1)) (round half to even, like torch). NaN if no element is valid.
    """
    flat = replicated(jnp.where(mask != 0, values, jnp.inf).reshape(-1))
    ordered = jnp.sort(flat)
    n = jnp.sum(mask != 0)
    pos = q * (n - 1).astype(jnp.float32)
    if interpolation == "nearest":
        return jnp.where(n > 0, ordered[jnp.round(pos).astype(jnp.int32)], jnp.nan)
    if interpolation != "linear":
        raise ValueError(f"interpolation must be 'linear' or 'nearest', got {interpolation!r}")
    lo = jnp.floor(pos).astype(jnp.int32)
    hi = jnp.ceil(pos).astype(jnp.int32)
    frac = pos - lo
    return jnp.where(n > 0, ordered[lo] + (ordered[hi] - ordered[lo]) * frac, jnp.nan)
