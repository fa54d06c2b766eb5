"""Token entropy, chunked log-prob/entropy from hidden states, and entropy control.

Shapes: N sequences, T tokens, H hidden size, V vocabulary; `mask[N, T]` as everywhere in `rl`.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp

from rl4llm.rl.aggregation import aggregate, masked_mean, masked_quantile, weighted_sum


def from_logits(logits: jax.Array) -> jax.Array:  # [..., V] -> [...]
    """Entropy of softmax(z) in float32: `H = logsumexp(z) − Σ_v softmax(z)_v·z_v` (verl `entropy_from_logits`).

    Logits of −inf (masked vocabulary entries) contribute 0, without NaN in value or gradient.
    """
    z = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(z, axis=-1)
    probs = jnp.exp(z - lse[..., None])
    z_finite = jnp.where(jnp.isfinite(z), z, 0.0)
    return lse - jnp.sum(probs * z_finite, axis=-1)


def _logprobs_and_entropy(logits: jax.Array, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    z = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(z, axis=-1)
    logp = jnp.take_along_axis(z, targets[..., None], axis=-1)[..., 0] - lse
    return logp, from_logits(z)


def chunked_logprobs_and_entropy(
    hidden: jax.Array,  # [N, T, H]
    targets: jax.Array,  # [N, T] int token ids
    unembed_fn: Callable[[jax.Array], jax.Array],  # [..., H] -> [..., V]
    *,
    chunk_size: int,
    temperature: float = 1.0,
    min_p: Optional[float] = None,
) -> tuple[jax.Array, ...]:  # ([N, T], [N, T]) or ([N, T], [N, T], [N, T])
    """Log-prob of `targets` and entropy under softmax(unembed(h)/temperature), in float32, chunked over T.

    With `min_p`, also returns the Lp-Reg proxy log-probs `minp_proxy_logprobs(z, targets, min_p=min_p)` of
    the same (temperature-scaled) logits z as a third output, without gradient.

    The sequence axis is split into chunks of `chunk_size` (T is padded up to a multiple) and mapped with
    `lax.map`; each chunk's computation is wrapped in `jax.checkpoint`, so neither the forward nor the
    backward pass ever holds more than one chunk of logits ([N, chunk_size, V]). Logits are divided by
    the rollout temperature before the softmax, as verl's actor does. `unembed_fn` may close over
    (traced) parameters; gradients flow to them and to `hidden`.
    """
    n, t, h = hidden.shape
    num_chunks = -(-t // chunk_size)
    pad = num_chunks * chunk_size - t
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    targets = jnp.pad(targets, ((0, 0), (0, pad)))
    hidden_chunks = hidden.reshape(n, num_chunks, chunk_size, h).swapaxes(0, 1)  # [C, N, chunk, H]
    target_chunks = targets.reshape(n, num_chunks, chunk_size).swapaxes(0, 1)  # [C, N, chunk]

    @jax.checkpoint
    def one_chunk(xs):
        h_chunk, t_chunk = xs
        logits = unembed_fn(h_chunk).astype(jnp.float32) / temperature  # [N, chunk, V]
        outputs = _logprobs_and_entropy(logits, t_chunk)
        if min_p is None:
            return outputs
        return outputs + (minp_proxy_logprobs(jax.lax.stop_gradient(logits), t_chunk, min_p=min_p),)

    outputs = jax.lax.map(one_chunk, (hidden_chunks, target_chunks))  # [C, N, chunk] each
    unchunk = lambda x: x.swapaxes(0, 1).reshape(n, num_chunks * chunk_size)[:, :t]  # noqa: E731
    return tuple(unchunk(x) for x in outputs)


def minp_proxy_logprobs(
    logits: jax.Array,  # [..., V] logits of the behaviour (old) policy
    targets: jax.Array,  # [...] int token ids
    *,
    min_p: float = 0.02,
) -> jax.Array:  # [...]
    """Lp-Reg proxy log-prob of each target (Huang et al. 2025): min-p filter, then renormalise.

    Keep v iff π(v) ≥ min_p·max_u π(u); other logits are set to −1e4 (as the reference code) before the
    log-softmax, so a filtered target gets a log-prob near −1e4 and is never regularised.
    """
    z = logits.astype(jnp.float32)
    probs = jax.nn.softmax(z, axis=-1)
    keep = probs >= min_p * jnp.max(probs, axis=-1, keepdims=True)
    proxy = jax.nn.log_softmax(jnp.where(keep, z, -1e4), axis=-1)
    return jnp.take_along_axis(proxy, targets[..., None], axis=-1)[..., 0]


def entropy_bonus(
    entropy: jax.Array,  # [N, T]
    mask: jax.Array,  # [N, T]
    *,
    coef: float,
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
) -> jax.Array:
    """Loss term `−coef·agg(H)` to ADD to the policy loss (verl: `policy_loss −= entropy_coeff·agg_loss(H)`).

    Uses the policy loss's aggregation, as verl does (TRL always uses the token mean). With `agg_weights`
    it is `−coef·Σ H·w` (micro-batching path).
    """
    total = weighted_sum(entropy, agg_weights) if agg_weights is not None else aggregate(entropy, mask, agg_mode)
    return -coef * total


def adaptive_entropy_coef(
    coef: jax.Array,
    entropy: jax.Array,  # scalar: the batch's mean token entropy
    *,
    target: float = 0.2,
    delta: float = 0.005,
    min_coef: float = 0.0,
    max_coef: float = 1.0,
) -> jax.Array:
    """Adaptive entropy coefficient toward a target entropy (Skywork-OR1, He et al. 2025; TRL defaults).

    `c ← clip(c + δ, c_min, c_max)` if H < target else `clip(c − δ, c_min, c_max)`: the bonus grows while
    entropy is below the target and decays once it is above.
    """
    step = jnp.where(entropy < target, delta, -delta)
    return jnp.clip(coef + step, min_coef, max_coef)


def forking_token_mask(
    entropy: jax.Array,  # [N, T]
    mask: jax.Array,  # [N, T]
    *,
    rho: float = 0.2,
) -> jax.Array:  # [N, T] float {0, 1}
    """High-entropy "forking" tokens (Wang et al. 2025, "Beyond the 80/20 Rule"; TRL `top_entropy_quantile`).

    `1[H ≥ quantile_{1−ρ}(H over valid tokens of the batch)]·m` (linear-interpolated quantile, as
    torch.quantile). Pass it as (or multiply it into) a loss's `is_weights`: only forking tokens get a
    gradient while the normaliser still counts all tokens, as in the paper. ρ = 1 keeps every valid token.
    """
    entropy = jax.lax.stop_gradient(entropy)
    threshold = masked_quantile(entropy, mask, 1.0 - rho)
    return ((entropy >= threshold) & (mask != 0)).astype(jnp.float32)


def normalized_entropy_scores(
    entropy: jax.Array,  # [N, T]
    mask: jax.Array,  # [N, T]
    *,
    pivot: float = 0.8,
) -> jax.Array:  # [N, T] in [−1, 1]
    """HAPO token entropy score ĥ (Liu et al. 2025, "From Uniform to Heterogeneous"; starriver030515/HAPO).

    ```
    e = log(max(H, 1e-8));  μ = quantile_pivot(e over valid tokens, "nearest");  s = sqrt(mean_valid((e − μ)²))
    z = (e − μ)/s;  ĥ = z / max(z over valid, z > 0)  for z > 0,   ĥ = z / |min(z over valid, z ≤ 0)|  for z ≤ 0
    ```
    so ĥ ∈ [−1, 1] on valid tokens and ĥ = 0 at the pivot token. Treated as a constant.
    """
    e = jnp.log(jnp.maximum(jax.lax.stop_gradient(entropy), 1e-8))
    centre = masked_quantile(e, mask, pivot, interpolation="nearest")
    spread = jnp.sqrt(masked_mean(jnp.square(e - centre), mask))
    z = (e - centre) / jnp.where(spread > 0, spread, 1.0)
    valid = mask != 0
    z_max = jnp.max(jnp.where(valid & (z > 0), z, 0.0))
    z_min = jnp.min(jnp.where(valid & (z <= 0), z, 0.0))
    pos = z / jnp.where(z_max > 0, z_max, 1.0)
    neg = z / jnp.where(z_min < 0, -z_min, 1.0)
    return jnp.where(z > 0, pos, neg) * valid
