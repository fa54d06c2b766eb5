"""PRIME implicit process rewards (Cui et al. 2025, "Process Reinforcement through Implicit Rewards";
implicit PRM: Yuan et al. 2024, "Free Process Rewards without Process Labels").

The implicit PRM is a language model π_φ (initialised from the warm-start policy, which is also its
reference π_ref). Its token process reward is `r_t = β·(log π_φ(y_t|y_<t) − log π_ref(y_t|y_<t))`, so the
sequence-level implicit reward is `Σ_t r_t = β·log(π_φ(y)/π_ref(y))`; it is trained online on outcome labels
by cross-entropy on that sequence reward. The advantage combining it with the outcome reward is
`rl.advantages.prime`.
"""

from __future__ import annotations

import jax

from rl4llm.rl.aggregation import masked_sum


def implicit_process_rewards(
    prm_logp: jax.Array,  # [N, T] log π_φ of the completion tokens
    ref_logp: jax.Array,  # [N, T] log π_ref
    mask: jax.Array,  # [N, T]
    *,
    beta: float = 0.05,
) -> jax.Array:  # [N, T]
    """`r_t = β·(log π_φ − log π_ref)·m_t` (PRIME eq. 3; β = 0.05, the paper's default)."""
    return beta * (prm_logp - ref_logp) * mask


def implicit_prm_loss(
    prm_logp: jax.Array,  # [N, T]
    ref_logp: jax.Array,  # [N, T]
    mask: jax.Array,  # [N, T]
    labels: jax.Array,  # [N] outcome labels in [0, 1]
    *,
    beta: float = 0.05,
) -> jax.Array:  # [N] per-sequence loss
    """Cross-entropy of the implicit PRM on outcome labels (PRIME eq. 4; verl recipe `compute_ce_dpo_loss_rm`):
    `z_i = β·Σ_t m·(log π_φ − log π_ref)`, `L_i = −[y_i·log σ(z_i) + (1 − y_i)·log(1 − σ(z_i))]
    = softplus(z_i) − y_i·z_i`; the PRM loss is the mean over sequences."""
    z = masked_sum(implicit_process_rewards(prm_logp, ref_logp, mask, beta=beta), mask, axis=-1)  # [N]
    return jax.nn.softplus(z) - labels.astype(z.dtype) * z
