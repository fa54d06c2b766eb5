"""Per-token KL estimators (Schulman 2020, "Approximating KL Divergence"; verl `kl_penalty`).

With `Δ = logp − ref_logp` for tokens sampled from π (the policy being penalised):

| kind                     | value                                                            |
|--------------------------|------------------------------------------------------------------|
| "k1" ("kl")              | `Δ`                                                              |
| "abs"                    | `|Δ|`                                                            |
| "k2" ("mse")             | `½Δ²`                                                            |
| "k3" ("low_var_kl")      | `k = clip(−Δ, −20, 20)`; `clip(eᵏ − k − 1, −10, 10)`              |
| any of the above + "+"   | the value of the base estimator with the gradient of k2          |

All of k1 and k3 are unbiased for KL(π‖π_ref) under x ~ π; k3 ≥ 0. The "+" straight-through form
(`½Δ² − sg(½Δ²) + sg(value)`) is verl's fix from PR #6058: only k2's gradient is an unbiased
gradient of reverse KL on-policy.

Ties follow torch (verl): "abs" has gradient sign(Δ) = 0 at Δ = 0 (`aggregation.abs_torch_grad`), and k3's
clamps pass the gradient up to and including their bounds (`aggregation.clip_torch_grad`, torch.clamp).
At Δ = 0 every estimator's gradient is 0 except k1's (1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rl4llm.rl.aggregation import abs_torch_grad, clip_torch_grad

_ALIASES = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}
KINDS = ("k1", "abs", "k2", "k3", "k1+", "abs+", "k2+", "k3+")


def _forward(logp: jax.Array, ref_logp: jax.Array, kind: str) -> jax.Array:
    log_ratio = logp - ref_logp
    if kind == "k1":
        return log_ratio
    if kind == "abs":
        return abs_torch_grad(log_ratio)
    if kind == "k2":
        return 0.5 * jnp.square(log_ratio)
    if kind == "k3":
        k = clip_torch_grad(ref_logp - logp, -20.0, 20.0)
        return clip_torch_grad(jnp.exp(k) - k - 1.0, -10.0, 10.0)
    raise ValueError(f"unknown KL estimator {kind!r}; known: {', '.join(KINDS)} (aliases: {_ALIASES})")


def estimate(logp: jax.Array, ref_logp: jax.Array, kind: str) -> jax.Array:
    """Per-token KL(π‖π_ref) estimate of the given `kind` (see module docstring); same shape as `logp`."""
    straight_through = kind.endswith("+")
    base = kind[:-1] if straight_through else kind
    base = _ALIASES.get(base, base)
    value = _forward(logp, ref_logp, base)
    if not straight_through or base == "k2":
        return value
    k2 = 0.5 * jnp.square(logp - ref_logp)
    return k2 - jax.lax.stop_gradient(k2) + jax.lax.stop_gradient(value)


def kl_in_reward(
    rewards: jax.Array,  # [N, T] token-level scores
    old_logp: jax.Array,  # [N, T] log-probs of the rollout policy
    ref_logp: jax.Array,  # [N, T]
    mask: jax.Array,  # [N, T]
    *,
    coef: float | jax.Array,
    kind: str = "k1",
) -> tuple[jax.Array, jax.Array]:
    """KL penalty in the reward (Ziegler et al. 2019; verl `apply_kl_penalty`).

    `kld = estimate(old_logp, ref_logp, kind)·m`; returns `(rewards − coef·kld, current_kl)` with
    `current_kl = mean_i(masked_mean_t(kld_i))`, the value the adaptive controller consumes.
    """
    kld = estimate(old_logp, ref_logp, kind) * mask
    per_seq = jnp.sum(kld * mask, axis=-1) / (jnp.sum(mask, axis=-1) + 1e-8)
    return rewards - coef * kld, jnp.mean(per_seq)


def adaptive_kl_coef(
    coef: float | jax.Array,
    current_kl: float | jax.Array,
    n_steps: int | jax.Array,
    *,
    target: float = 0.1,
    horizon: int = 10000,
) -> jax.Array:
    """Adaptive KL controller (Ziegler et al. 2019, "Fine-Tuning LMs from Human Preferences"; verl
    `AdaptiveKLController`): `β ← β·(1 + clip(KL/target − 1, −0.2, 0.2)·n_steps/horizon)`, with n_steps the
    number of sequences in the batch. Golden: β = 0.001, KL = 0.5, n = 256 -> 0.00100512.
    """
    error = jnp.clip(current_kl / target - 1.0, -0.2, 0.2)
    return coef * (1.0 + error * n_steps / horizon)
