"""Pairwise preference objectives as the learner's loss (`config.preference.loss`): online DPO, CPL and P3O on the
single-turn RL loop's groups, DMPO and SDPO on the agent loop's groups of episodes.

Every RL step samples G completions per prompt (agent runs: G episodes per task) with the current policy, the
verifier's score (agent runs: the episode return, `train.episodes.episode_returns`) picks each group's best and worst
(`rl.preference.pairs_from_groups`; all-equal groups give no pair), and the update minimises a pair loss over those
pairs' log-probs:

- `"dpo"`: online DPO (Guo et al. 2024, "Direct Language Model Alignment from Online AI Feedback"),
  `rl.preference.dpo_loss` on the policy's and the reference policy's (no gradient) summed log-probs. The reference
  is the warm-start policy (OAIF), or with `rl.ref_reset_every = n` the policy of n steps before (iterative DPO
  against the previous iterate: DNO, Rosset et al. 2024; DPO-VP, arXiv 2503.12854).
- `"cpl"`: CPL (Hejna et al. 2023, arXiv 2310.13639), `rl.preference.cpl_loss` on discounted summed log-probs
  (`discounted_sequence_logprobs`); reference-free.
- `"p3o"`: P3O (Wu et al. 2023, arXiv 2310.00212), `rl.preference.p3o_loss` on the sequence ratios against the
  log-probs before this step's updates (`LearnerBatch.old_logp`; with one update per step they are the current ones,
  ratio 1) and the pair's reward difference.
- `"dmpo"` (agent runs): DMPO (Shi et al. 2024, arXiv 2406.14868), `rl.preference.dmpo_loss`: DPO on the action
  tokens' log-ratios weighted by their turn, φ(j, T) = γ^j(1 − γ^{T−j})/(1 − γ^T) (γ = `preference.turn_discount`).
- `"sdpo"` (agent runs): SDPO (Kong et al. 2025, arXiv 2501.01821), `rl.preference.sdpo_loss`: DPO on the log-ratios
  of the turns [e, e + k') of both episodes, e their first divergent turn, k' = `preference.segment_turns` truncated
  to the turns both have (the paper's judge-located segments and re-sampled continuations are not used: see
  `sdpo_loss`).

The loss replaces `rl.loss`; the KL and entropy terms of `rl` are added as for any loss; the advantages are not read.

Micro-batching (`rl.micro_batch_size`): per-token log-probs first, then combined. A forward-only pass over the whole
minibatch (`pair_terms`, micro-batch by micro-batch) gives every token's log-prob ℓ_it under the policy (and for
DPO, DMPO and SDPO the reference); the pair loss L(ℓ) over the whole minibatch and its gradient g_it = ∂L/∂ℓ_it follow.
Each micro-batch's loss is then the surrogate `Σ_i loss_i + Σ_{i,t} g_it·(ℓ_it − sg(ℓ_it))` over its rows
(`surrogate_loss`), whose value sums to L over the micro-batches (loss_i: each valid pair's share of L, on its chosen
row) and whose gradient sums to Σ g_it·∇ℓ_it = ∇L (chain rule): the update does not depend on the micro-batch size,
and a pair's two rows may sit in different micro-batches. Cost: one extra forward of the policy (and one of the
reference for the losses that read it).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from rl4llm.config import validation as config_lib
from rl4llm.rl import preference
from rl4llm.train import optim


@dataclasses.dataclass(frozen=True)
class PreferenceSettings:
    """Static settings of the pairwise objective (a field of the hashable `learner.LearnerConfig`)."""

    loss: str  # "dpo" | "cpl" | "p3o" | "dmpo" | "sdpo"; also the prefix of its metrics ("dpo/loss", ...)
    kind: str  # DPO: rl.preference.DPO_KINDS
    beta: float  # DPO, DMPO, SDPO
    label_smoothing: float  # DPO
    num_groups: int  # the groups of a batch (rl.num_prompts)
    alpha: float = 0.1  # CPL: temperature
    conservative_bias: float = 0.5  # CPL: λ on the rejected segment
    discount: float = 1.0  # CPL: γ over a segment's tokens
    clip_ratio: float = 0.2  # P3O: ε
    clip_mode: str = "joint"  # P3O: rl.preference.P3O_CLIP_MODES
    use_old_logp: bool = False  # P3O: ratios against LearnerBatch.old_logp (several updates per step), else ratio 1
    turn_discount: float = 0.7  # DMPO: γ of the turn weights
    segment_turns: int = 2  # SDPO: k, the segment's turns


def settings(config) -> PreferenceSettings | None:
    """The run's pairwise objective (`config.preference`), or None when `rl.loss` is the policy loss."""
    if not config_lib.uses_pairwise_objective(config):
        return None
    p = config.preference
    return PreferenceSettings(p.loss, p.kind, p.beta, p.label_smoothing, config.rl.num_prompts, alpha=p.alpha,
                              conservative_bias=p.conservative_bias, discount=p.discount, clip_ratio=p.clip_ratio,
                              clip_mode=p.clip_mode,
                              # train.programs.several_updates_per_step (which imports this module)
                              use_old_logp=config.rl.ppo_epochs * config.rl.num_minibatches > 1,
                              turn_discount=p.turn_discount, segment_turns=p.segment_turns)


class PairRows(NamedTuple):
    """What the pairs are formed and weighted by, per row of the whole minibatch."""

    mask: jax.Array  # [N, T] completion mask (trained tokens)
    scores: jax.Array  # [N] the reward (single-turn) or episode return (agent) that orders a group
    group_ids: jax.Array  # [N] −1: in no group
    turn_id: Any = None  # [N, T] turn of each action token, −1 elsewhere (agent batches: DMPO, SDPO)
    tokens: Any = None  # [N, T] the completion positions' tokens (SDPO's first divergent turn)


class PairTerms(NamedTuple):
    """Per-row terms of the whole minibatch's pair loss, split into micro-batches with the LearnerBatch."""

    grad: jax.Array  # [N, T] ∂L/∂log π_t (0 off the tokens a valid pair's loss reads)
    loss: jax.Array  # [N] each valid pair's loss / #valid pairs, on its chosen row (Σ_i = L); 0 elsewhere


def reads_reference(cfg: PreferenceSettings) -> bool:
    """Whether the pair loss reads the reference policy's log-ratios (DPO, DMPO, SDPO)."""
    return cfg.loss in config_lib.REFERENCE_PAIR_LOSSES


def sequence_logprobs(cfg: PreferenceSettings, logp: jax.Array, mask: jax.Array) -> jax.Array:  # [P, T] -> [P]
    """s = Σ_t m·log π (DPO, P3O), for IPO the length-normalised mean (TRL's IPO input), for CPL the discounted
    Σ_k γ^k log π over the valid tokens."""
    if cfg.loss == "cpl":
        return preference.discounted_sequence_logprobs(logp, mask, gamma=cfg.discount)
    return preference.sequence_logprobs(logp, mask, mean=cfg.loss == "dpo" and cfg.kind == "ipo")


def _mean_over(values, valid):  # mean of values over the valid pairs; 0 without one
    return jnp.sum(jnp.where(valid, values, 0)) / jnp.maximum(jnp.sum(valid), 1)


def pair_loss(cfg: PreferenceSettings, policy_logp, ref_logp, old_logp, rows: PairRows):  # logp [N, T] each
    """The pair loss over each group's best-vs-worst pair by `rows.scores` (`rl.preference.pairs_from_groups`),
    on the pairs' per-token log-probs: `dpo_loss`, `cpl_loss` or `p3o_loss` on their sequence log-probs
    (`sequence_logprobs` over the mask), `dmpo_loss` on the turn-weighted log-ratios, or `sdpo_loss` on the
    segments of turns [e, e + k') from the pair's first divergent turn e (`first_divergent_turn`, `sdpo_segments`;
    a pair without a common turn after e has no segment and is dropped). `ref_logp` is read by DPO, DMPO and SDPO,
    `old_logp` by P3O only. -> (L = mean over valid pairs, (per-row loss shares [N] as `PairTerms.loss`, the
    kernel's metrics with `valid_pair_frac`: the fraction of groups that gave a pair; SDPO adds `first_turn` and
    `segment_turns`, the means of e and k' over its pairs)). Differentiable in `policy_logp`."""
    chosen, rejected, valid = preference.pairs_from_groups(rows.scores, rows.group_ids, num_groups=cfg.num_groups)
    extra = {}
    if cfg.loss in config_lib.MULTI_TURN_PAIR_LOSSES:
        pairs = lambda x: (x[chosen], x[rejected])  # noqa: E731
        (pc, pr), (rc, rr), (tc, tr) = pairs(policy_logp), pairs(ref_logp), pairs(rows.turn_id)
        if cfg.loss == "dmpo":
            losses, metrics = preference.dmpo_loss(pc, pr, rc, rr, tc, tr, beta=cfg.beta, gamma=cfg.turn_discount,
                                                   valid=valid)
        else:
            first = preference.first_divergent_turn(*pairs(rows.tokens), tc, tr)
            seg_c, seg_r, turns = preference.sdpo_segments(tc, tr, first, segment_turns=cfg.segment_turns)
            valid = valid & (turns > 0)
            losses, metrics = preference.sdpo_loss(pc, pr, rc, rr, seg_c, seg_r, beta=cfg.beta, valid=valid)
            extra = {"first_turn": _mean_over(first, valid), "segment_turns": _mean_over(turns, valid)}
    else:
        def seq(logp):  # (chosen, rejected) sequence log-probs
            return (sequence_logprobs(cfg, logp[chosen], rows.mask[chosen]),
                    sequence_logprobs(cfg, logp[rejected], rows.mask[rejected]))

        pc, pr = seq(policy_logp)
        if cfg.loss == "cpl":
            losses, metrics = preference.cpl_loss(pc, pr, alpha=cfg.alpha, conservative_bias=cfg.conservative_bias,
                                                  valid=valid)
        elif cfg.loss == "p3o":
            losses, metrics = preference.p3o_loss(pc, pr, *seq(old_logp), rows.scores[chosen], rows.scores[rejected],
                                                  clip_ratio=cfg.clip_ratio, clip_mode=cfg.clip_mode, valid=valid)
        else:
            losses, metrics = preference.dpo_loss(pc, pr, *seq(ref_logp), beta=cfg.beta, kind=cfg.kind,
                                                  label_smoothing=cfg.label_smoothing, valid=valid)
    row_loss = jnp.zeros(rows.scores.shape, losses.dtype).at[chosen].add(losses) / jnp.maximum(jnp.sum(valid), 1)
    metrics["valid_pair_frac"] = metrics.pop("valid_frac")
    return metrics["loss"], (row_loss, {**metrics, **extra})


def pair_terms(cfg: PreferenceSettings, logprob_fn: Callable, micro_batch_size: int, params, ref_params, batch):
    """The whole minibatch's `PairTerms` and metrics ("<loss>/loss", ..., "<loss>/valid_pair_frac"), from
    forward-only passes of the policy (`params`) and, for the losses that read it, the reference over its
    micro-batches. `logprob_fn(params, tokens, attention_mask) -> (logp, entropy)` [m, T] (the learner's).
    `batch`: a `learner.LearnerBatch` with `scores` and `group_ids` (and for DMPO / SDPO `turn_id`); rows without a
    trained token (groups the prompt selection masked out, over-turn masked episodes) belong to no group."""
    mask = batch.completion_mask
    inputs = optim.split_microbatches((batch.tokens, batch.attention_mask), micro_batch_size)

    def token_logp(p):  # [N, T] log-probs under params p
        return jax.lax.map(lambda xs: logprob_fn(p, *xs)[0], inputs).reshape(mask.shape)

    trained = mask > 0
    rows = PairRows(mask=mask, scores=batch.scores, group_ids=jnp.where(jnp.any(trained, axis=-1), batch.group_ids, -1),
                    turn_id=None if batch.turn_id is None else jnp.where(trained, batch.turn_id, -1),
                    tokens=batch.tokens[:, -mask.shape[1]:])
    policy_logp = token_logp(params)
    ref_logp = token_logp(ref_params) if reads_reference(cfg) else None
    old_logp = batch.old_logp if cfg.use_old_logp else jax.lax.stop_gradient(policy_logp)
    loss_fn = functools.partial(pair_loss, cfg, ref_logp=ref_logp, old_logp=old_logp, rows=rows)
    (_, (row_loss, metrics)), token_grad = jax.value_and_grad(loss_fn, has_aux=True)(policy_logp)
    terms = jax.lax.stop_gradient(PairTerms(grad=token_grad, loss=row_loss))
    return terms, {f"{cfg.loss}/{k}": v for k, v in metrics.items()}


def surrogate_loss(logp: jax.Array, terms: PairTerms) -> jax.Array:
    """A micro-batch's share of the pair loss: `Σ_i loss_i + Σ_{i,t} g_it·(log π_it − sg(log π_it))` over its rows
    (module docstring); its value is its rows' share of L and its gradient Σ g_it·∇log π_it."""
    return jnp.sum(terms.loss) + jnp.sum(terms.grad * (logp - jax.lax.stop_gradient(logp)))
