"""Token entropy, chunked log-prob/entropy from hidden states, and entropy control.

Shapes: N sequences, T tokens, H hidden size, V vocabulary; `mask[N, T]` as everywhere in `rl`.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from rl4llm.rl.aggregation import aggregate, masked_mean, masked_quantile, require, weighted_sum


def from_logits(logits: jax.Array) -> jax.Array:  # [..., V] -> [...]
    """Entropy of softmax(z) in float32: `H = logsumexp(z) − Σ_v softmax(z)_v·z_v` (verl `entropy_from_logits`).

    Logits of −inf (masked vocabulary entries) contribute 0, without NaN in value or gradient.
    """
    z = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(z, axis=-1)
    probs = jnp.exp(z - lse[..., None])
    z_finite = jnp.where(jnp.isfinite(z), z, 0.0)
    return lse - jnp.sum(probs * z_finite, axis=-1)


def project(hidden: jax.Array, unembedding: jax.Array) -> jax.Array:  # [..., H], [H, v] -> [..., v]
    """Logits `hidden @ unembedding` in float32, the matrix cast to the hidden dtype (as `models.unembed`)."""
    return jnp.einsum("...h,hv->...v", hidden, unembedding.astype(hidden.dtype), preferred_element_type=jnp.float32)


def _vocab_chunks(vocab_size: int, vocab_chunk_size: Optional[int]) -> tuple[int, int]:
    """(chunk width, number of chunks) covering the vocabulary; None or a width >= V is one chunk."""
    if vocab_chunk_size is not None and vocab_chunk_size < 1:
        raise ValueError(f"vocab_chunk_size={vocab_chunk_size!r}: must be a positive integer (or None)")
    width = vocab_size if vocab_chunk_size is None else min(vocab_chunk_size, vocab_size)
    return width, -(-vocab_size // width)


def _vocab_chunk_logits(h, unembedding, index, width, temperature):  # -> ([..., width], [width] ids, [width] valid)
    """Logits of vocabulary chunk `index` ([index·width, (index+1)·width)). The last chunk is read at
    start V − width (no padded copy of the matrix); its columns already covered by the previous
    chunk are marked invalid."""
    vocab_size = unembedding.shape[1]
    wanted = index * width
    start = jnp.minimum(wanted, vocab_size - width)
    w = jax.lax.dynamic_slice_in_dim(unembedding, start, width, axis=1)  # [H, width]
    ids = start + jnp.arange(width)
    return project(h, w) / temperature, ids, ids >= wanted


def _online_softmax_stats(h, targets, unembedding, width, num_chunks, temperature):
    """(max logit, Σ e^(z−max), Σ e^(z−max)·z, target logit) of z = h @ W / τ, one vocabulary chunk at a
    time (online logsumexp: running max and rescaled sums). Each chunk is rematerialised in the
    backward pass, so at most [..., width] logits exist at once. The running max is a constant for
    autodiff (the results do not depend on it mathematically)."""
    shape = targets.shape

    @jax.checkpoint
    def body(carry, index):
        m, s, t, target_logit = carry
        z, ids, valid = _vocab_chunk_logits(h, unembedding, index, width, temperature)  # [..., width]
        z = jnp.where(valid, z, -jnp.inf)
        m_new = jax.lax.stop_gradient(jnp.maximum(m, jnp.max(z, axis=-1)))
        scale = jnp.exp(m - m_new)
        e = jnp.exp(z - m_new[..., None])
        s = s * scale + jnp.sum(e, axis=-1)
        t = t * scale + jnp.sum(e * jnp.where(jnp.isfinite(z), z, 0.0), axis=-1)
        hit = valid & (ids == targets[..., None])
        target_logit = target_logit + jnp.sum(jnp.where(hit, z, 0.0), axis=-1)
        return (m_new, s, t, target_logit), None

    lowest = jnp.full(shape, jnp.finfo(jnp.float32).min)
    zeros = jnp.zeros(shape, jnp.float32)
    (m, s, t, target_logit), _ = jax.lax.scan(body, (lowest, zeros, zeros, zeros), jnp.arange(num_chunks))
    return m, s, t, target_logit


def _minp_proxy_from_stats(h, unembedding, width, num_chunks, temperature, m, target_logit, min_p):
    """`minp_proxy_logprobs` of the targets from the online statistics, with a second pass over the
    vocabulary for the mass of the kept entries: keep v iff z_v ≥ max z + log(min_p) (⟺ π(v) ≥
    min_p·max π); proxy = (z_target if kept else −1e4) − log Σ_kept e^z. No gradient."""
    h, m, target_logit = jax.lax.stop_gradient((h, m, target_logit))
    floor = m + jnp.log(min_p)

    def body(kept_mass, index):
        z, _, valid = _vocab_chunk_logits(h, unembedding, index, width, temperature)
        kept = valid & (z >= floor[..., None])
        return kept_mass + jnp.sum(jnp.where(kept, jnp.exp(z - m[..., None]), 0.0), axis=-1), None

    kept_mass, _ = jax.lax.scan(body, jnp.zeros(m.shape, jnp.float32), jnp.arange(num_chunks))
    return jnp.where(target_logit >= floor, target_logit, -1e4) - (m + jnp.log(kept_mass))


def chunked_logprobs_and_entropy(
    hidden: jax.Array,  # [N, T, H]
    targets: jax.Array,  # [N, T] int token ids
    unembedding: jax.Array,  # [H, V] output projection (logits = hidden @ unembedding)
    *,
    chunk_size: int,
    vocab_chunk_size: Optional[int] = None,
    temperature: float = 1.0,
    min_p: Optional[float] = None,
) -> tuple[jax.Array, ...]:  # ([N, T], [N, T]) or ([N, T], [N, T], [N, T])
    """Log-prob of `targets` and entropy under softmax(hidden @ unembedding / temperature), in float32,
    chunked over the sequence (T) and the vocabulary (V) axes.

    With `min_p`, also returns the Lp-Reg proxy log-probs `minp_proxy_logprobs(z, targets, min_p=min_p)` of
    the same (temperature-scaled) logits z as a third output, without gradient.

    The sequence axis is split into chunks of `chunk_size` (T is padded up to a multiple) and mapped with
    `lax.map`, each chunk under `jax.checkpoint`. Within a sequence chunk the vocabulary is swept in
    chunks of `vocab_chunk_size` columns (None: all V at once) with an online logsumexp:
    ```
    m ← max(m, max_v z_v);  s ← s·e^(m_old − m) + Σ_v e^(z_v − m);  t ← t·e^(m_old − m) + Σ_v e^(z_v − m)·z_v
    logsumexp = m + log s;  logp = z_target − logsumexp;  H = logsumexp − t/s   (= lse − Σ_v π_v z_v)
    ```
    each vocabulary chunk rematerialised in the backward pass, so neither pass ever holds more than
    [N, chunk_size, vocab_chunk_size] logits (the memory cost of the head no longer grows with V).
    The results equal the unchunked computation up to float rounding, gradients included. Logits are
    divided by the rollout temperature before the softmax, as verl's actor does; the matrix is cast to
    the hidden dtype with float32 accumulation (`models.unembed`). Gradients flow to `hidden` and
    `unembedding`.
    """
    n, t, h = hidden.shape
    width, num_vocab_chunks = _vocab_chunks(unembedding.shape[1], vocab_chunk_size)
    num_chunks = -(-t // chunk_size)
    pad = num_chunks * chunk_size - t
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    targets = jnp.pad(targets, ((0, 0), (0, pad)))
    hidden_chunks = hidden.reshape(n, num_chunks, chunk_size, h).swapaxes(0, 1)  # [C, N, chunk, H]
    target_chunks = targets.reshape(n, num_chunks, chunk_size).swapaxes(0, 1)  # [C, N, chunk]

    @jax.checkpoint
    def one_chunk(xs):
        h_chunk, t_chunk = xs
        m, s, tz, target_logit = _online_softmax_stats(
            h_chunk, t_chunk, unembedding, width, num_vocab_chunks, temperature)
        lse = m + jnp.log(s)
        outputs = (target_logit - lse, lse - tz / s)
        if min_p is None:
            return outputs
        proxy = _minp_proxy_from_stats(h_chunk, unembedding, width, num_vocab_chunks, temperature, m, target_logit,
                                       min_p)
        return outputs + (proxy,)

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
    Ties at the threshold are all kept (TRL's `entropies >= threshold`), so with tied entropies more than a
    ρ fraction of the tokens can be selected.
    """
    entropy = jax.lax.stop_gradient(entropy)
    threshold = masked_quantile(entropy, mask, 1.0 - rho)
    return ((entropy >= threshold) & (mask != 0)).astype(jnp.float32)


def normalized_entropy_stats(
    entropy: jax.Array,  # [N, T]
    mask: jax.Array,  # [N, T]
    *,
    pivot: float = 0.8,
) -> jax.Array:  # [4]: (centre, spread, scale_pos, scale_neg)
    """The statistics of HAPO's token entropy score ĥ over the valid tokens of a batch (Liu et al. 2025, "From
    Uniform to Heterogeneous"; starriver030515/HAPO `core_algos.compute_entropy_h`):

    ```
    e = log(max(H, 1e-8));  centre = quantile_pivot(e over valid tokens, "nearest");
    spread = sqrt(mean_valid((e − centre)²));  z = (e − centre)/spread;
    scale_pos = 1 / max(z over valid, z > 0),   scale_neg = 1 / |min(z over valid, z ≤ 0)|
    ```
    so that ĥ = z·scale_pos for z > 0 and z·scale_neg for z ≤ 0 lies in [−1, 1] on these tokens
    (`normalized_entropy_scores`). A zero spread or an empty side gives a scale of 1 (the side's ĥ is then 0 or
    absent). The sampler's adaptive temperature reads the previous RL step's stats (`sampling.entropy_temperature`).
    The official code's scale_neg is −1/|min z|, so its ĥ is ≥ 0 on both sides of the centre; here ĥ < 0 below
    it, as the paper's formulas (temperature T·(1 + τ·ĥ) and the clip ranges) have it.
    """
    require("pivot", pivot, 0 <= pivot <= 1, "must lie in [0, 1]")
    e = jnp.log(jnp.maximum(jax.lax.stop_gradient(entropy), 1e-8))
    centre = masked_quantile(e, mask, pivot, interpolation="nearest")
    spread = jnp.sqrt(masked_mean(jnp.square(e - centre), mask))
    z = (e - centre) / jnp.where(spread > 0, spread, 1.0)
    valid = mask != 0
    z_max = jnp.max(jnp.where(valid & (z > 0), z, 0.0))
    z_min = jnp.min(jnp.where(valid & (z <= 0), z, 0.0))
    scale_pos = 1.0 / jnp.where(z_max > 0, z_max, 1.0)
    scale_neg = 1.0 / jnp.where(z_min < 0, -z_min, 1.0)
    return jnp.stack([centre, jnp.where(spread > 0, spread, 1.0), scale_pos, scale_neg]).astype(jnp.float32)


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
    (μ, s and the two scales: `normalized_entropy_stats`), so ĥ ∈ [−1, 1] on valid tokens and ĥ = 0 at the pivot
    token. Treated as a constant.
    """
    centre, spread, scale_pos, scale_neg = normalized_entropy_stats(entropy, mask, pivot=pivot)
    z = (jnp.log(jnp.maximum(jax.lax.stop_gradient(entropy), 1e-8)) - centre) / spread
    return jnp.where(z > 0, z * scale_pos, z * scale_neg) * (mask != 0)


def steer_token_weights(
    logp: jax.Array,  # [N, T] current policy
    old_logp: jax.Array,  # [N, T] rollout (old) policy
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    entropy: jax.Array,  # [N, T] token entropy of the current policy
    *,
    weight_min: float,
    weight_max: float,
    mapping: str,
) -> jax.Array:  # [N, T] in [weight_min, 1] (exponential) or [weight_min, weight_max] (linear); 0 off the mask
    """STEER per-token weights from the predicted entropy change (Hao et al. 2025, "Rethinking Entropy
    Interventions in RLVR: An Entropy Change Perspective"; zz-haooo/STEER `compute_token_weights`).

    First-order entropy change a token's update causes, under no gradient:
    ```
    π = clip(e^logp, 1e-8, 1 − 1e-8);  π_old = clip(e^old_logp, 1e-8, 1)
    Ω = |A/π_old · π(1 − π) · (log π + H)|          (non-finite Ω -> 0)
    exponential: k = −ln(w_min) / max(max_valid Ω, 0.02);  w = clip(e^(−k·Ω), w_min, 1)
    linear:      w = clip(w_max − (Ω − Ω_min)·(w_max − w_min)/(Ω_max − Ω_min), w_min, w_max)
                 ((w_min + w_max)/2 for every token if Ω_max = Ω_min)
    ```
    max/min over the valid tokens of the WHOLE batch given (the reference takes them per micro-batch).
    Tokens whose update would move the entropy most are down-weighted toward w_min; with A ≡ 0 every
    weight is 1 (exponential). The authors' runs: exponential, w_min = 0.8, w_max = 1.
    """
    require("weight_min", weight_min, 0 < weight_min <= 1, "must lie in (0, 1]")
    require("weight_max", weight_max, weight_max >= weight_min, f"must be >= weight_min={weight_min}")
    require("mapping", mapping, mapping in ("exponential", "linear"), "must be 'exponential' or 'linear'")
    logp, old_logp, entropy = jax.lax.stop_gradient((logp, old_logp, entropy))
    adv = jax.lax.stop_gradient(advantages[:, None] if advantages.ndim == 1 else advantages)
    p = jnp.clip(jnp.exp(logp), 1e-8, 1.0 - 1e-8)
    p_old = jnp.clip(jnp.exp(old_logp), 1e-8, 1.0)
    omega = adv / p_old * p * (1.0 - p) * (jnp.log(p) + entropy)
    omega = jnp.abs(jnp.where(jnp.isfinite(omega), omega, 0.0))
    valid = mask != 0
    omega_max = jnp.max(jnp.where(valid, omega, -jnp.inf))
    if mapping == "exponential":
        k = -jnp.log(weight_min) / jnp.maximum(omega_max, 0.02)
        weights = jnp.clip(jnp.exp(-k * omega), weight_min, 1.0)
    else:
        omega_min = jnp.min(jnp.where(valid, omega, jnp.inf))
        spread = omega_max - omega_min
        scaled = weight_max - (omega - omega_min) * (weight_max - weight_min) / jnp.where(spread > 0, spread, 1.0)
        weights = jnp.clip(jnp.where(spread > 0, scaled, 0.5 * (weight_min + weight_max)), weight_min, weight_max)
    return jnp.where(valid, weights, 0.0)
