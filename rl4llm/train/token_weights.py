"""Per-token weights of the policy loss beyond the kernel's own: the batch's token weights (e.g. the 80/20
forking-token mask) times truncated importance-sampling weights against the sampler (`policy_is_weights`), and the
metrics of those mechanisms (`mechanism_sums`)."""

from __future__ import annotations

import jax.numpy as jnp

from rl4llm.rl import losses as losses_lib


def policy_is_weights(cfg, old_logp, mb):
    """Per-token weights [N, T] of the policy loss (or None): batch token weights × truncated IS weights.

    TIS (Yao et al. 2025): `min(exp(old_logp − sampler_logp), tis_cap)` per token or per sequence, where
    old_logp are the learner's log-probs of the rollout policy (`losses.truncated_is_weights`).
    """
    weights = mb.token_weights
    if cfg.tis_cap > 0:
        tis = tis_weights(cfg, old_logp, mb)
        weights = tis if weights is None else weights * tis
    return weights


def tis_weights(cfg, old_logp, mb):
    """TIS weights [N, T] against the sampler (`losses.truncated_is_weights`, cap `cfg.tis_cap` > 0)."""
    return losses_lib.truncated_is_weights(old_logp, mb.sampler_logp, mb.completion_mask, cap=cfg.tis_cap,
                                           level=cfg.tis_level)


def mechanism_sums(cfg, old_logp, mb) -> dict:
    """Token sums of the learner-side mechanisms' metrics (divided by the token count when logged):
    `token_selection_frac` (80/20: tokens kept by the forking-token mask), `tis/weight_mean` and
    `tis/truncated_frac` (truncated IS: mean weight, tokens whose ratio reached the cap)."""
    mask = mb.completion_mask
    sums = {}
    if mb.token_weights is not None:
        sums["token_selection_frac"] = jnp.sum((mb.token_weights != 0) * mask)
    if cfg.tis_cap > 0:
        tis = tis_weights(cfg, old_logp, mb)
        sums["tis/weight_mean"] = jnp.sum(tis * mask)
        sums["tis/truncated_frac"] = jnp.sum((tis >= cfg.tis_cap) * mask)
    return sums
