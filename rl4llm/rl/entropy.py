"""Token entropy and entropy control."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def from_logits(logits: jax.Array) -> jax.Array:  # [..., V] -> [...]
    """Entropy of softmax(z) in float32: `H = logsumexp(z) − Σ_v softmax(z)_v·z_v` (verl `entropy_from_logits`).

    Logits of −inf (masked vocabulary entries) contribute 0, without NaN in value or gradient.
    """
    z = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(z, axis=-1)
    probs = jnp.exp(z - lse[..., None])
    z_finite = jnp.where(jnp.isfinite(z), z, 0.0)
    return lse - jnp.sum(probs * z_finite, axis=-1)
