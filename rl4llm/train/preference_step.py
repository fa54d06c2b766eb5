"""Pairwise preference objectives as the learner's loss (`config.preference.loss`): online DPO, CPL and P3O on the
RL loop's groups.

Every RL step samples G completions per prompt with the current policy, the verifier's score picks each group's best
and worst completion (`rl.preference.pairs_from_groups`; all-equal groups give no pair), and the update minimises a
pair loss over those pairs' sequence log-probs:

- `"dpo"`: online DPO (Guo et al. 2024, "Direct Language Model Alignment from Online AI Feedback"),
  `rl.preference.dpo_loss` on the policy's and the reference policy's (no gradient) summed log-probs. The reference
  is the warm-start policy (OAIF), or with `rl.ref_reset_every = n` the policy of n steps before (iterative DPO
  against the previous iterate: DNO, Rosset et al. 2024; DPO-VP, arXiv 2503.12854).
- `"cpl"`: CPL (Hejna et al. 2023, arXiv 2310.13639), `rl.preference.cpl_loss` on discounted summed log-probs
  (`discounted_sequence_logprobs`); reference-free.
- `"p3o"`: P3O (Wu et al. 2023, arXiv 2310.00212), `rl.preference.p3o_loss` on the sequence ratios against the
  log-probs before this step's updates (`LearnerBatch.old_logp`; with one update per step they are the current ones,
  ratio 1) and the pair's reward difference.

The loss replaces `rl.loss`; the KL and entropy terms of `rl` are added as for any loss; the advantages are not read.

Micro-batching (`rl.micro_batch_size`): per-row sequence log-probs first, then combined. A forward-only pass over
the whole minibatch (`pair_terms`, micro-batch by micro-batch) gives every row's sequence log-prob s_i under the
policy (and for DPO the reference); the pair loss L(s) over the whole minibatch and its gradient g_i = ∂L/∂s_i follow.
Each micro-batch's loss is then the surrogate `Σ_i loss_i + Σ_i g_i·(s_i − sg(s_i))` over its rows (`surrogate_loss`),
whose value sums to L over the micro-batches (loss_i: each valid pair's share of L, on its chosen row) and whose
gradient sums to Σ_i g_i·∇s_i = ∇L (chain rule): the update does not depend on the micro-batch size, and a pair's
two rows may sit in different micro-batches. Cost: one extra forward of the policy (and for DPO one of the reference).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from rl4llm.config import validation as config_lib
from rl4llm.rl import preference
from rl4llm.train import optim


@dataclasses.dataclass(frozen=True)
class PreferenceSettings:
    """Static settings of the pairwise objective (a field of the hashable `learner.LearnerConfig`)."""

    loss: str  # "dpo" | "cpl" | "p3o"; also the prefix of its metrics ("dpo/loss", ...)
    kind: str  # DPO: rl.preference.DPO_KINDS
    beta: float  # DPO
    label_smoothing: float  # DPO
    num_groups: int  # the groups of a batch (rl.num_prompts)
    alpha: float = 0.1  # CPL: temperature
    conservative_bias: float = 0.5  # CPL: λ on the rejected segment
    discount: float = 1.0  # CPL: γ over a segment's tokens
    clip_ratio: float = 0.2  # P3O: ε
    clip_mode: str = "joint"  # P3O: rl.preference.P3O_CLIP_MODES
    use_old_logp: bool = False  # P3O: ratios against LearnerBatch.old_logp (several updates per step), else ratio 1


def settings(config) -> PreferenceSettings | None:
    """The run's pairwise objective (`config.preference`), or None when `rl.loss` is the policy loss."""
    if not config_lib.uses_pairwise_objective(config):
        return None
    p = config.preference
    return PreferenceSettings(p.loss, p.kind, p.beta, p.label_smoothing, config.rl.num_prompts, alpha=p.alpha,
                              conservative_bias=p.conservative_bias, discount=p.discount, clip_ratio=p.clip_ratio,
                              clip_mode=p.clip_mode,
                              # train.programs.several_updates_per_step (which imports this module)
                              use_old_logp=config.rl.ppo_epochs * config.rl.num_minibatches > 1)


class PairTerms(NamedTuple):
    """Per-row terms of the whole minibatch's pair loss, split into micro-batches with the LearnerBatch."""

    grad: jax.Array  # [N] ∂L/∂s_i (0 on rows in no valid pair)
    loss: jax.Array  # [N] each valid pair's loss / #valid pairs, on its chosen row (Σ_i = L); 0 elsewhere


def sequence_logprobs(cfg: PreferenceSettings, logp: jax.Array, mask: jax.Array) -> jax.Array:  # [N, T] -> [N]
    """s_i = Σ_t m·log π (DPO, P3O), for IPO the length-normalised mean (TRL's IPO input), for CPL the discounted
    Σ_k γ^k log π over the valid tokens."""
    if cfg.loss == "cpl":
        return preference.discounted_sequence_logprobs(logp, mask, gamma=cfg.discount)
    return preference.sequence_logprobs(logp, mask, mean=cfg.loss == "dpo" and cfg.kind == "ipo")


def pair_loss(cfg: PreferenceSettings, policy_seq, ref_seq, old_seq, scores, group_ids):  # [N] each
    """The pair loss over each group's best-vs-worst pair by `scores` (`rl.preference.pairs_from_groups`, then
    `dpo_loss`, `cpl_loss` or `p3o_loss`; `ref_seq` is read by DPO only, `old_seq` by P3O only).
    -> (L = mean over valid pairs, (per-row loss shares [N] as `PairTerms.loss`, the kernel's metrics with
    `valid_pair_frac`: the fraction of groups that gave a pair)). Differentiable in `policy_seq`."""
    chosen, rejected, valid = preference.pairs_from_groups(scores, group_ids, num_groups=cfg.num_groups)
    if cfg.loss == "cpl":
        losses, metrics = preference.cpl_loss(policy_seq[chosen], policy_seq[rejected], alpha=cfg.alpha,
                                              conservative_bias=cfg.conservative_bias, valid=valid)
    elif cfg.loss == "p3o":
        losses, metrics = preference.p3o_loss(policy_seq[chosen], policy_seq[rejected], old_seq[chosen],
                                              old_seq[rejected], scores[chosen], scores[rejected],
                                              clip_ratio=cfg.clip_ratio, clip_mode=cfg.clip_mode, valid=valid)
    else:
        losses, metrics = preference.dpo_loss(policy_seq[chosen], policy_seq[rejected], ref_seq[chosen],
                                              ref_seq[rejected], beta=cfg.beta, kind=cfg.kind,
                                              label_smoothing=cfg.label_smoothing, valid=valid)
    row_loss = jnp.zeros_like(policy_seq).at[chosen].add(losses) / jnp.maximum(jnp.sum(valid), 1)
    metrics["valid_pair_frac"] = metrics.pop("valid_frac")
    return metrics["loss"], (row_loss, metrics)


def pair_terms(cfg: PreferenceSettings, logprob_fn: Callable, micro_batch_size: int, params, ref_params, batch):
    """The whole minibatch's `PairTerms` and metrics ("<loss>/loss", ..., "<loss>/valid_pair_frac"), from
    forward-only passes of the policy (`params`) and, for DPO, the reference over its micro-batches.
    `logprob_fn(params, tokens, attention_mask) -> (logp, entropy)` [m, T] (the learner's).
    `batch`: a `learner.LearnerBatch` with `scores` and `group_ids`; rows without a trained token (groups the
    prompt selection masked out) belong to no group."""
    mask = batch.completion_mask
    inputs = optim.split_microbatches((batch.tokens, batch.attention_mask), micro_batch_size)

    def rows_logp(p):  # [N] sequence log-probs under params p
        logp = jax.lax.map(lambda xs: logprob_fn(p, *xs)[0], inputs).reshape(mask.shape)
        return sequence_logprobs(cfg, logp, mask)

    group_ids = jnp.where(jnp.any(mask > 0, axis=-1), batch.group_ids, -1)
    policy_seq = rows_logp(params)
    ref_seq = rows_logp(ref_params) if cfg.loss == "dpo" else None
    old_seq = sequence_logprobs(cfg, batch.old_logp, mask) if cfg.use_old_logp else jax.lax.stop_gradient(policy_seq)
    loss_fn = functools.partial(pair_loss, cfg, ref_seq=ref_seq, old_seq=old_seq, scores=batch.scores,
                                group_ids=group_ids)
    (_, (row_loss, metrics)), row_grad = jax.value_and_grad(loss_fn, has_aux=True)(policy_seq)
    terms = jax.lax.stop_gradient(PairTerms(grad=row_grad, loss=row_loss))
    return terms, {f"{cfg.loss}/{k}": v for k, v in metrics.items()}


def surrogate_loss(cfg: PreferenceSettings, logp: jax.Array, mask: jax.Array, terms: PairTerms) -> jax.Array:
    """A micro-batch's share of the pair loss: `Σ_i loss_i + Σ_i g_i·(s_i − sg(s_i))` over its rows (module
    docstring); its value is its rows' share of L and its gradient Σ_i g_i·∇s_i."""
    s = sequence_logprobs(cfg, logp, mask)
    return jnp.sum(terms.loss) + jnp.sum(terms.grad * (s - jax.lax.stop_gradient(s)))
