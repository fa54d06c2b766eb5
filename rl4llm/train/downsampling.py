"""D³S's down-sampling in the RL step (`rl4llm.rl.downsampling`; Wang et al. 2025): after the advantages, the step
trains on the rollouts whose advantages vary most (`rl.rollout_selection="max_variance"`, across the batch or
within each group) and, within them, on the tokens of largest |A|·H (`rl.token_selection="advantage_entropy"`,
H from the rollout policy's behaviour pass), with kept shares rising to 1 over `rl.downsample_anneal_steps`.

The advantages are those of the full groups; a dropped rollout keeps its row with a zero loss mask (the learner's
shapes never change), so it adds nothing to the loss or its normaliser. The row's advantage for the selection is
its mean over its valid tokens (the outcome advantage A_i for outcome-level estimators)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rl4llm.rl import downsampling


def kept_fraction(config, step: int, start: float) -> float:
    """The share kept at the rollout source's step `step` (0-based: the metrics' step + 1) of a selection starting at
    `start` (`downsampling.keep_fraction`)."""
    return downsampling.keep_fraction(step + 1, start=start, anneal_steps=config.rl.downsample_anneal_steps)


def rollout_mask(config, step: int, advantages, mask, group_ids) -> tuple:
    """The step's kept rollouts [N] float {0, 1} under `rl.rollout_selection` (None when all are kept) and
    metrics: downsample/rollouts_dropped_frac, downsample/adv_std_all and downsample/adv_std_kept (population std of
    the rows' advantages before and after). advantages, mask: [N, T]; group_ids [N]."""
    rl = config.rl
    if rl.rollout_selection == "all":
        return None, {}
    row_adv = jnp.sum(advantages * mask, axis=-1) / jnp.maximum(jnp.sum(mask, axis=-1), 1.0)
    fraction = kept_fraction(config, step, rl.rollout_selection_frac)
    if rl.rollout_selection_scope == "batch":  # D³S: one selection across all groups
        ids, num_groups, size = jnp.zeros_like(group_ids), 1, row_adv.shape[0]
    else:  # D³S-I: within each group
        ids, num_groups, size = group_ids, rl.num_prompts, rl.num_generations
    keep = downsampling.rows_kept(fraction, size)
    rows = downsampling.max_variance_subset(row_adv, ids, num_groups=num_groups, keep=keep)
    kept_mean = jnp.sum(rows * row_adv) / jnp.sum(rows)
    metrics = jax.device_get({  # one transfer for the three
        "downsample/rollouts_dropped_frac": 1.0 - jnp.mean(rows),
        "downsample/adv_std_all": jnp.std(row_adv),
        "downsample/adv_std_kept": jnp.sqrt(jnp.sum(rows * (row_adv - kept_mean) ** 2) / jnp.sum(rows)),
    })
    return rows, {k: float(v) for k, v in metrics.items()}


def token_mask(config, step: int, advantages, entropy, mask):
    """D³S's token selection [N, T] (`downsampling.advantage_entropy_token_mask` at this step's kept share)."""
    fraction = kept_fraction(config, step, config.rl.token_selection_rho)
    return downsampling.advantage_entropy_token_mask(advantages, entropy, mask, keep_frac=fraction)
