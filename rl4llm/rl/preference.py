"""Preference objectives: the Bradley–Terry reward-model loss, DPO / cDPO / robust DPO / IPO, CPL, P3O, the
multi-turn DMPO and SDPO, sequence log-probs (plain, length-normalised, discounted), and best-vs-worst pairs from a
GRPO group. Pair losses are not in the registry (a pair loss is not a token loss of its contract): the outcome reward
model trains with `bradley_terry_loss`, and the learner's pair objectives (`config.preference.loss`,
`rl4llm.train.preference_step`) run `dpo_loss`, `cpl_loss` or `p3o_loss` (single-turn groups), `dmpo_loss` or
`sdpo_loss` (agent episodes) on `pairs_from_groups`' pairs.

Conventions (TRL's where the papers leave a choice; sources: `huggingface/trl` `trl/trainer/dpo_config.py`,
`docs/source/dpo_trainer.md`, and the `DPOTrainer.dpo_loss` / `RewardTrainer.compute_loss` bodies):

- every loss returns `(losses[P], metrics)`: per-pair losses, exactly 0 on invalid pairs, and a dict of scalars
  that are means over the valid pairs (0 when there is none). The scalar to minimise is the mean over valid
  pairs, `metrics["loss"] = Σ losses / max(#valid, 1)`; with micro-batches, sum `losses` and the valid count
  over the parts and divide once. P = 0 or all pairs invalid gives losses 0, metrics 0 and zero gradients.
- `valid[P]` (optional, default all True) masks pairs; invalid pairs' inputs are replaced by 0 before any
  nonlinearity, so NaN/inf there reaches neither the losses, the metrics nor the gradients.
- hyper-parameters out of range raise `ValueError("name=value: requirement")` (`aggregation.require`).
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from rl4llm.rl.aggregation import clip_torch_grad, masked_sum, require

Metrics = dict

DPO_KINDS = ("sigmoid", "cdpo", "robust", "ipo")
P3O_CLIP_MODES = ("joint", "separate")
MAX_LOG_RATIO = 20.0  # |Σ_t log π − log π_old| is clamped here before exp (verl clamps token log-ratios at ±20)


def _float(x) -> jax.Array:
    x = jnp.asarray(x)
    return x.astype(jnp.result_type(x, jnp.float32))


def _valid_mask(valid: Optional[jax.Array], shape) -> jax.Array:
    return jnp.ones(shape, bool) if valid is None else jnp.asarray(valid).astype(bool)


def _pair_mean(values: jax.Array, valid: jax.Array) -> jax.Array:
    """Mean of `values` over the valid pairs; 0 when there is none (P = 0 included)."""
    count = jnp.sum(valid.astype(values.dtype))
    return jnp.sum(jnp.where(valid, values, 0.0)) / jnp.maximum(count, 1.0)


def _valid_frac(valid: jax.Array) -> jax.Array:
    return jnp.sum(valid.astype(jnp.float32)) / max(valid.shape[0], 1)


def sequence_logprobs(
    token_logp: jax.Array,  # [P, T] per-token log-probs of the completion
    mask: jax.Array,  # [P, T] 1 on completion tokens
    *,
    mean: bool = False,
) -> jax.Array:  # [P]
    """Sequence log-prob `log π(y|x) = Σ_t m_t·log π(y_t|x, y_<t)` (DPO, Rafailov et al. 2023, eq. 7), or with
    `mean=True` the length-normalised `Σ_t m_t·log π_t / Σ_t m_t`.

    TRL's `DPOTrainer` sums (`loss_type="sigmoid"`, `"robust"`) and averages for `loss_type="ipo"`
    (`average_log_prob=self.loss_type == "ipo"`, later `all_logps / size_completion`): pass `mean=True` for IPO to
    match it. A row without a valid token gives 0 for both (TRL's mean divides by 0 there); values outside the
    mask are zeroed first, so NaN in padding never leaks.
    """
    token_logp, mask = _float(token_logp), _float(mask)
    total = masked_sum(token_logp, mask, axis=-1)
    if not mean:
        return total
    count = jnp.sum(mask, axis=-1)
    return total / jnp.maximum(count, 1.0)


def discounted_sequence_logprobs(
    token_logp: jax.Array,  # [P, T] per-token log-probs of the completion
    mask: jax.Array,  # [P, T] 1 on completion tokens
    *,
    gamma: float = 1.0,
) -> jax.Array:  # [P]
    """Discounted segment log-prob `Σ_k γ^k·log π(a_k|s_k)` over the segment's valid tokens k = 0, 1, ... (CPL,
    Hejna et al. 2023, arXiv 2310.13639, with a token as the action): k counts valid tokens only, so padding
    or masked tokens inside the row do not advance the discount. γ = 1 is `sequence_logprobs` (the official CPL code,
    `jhejna/cpl` `research/algs/cpl.py`, sums undiscounted). Values outside the mask are zeroed first.
    """
    require("gamma", gamma, 0.0 < gamma <= 1.0, "must be in (0, 1]")
    token_logp, mask = _float(token_logp), _float(mask)
    k = jnp.cumsum(mask, axis=-1) - mask  # index of each valid token among the row's valid tokens
    return masked_sum(token_logp * jnp.power(gamma, k), mask, axis=-1)


def bradley_terry_loss(
    chosen_scores: jax.Array,  # [P] reward-model scores r(x, y_c)
    rejected_scores: jax.Array,  # [P] r(x, y_r)
    *,
    margin: Optional[jax.Array] = None,  # [P] or scalar
    valid: Optional[jax.Array] = None,  # [P] bool
) -> tuple[jax.Array, Metrics]:
    """Bradley–Terry pairwise loss of an outcome reward model (Bradley & Terry 1952; InstructGPT, Ouyang et al.
    2022, eq. 1; margin: Llama 2, Touvron et al. 2023, eq. 2):
    `L = −log σ(r_c − r_r − m) = softplus(−(r_c − r_r − m))`, m = 0 without a margin (TRL `RewardTrainer`:
    `-logsigmoid(rewards_chosen - rewards_rejected - inputs["margin"])`).

    Metrics (means over valid pairs): `loss`, `accuracy` = mean[r_c > r_r] (strict: a tie counts as wrong;
    the margin is not subtracted), `margin` = mean(r_c − r_r), `chosen_score`, `rejected_score`, and `valid_frac`
    (fraction of the P pairs that are valid). dL/dr_c = −σ(−(r_c − r_r − m)) = −dL/dr_r.
    """
    rc, rr = _float(chosen_scores), _float(rejected_scores)
    ok = _valid_mask(valid, rc.shape)
    rc, rr = jnp.where(ok, rc, 0.0), jnp.where(ok, rr, 0.0)
    diff = rc - rr
    z = diff if margin is None else diff - jnp.where(ok, _float(margin), 0.0)
    losses = jnp.where(ok, jax.nn.softplus(-z), 0.0)
    sg = jax.lax.stop_gradient
    metrics = {
        "loss": _pair_mean(losses, ok),
        "accuracy": _pair_mean((sg(rc) > sg(rr)).astype(losses.dtype), ok),
        "margin": _pair_mean(sg(diff), ok),
        "chosen_score": _pair_mean(sg(rc), ok),
        "rejected_score": _pair_mean(sg(rr), ok),
        "valid_frac": _valid_frac(ok),
    }
    return losses, metrics


def dpo_loss(
    policy_chosen_logp: jax.Array,  # [P] sequence log-probs (see `sequence_logprobs`)
    policy_rejected_logp: jax.Array,  # [P]
    ref_chosen_logp: jax.Array,  # [P]
    ref_rejected_logp: jax.Array,  # [P]
    *,
    beta: float = 0.1,
    kind: str = "sigmoid",
    label_smoothing: float = 0.0,
    valid: Optional[jax.Array] = None,  # [P] bool
) -> tuple[jax.Array, Metrics]:
    """Direct preference losses on the log-ratio difference
    `h = (log π(y_c) − log π(y_r)) − (log π_ref(y_c) − log π_ref(y_r))` (TRL's `logits`), ε = `label_smoothing`:

    - `"sigmoid"`: DPO (Rafailov et al. 2023, eq. 7) `L = −log σ(βh) = softplus(−βh)`; with ε > 0 it is TRL's
      `loss_type="sigmoid"` with `label_smoothing`, i.e. cDPO below.
    - `"cdpo"`: conservative DPO (Mitchell 2023, "A note on DPO with noisy preferences & relationship to IPO",
      eq. 3): the binary cross-entropy against the soft label 1 − ε,
      `L = −(1 − ε)·log σ(βh) − ε·log σ(−βh)`; the same formula as `"sigmoid"` (named for configs).
      Its minimum over h is at βh = log((1 − ε)/ε): it stops pushing the margin up.
    - `"robust"`: robust DPO (Chowdhury et al. 2024, "Provably Robust DPO", TRL `loss_type="robust"`),
      `L = [−(1 − ε)·log σ(βh) + ε·log σ(−βh)] / (1 − 2ε)`, the unbiased estimate of the clean DPO loss
      under label flips with probability ε: (1 − ε)·L(h) + ε·L(−h) = −log σ(βh). This differs from cDPO:
      the ε term enters with the opposite sign and the loss is rescaled, so it is not bounded below.
    - `"ipo"`: IPO (Azar et al. 2023, "A General Theoretical Paradigm to Understand Learning from Human
      Preferences", eq. 17, β = their τ) `L = (h − 1/(2β))²`, minimal at h = 1/(2β). TRL computes h for IPO from
      length-normalised log-probs; pass `sequence_logprobs(..., mean=True)` to match. ε must be 0.

    β defaults to 0.1 (TRL `DPOConfig.beta`); ε ∈ [0, 0.5] (TRL's documented range), < 0.5 for `"robust"`.
    Pass zeros as the reference log-probs for a reference-free loss (TRL `reference_free=True`).

    Metrics (means over valid pairs, as TRL logs them; no gradient): `rewards/chosen` = β·(log π(y_c) −
    log π_ref(y_c)), `rewards/rejected` likewise, `rewards/margins` = mean(chosen − rejected),
    `rewards/accuracies` = mean[chosen > rejected] (strict), `logps/chosen`, `logps/rejected` (policy), `loss`,
    and `valid_frac`. Gradients: sigmoid dL/dh = −β·σ(−βh); IPO dL/dh = 2·(h − 1/(2β)).
    """
    require("beta", beta, beta > 0, "must be > 0")
    require("kind", kind, kind in DPO_KINDS, f"must be one of {DPO_KINDS}")
    eps = label_smoothing
    require("label_smoothing", eps, 0.0 <= eps <= 0.5, "must be in [0, 0.5]")
    if kind == "robust":
        require("label_smoothing", eps, eps < 0.5, "must be < 0.5 for kind='robust' (it divides by 1 − 2ε)")
    if kind == "ipo":
        require("label_smoothing", eps, eps == 0, "must be 0 for kind='ipo' (IPO has no label smoothing)")

    pc, pr = _float(policy_chosen_logp), _float(policy_rejected_logp)
    rc, rr = _float(ref_chosen_logp), _float(ref_rejected_logp)
    ok = _valid_mask(valid, pc.shape)
    pc, pr, rc, rr = (jnp.where(ok, x, 0.0) for x in (pc, pr, rc, rr))
    h = (pc - pr) - (rc - rr)

    if kind == "ipo":
        losses = jnp.square(h - 1.0 / (2.0 * beta))
    else:
        pos, neg = jax.nn.softplus(-beta * h), jax.nn.softplus(beta * h)  # −log σ(βh), −log σ(−βh)
        if kind == "robust":
            losses = ((1.0 - eps) * pos - eps * neg) / (1.0 - 2.0 * eps)
        else:  # sigmoid / cdpo
            losses = (1.0 - eps) * pos + eps * neg
    losses = jnp.where(ok, losses, 0.0)

    sg = jax.lax.stop_gradient
    chosen_rewards = sg(beta * (pc - rc))
    rejected_rewards = sg(beta * (pr - rr))
    metrics = {
        "loss": _pair_mean(losses, ok),
        "rewards/chosen": _pair_mean(chosen_rewards, ok),
        "rewards/rejected": _pair_mean(rejected_rewards, ok),
        "rewards/margins": _pair_mean(chosen_rewards - rejected_rewards, ok),
        "rewards/accuracies": _pair_mean((chosen_rewards > rejected_rewards).astype(losses.dtype), ok),
        "logps/chosen": _pair_mean(sg(pc), ok),
        "logps/rejected": _pair_mean(sg(pr), ok),
        "valid_frac": _valid_frac(ok),
    }
    return losses, metrics


def pairs_from_groups(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N] ints in [0, num_groups)
    *,
    num_groups: int,
) -> tuple[jax.Array, jax.Array, jax.Array]:  # chosen_index [G] int32, rejected_index [G] int32, valid [G] bool
    """Best-vs-worst preference pair of each GRPO group, for DPO on RLVR rollouts (the pair construction of
    online iterative DPO: the highest- vs lowest-reward of n samples per prompt, Dong et al. 2024 "RLHF Workflow:
    From Reward Modeling to Online RLHF"; correct vs incorrect chains in Pang et al. 2024 "Iterative Reasoning
    Preference Optimization"; ties dropped as in DNO, Rosset et al. 2024).

    `chosen_g` = the first index (lowest row) attaining max_{i∈g} s_i, `rejected_g` = the first index attaining
    min_{i∈g} s_i, `valid_g` = max > min (a group whose scores are all equal, a singleton, an empty group, or one
    whose max/min is NaN expresses no preference). Groups may be non-contiguous. Invalid groups still get
    in-range indices (the first index of the group's max / min where there is one, else 0), so gathering
    with them is safe; mask with `valid` (`dpo_loss(..., valid=valid)`). Dense [N, G] one-hot reductions, as
    `advantages.group_sum` (deterministic, shardable); ids outside [0, G) belong to no group.
    """
    s = _float(scores)
    if s.shape[0] == 0:  # no rollouts: every group empty (argmax has no empty reduction)
        zeros = jnp.zeros((num_groups,), jnp.int32)
        return zeros, zeros, jnp.zeros((num_groups,), bool)
    member = jnp.asarray(group_ids)[:, None] == jnp.arange(num_groups)[None, :]  # [N, G]
    col = s[:, None]
    gmax = jnp.max(jnp.where(member, col, -jnp.inf), axis=0, initial=-jnp.inf)  # [G]
    gmin = jnp.min(jnp.where(member, col, jnp.inf), axis=0, initial=jnp.inf)
    # argmax of a boolean column returns its first True row (0 when there is none).
    chosen = jnp.argmax(member & (col == gmax[None, :]), axis=0).astype(jnp.int32)
    rejected = jnp.argmax(member & (col == gmin[None, :]), axis=0).astype(jnp.int32)
    valid = gmax > gmin
    return chosen, rejected, valid


def verified_pairs(
    model_scores: jax.Array,  # [N] reward-model scores
    correct: jax.Array,  # [N] bool: the rule verifier accepts the completion
    group_ids: jax.Array,  # [N]
    *,
    num_groups: int,
) -> tuple[jax.Array, jax.Array, jax.Array]:  # chosen_index [G], rejected_index [G], valid [G]
    """The reward-model training pair of each group whose completions the verifier splits (Cooper, Hong et al. 2025:
    positives are what the high-precision verifier accepts): chosen = the accepted completion the RM scores LOWEST,
    rejected = the rejected completion it scores HIGHEST — the pair the RM orders worst (the hardest-pair choice is
    ours: Cooper's negatives are rewritten positives from an assistant model). `valid_g`: the group holds both an
    accepted and a rejected completion. Ties: the first row (`pairs_from_groups`)."""
    accepted = jnp.asarray(correct, bool)
    # one key orders both: accepted rows above rejected ones, each side by the score reversed (in (2, 3] and [0, 1))
    key = 2.0 * accepted + jax.nn.sigmoid(-_float(model_scores))
    chosen, rejected, _ = pairs_from_groups(key, group_ids, num_groups=num_groups)
    _, _, split = pairs_from_groups(accepted.astype(jnp.float32), group_ids, num_groups=num_groups)
    return chosen, rejected, split


def cpl_loss(
    policy_chosen_logp: jax.Array,  # [P] segment log-probs (`discounted_sequence_logprobs`)
    policy_rejected_logp: jax.Array,  # [P]
    *,
    alpha: float = 0.1,
    conservative_bias: float = 0.5,
    valid: Optional[jax.Array] = None,  # [P] bool
) -> tuple[jax.Array, Metrics]:
    """Contrastive Preference Learning (Hejna et al. 2023, arXiv 2310.13639: the CPL loss and its conservative
    variant): with the segments' scores `S = α·Σ_k γ^k log π(a_k|s_k)` (the optimal advantage under the
    regret preference model, α the temperature),
    `L = −log [e^{S_c} / (e^{S_c} + e^{λ·S_r})] = softplus(λ·S_r − S_c)`, λ = `conservative_bias` ∈ (0, 1] on the
    rejected segment (1: the plain contrastive loss; λ < 1 asks S_c to beat a rejected score shrunk toward 0, i.e.
    raised since log-probs are ≤ 0). This is the official code's `biased_bce_with_logits` (`jhejna/cpl`,
    `logit12 = adv1 − bias·adv2`) with the label on the chosen side; defaults α = 0.1, λ = 0.5 as its
    `configs/*/cpl.yaml`. Reference-free: no π_ref (for one-step segments it is DPO with π_ref ≡ 1 and β = α).

    At S_c = S_r = 0 (or λ = 1 and S_c = S_r) the loss is log 2. Gradients: dL/dS_c = −σ(λS_r − S_c)·1 (< 0: raises
    the chosen log-probs), dL/dS_r = λ·σ(λS_r − S_c) (> 0: lowers the rejected ones), times α per log-prob.
    Metrics (means over valid pairs): `loss`, `accuracy` = mean[S_c > S_r] (unbiased comparison, as the official
    code's accuracy), `margin` = mean(S_c − S_r), `logps/chosen`, `logps/rejected` (the segment log-probs),
    `valid_frac`.
    """
    require("alpha", alpha, alpha > 0, "must be > 0")
    require("conservative_bias", conservative_bias, 0.0 < conservative_bias <= 1.0, "must be in (0, 1]")
    pc, pr = _float(policy_chosen_logp), _float(policy_rejected_logp)
    ok = _valid_mask(valid, pc.shape)
    pc, pr = jnp.where(ok, pc, 0.0), jnp.where(ok, pr, 0.0)
    sc, sr = alpha * pc, alpha * pr
    losses = jnp.where(ok, jax.nn.softplus(conservative_bias * sr - sc), 0.0)
    sg = jax.lax.stop_gradient
    metrics = {
        "loss": _pair_mean(losses, ok),
        "accuracy": _pair_mean((sg(sc) > sg(sr)).astype(losses.dtype), ok),
        "margin": _pair_mean(sg(sc - sr), ok),
        "logps/chosen": _pair_mean(sg(pc), ok),
        "logps/rejected": _pair_mean(sg(pr), ok),
        "valid_frac": _valid_frac(ok),
    }
    return losses, metrics


def _clipped_surrogate(ratio: jax.Array, advantage: jax.Array, clip_ratio: float) -> tuple[jax.Array, jax.Array]:
    """PPO's `min(ρ·A, clip(ρ, 1 − ε, 1 + ε)·A)` (torch clamp gradient at the bounds) and whether the clip binds."""
    clipped = clip_torch_grad(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
    binds = ((advantage > 0) & (ratio > 1.0 + clip_ratio)) | ((advantage < 0) & (ratio < 1.0 - clip_ratio))
    return jnp.minimum(ratio * advantage, clipped * advantage), binds


def p3o_loss(
    policy_chosen_logp: jax.Array,  # [P] sequence log-probs Σ_t log π(y_t) of the current policy
    policy_rejected_logp: jax.Array,  # [P]
    old_chosen_logp: jax.Array,  # [P] the same under the policy that sampled them (π_old)
    old_rejected_logp: jax.Array,  # [P]
    chosen_reward: jax.Array,  # [P] r(x, y_c)
    rejected_reward: jax.Array,  # [P] r(x, y_r)
    *,
    clip_ratio: float = 0.2,
    clip_mode: str = "joint",
    valid: Optional[jax.Array] = None,  # [P] bool
) -> tuple[jax.Array, Metrics]:
    """Pairwise Proximal Policy Optimization (Wu et al. 2023, arXiv 2310.00212, §4.2): a trajectory-wise policy
    gradient on the relative reward Δ = r(y_1) − r(y_2) of two responses to the same prompt (Theorem 1:
    ∇J = E[Δ·∇(log π(y_1) − log π(y_2))/2]), made proximal with sequence ratios ρ(y) = π(y)/π_old(y):

    - `"joint"` (P3O-V2, joint clipping): the pair ratio R = ρ(y_1)/ρ(y_2) clipped once,
      `L = −min(R·Δ, clip(R, 1 − ε, 1 + ε)·Δ)/2`;
    - `"separate"` (P3O-V1, separate clipping): each response clipped as in PPO with its own advantage ±Δ/2,
      `L = −[min(ρ_1·Δ, clip(ρ_1)·Δ) + min(ρ_2·(−Δ), clip(ρ_2)·(−Δ))]/2`.

    The factor 1/2 keeps both at Theorem 1's gradient on-policy (ρ = R = 1): dL/dlog π(y_1) = −Δ/2 = −dL/dlog π(y_2)
    (the clip variants as summaries of §4.2 give them; the paper's PDF was not read here, so the overall scale may
    differ from it by a constant).
    P3O is invariant to adding any prompt-dependent constant to the rewards (only Δ enters). ε = 0.2 (PPO's).
    Convention kept from verl: the log-ratios are clamped to ±`MAX_LOG_RATIO` before exp (a sequence ratio of a
    long completion overflows otherwise); the clip and the `min` follow torch at ties (`aggregation.clip_torch_grad`).
    The paper's KL penalty in the reward (r − β·KL) is left to the caller (`rl.kl_coef` adds a KL term to the loss).

    Metrics (means over valid pairs): `loss`, `clip_frac` (joint: the pair ratio's clip binds; separate: the share of
    the two responses whose clip binds), `ratio_mean` (R, or the mean of ρ_1 and ρ_2), `ratio_max` / `ratio_min`
    (over the valid pairs' ratios; 1 without one), `reward_margin` = mean Δ, `valid_frac`.
    """
    require("clip_ratio", clip_ratio, 0.0 < clip_ratio < 1.0, "must be in (0, 1)")
    require("clip_mode", clip_mode, clip_mode in P3O_CLIP_MODES, f"must be one of {P3O_CLIP_MODES}")
    pc, pr, oc, orj = (_float(x) for x in (policy_chosen_logp, policy_rejected_logp, old_chosen_logp,
                                           old_rejected_logp))
    ok = _valid_mask(valid, pc.shape)
    pc, pr, oc, orj, rc, rr = (jnp.where(ok, x, 0.0) for x in (pc, pr, oc, orj, _float(chosen_reward),
                                                                _float(rejected_reward)))
    delta = jax.lax.stop_gradient(rc - rr)

    def ratio_of(log_ratio):
        return jnp.exp(jnp.clip(log_ratio, -MAX_LOG_RATIO, MAX_LOG_RATIO))

    if clip_mode == "joint":
        ratio = ratio_of((pc - oc) - (pr - orj))
        surrogate, binds = _clipped_surrogate(ratio, delta, clip_ratio)
        losses, clip_frac, ratio_mean, ratios = -surrogate / 2.0, binds.astype(pc.dtype), ratio, (ratio,)
    else:
        ratio_c, ratio_r = ratio_of(pc - oc), ratio_of(pr - orj)
        surrogate_c, binds_c = _clipped_surrogate(ratio_c, delta, clip_ratio)
        surrogate_r, binds_r = _clipped_surrogate(ratio_r, -delta, clip_ratio)
        losses = -(surrogate_c + surrogate_r) / 2.0
        clip_frac = (binds_c.astype(pc.dtype) + binds_r.astype(pc.dtype)) / 2.0
        ratio_mean, ratios = (ratio_c + ratio_r) / 2.0, (ratio_c, ratio_r)
    losses = jnp.where(ok, losses, 0.0)
    sg = jax.lax.stop_gradient
    ratios = sg(jnp.stack(ratios))  # [1 or 2, P]
    any_valid = jnp.any(ok)
    metrics = {
        "loss": _pair_mean(losses, ok),
        "clip_frac": _pair_mean(clip_frac, ok),
        "ratio_mean": _pair_mean(sg(ratio_mean), ok),
        "ratio_max": jnp.where(any_valid, jnp.max(jnp.where(ok, ratios, -jnp.inf), initial=-jnp.inf), 1.0),
        "ratio_min": jnp.where(any_valid, jnp.min(jnp.where(ok, ratios, jnp.inf), initial=jnp.inf), 1.0),
        "reward_margin": _pair_mean(delta, ok),
        "valid_frac": _valid_frac(ok),
    }
    return losses, metrics


def win_rates(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N] ints in [0, num_groups)
    *,
    num_groups: int,
) -> jax.Array:  # [N]
    """Each completion's win rate against the other members of its group (SPO, Swamy et al. 2024, "A Minimaximalist
    Approach to Reinforcement Learning from Human Feedback", arXiv 2401.04056: the self-play reward
    `r(ξ_i) = 1/(n_g − 1)·Σ_{j∈g, j≠i} P(ξ_i ≻ ξ_j)`), with the verifier's scores as the preference:
    P(i ≻ j) = 1[s_i > s_j] + ½·1[s_i = s_j] (a tie is a coin flip). The group's win rates average exactly ½
    (each pair shares one win). A singleton group, a row whose id is outside [0, G), or a NaN score gets ½
    (no comparison; NaN compares as a tie). Dense [N, N] same-group comparisons (deterministic, shardable).
    """
    s = _float(scores)
    gid = jnp.asarray(group_ids)
    in_range = (gid >= 0) & (gid < num_groups)
    n = s.shape[0]
    others = (gid[:, None] == gid[None, :]) & in_range[:, None] & ~jnp.eye(n, dtype=bool)  # [N, N]
    ok = jnp.isfinite(s)
    others = others & ok[:, None] & ok[None, :]
    wins = jnp.where(s[:, None] > s[None, :], 1.0, jnp.where(s[:, None] == s[None, :], 0.5, 0.0))
    count = jnp.sum(others, axis=-1).astype(s.dtype)
    total = jnp.sum(jnp.where(others, wins, 0.0), axis=-1)
    return jnp.where(count > 0, total / jnp.maximum(count, 1.0), 0.5)


def spo_advantages(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    *,
    num_groups: int,
) -> jax.Array:  # [N]
    """SPO's advantage (Swamy et al. 2024, arXiv 2401.04056): the win-rate reward (`win_rates`) minus ½, the mean
    win rate of every group (so this is the group-mean baseline, exactly). Only the ordering of the scores within a
    group matters: any increasing transform of the rewards gives the same advantages. The paper feeds the win-rate
    reward to a standard RL optimiser (PPO / SAC); the baseline ½ changes no expected gradient.
    Range [−½, ½]: the best of n distinct scores gets ½, the worst −½; an all-equal group 0.
    """
    return win_rates(scores, group_ids, num_groups=num_groups) - 0.5


def dmpo_turn_weights(
    turn_id: jax.Array,  # [P, T] int: the turn (0-based) of each action token, −1 elsewhere
    *,
    gamma: float = 0.7,
) -> jax.Array:  # [P, T]
    """DMPO's per-token weight (Shi et al. 2024, "Direct Multi-Turn Preference Optimization for Language Agents",
    arXiv 2406.14868): a token of turn j of a trajectory with T turns gets
    `φ(j, T) = γ^j·(1 − γ^{T−j}) / (1 − γ^T)` (γ < 1), `(T − j)/T` (γ = 1): the discounted state-action occupancy
    of turn j, normalised by the trajectory's length, which makes the Bradley–Terry partition terms of trajectories
    of different lengths cancel. As the official code (`swt-user/DMPO`, `dmpo_trainer_efficient.py`
    `get_batch_loss_metrics`), T = the row's number of agent turns (here max turn_id + 1); 0 off action tokens.
    """
    require("gamma", gamma, 0.0 < gamma <= 1.0, "must be in (0, 1]")
    turn_id = jnp.asarray(turn_id)
    num_turns = (jnp.max(turn_id, axis=-1, keepdims=True, initial=-1) + 1).astype(jnp.float32)  # [P, 1]
    j = jnp.maximum(turn_id, 0).astype(jnp.float32)
    if gamma == 1.0:
        weights = (num_turns - j) / jnp.maximum(num_turns, 1.0)
    else:
        weights = gamma ** j * (1.0 - gamma ** (num_turns - j)) / (1.0 - gamma ** jnp.maximum(num_turns, 1.0))
    return jnp.where(turn_id >= 0, weights, 0.0)


def dmpo_loss(
    policy_chosen_logp: jax.Array,  # [P, T] per-token log-probs of the chosen trajectory
    policy_rejected_logp: jax.Array,  # [P, T'] of the rejected one
    ref_chosen_logp: jax.Array,  # [P, T]
    ref_rejected_logp: jax.Array,  # [P, T']
    chosen_turn_id: jax.Array,  # [P, T] int: turn of each action token, −1 elsewhere (observations, padding)
    rejected_turn_id: jax.Array,  # [P, T']
    *,
    beta: float = 0.1,
    gamma: float = 0.7,
    valid: Optional[jax.Array] = None,  # [P] bool
) -> tuple[jax.Array, Metrics]:
    """DMPO (Shi et al. 2024, arXiv 2406.14868): DPO over multi-turn trajectories with each action token's
    log-ratio weighted by its turn's `dmpo_turn_weights`,
    `L = −log σ(β·[Σ_t φ_c,t·(log π − log π_ref)(y_c,t) − Σ_t φ_r,t·(log π − log π_ref)(y_r,t)])`:
    `dpo_loss` (kind "sigmoid") on the φ-weighted sums (`sequence_logprobs` of φ·log π); observation tokens and
    padding (turn_id −1) weigh 0. Defaults β = 0.1, γ = 0.7 (the official trainer's). Single-turn trajectories
    (φ = 1) give DPO. Returns `dpo_loss`'s (losses[P], metrics).
    """
    def weighted(logp, turn_id):
        w = dmpo_turn_weights(turn_id, gamma=gamma)
        return sequence_logprobs(_float(logp) * w, (w > 0).astype(jnp.float32))

    return dpo_loss(weighted(policy_chosen_logp, chosen_turn_id), weighted(policy_rejected_logp, rejected_turn_id),
                    weighted(ref_chosen_logp, chosen_turn_id), weighted(ref_rejected_logp, rejected_turn_id),
                    beta=beta, kind="sigmoid", valid=valid)


def first_divergent_turn(
    chosen_tokens: jax.Array,  # [P, T] the chosen episode's tokens (one record layout for both)
    rejected_tokens: jax.Array,  # [P, T]
    chosen_turn_id: jax.Array,  # [P, T] int: turn of each action token, −1 elsewhere
    rejected_turn_id: jax.Array,  # [P, T]
) -> jax.Array:  # [P] int32
    """The first turn e where two episodes of one task part (SDPO's "first erroneous turn", found here without a
    judge): with p the first position where their tokens differ, e = the lowest turn id of an action token at a
    position ≥ p in either episode. Both share their context before p, so a divergence inside turn j's action
    gives j, one in an observation (a stochastic env) the next action's turn. Identical episodes, or a divergence
    after both episodes' last action, give `jnp.iinfo(int32).max` (no turn: `sdpo_segments` gives no segment)."""
    differ = jnp.asarray(chosen_tokens) != jnp.asarray(rejected_tokens)
    width = differ.shape[-1]
    first = jnp.where(jnp.any(differ, axis=-1), jnp.argmax(differ, axis=-1), width)  # [P]
    after = jnp.arange(width)[None, :] >= first[:, None]
    none = jnp.iinfo(jnp.int32).max

    def first_turn_after(turn_id):
        turn_id = jnp.asarray(turn_id)
        return jnp.min(jnp.where(after & (turn_id >= 0), turn_id, none), axis=-1, initial=none)

    return jnp.minimum(first_turn_after(chosen_turn_id), first_turn_after(rejected_turn_id)).astype(jnp.int32)


def sdpo_segments(
    chosen_turn_id: jax.Array,  # [P, T] int: turn of each action token, −1 elsewhere
    rejected_turn_id: jax.Array,  # [P, T']
    first_turn: jax.Array,  # [P] int: e, the segment's first turn
    *,
    segment_turns: int,
) -> tuple[jax.Array, jax.Array, jax.Array]:  # chosen mask [P, T], rejected mask [P, T'] float32, turns k' [P]
    """SDPO's equal-length segments (Kong et al. 2025, "SDPO: Segment-Level Direct Preference Optimization for
    Social Agents", arXiv 2501.01821): the action tokens of turns [e, e + k') of each episode, with
    k' = min(k, T_c − e, T_r − e) clipped at 0 (T = the episode's turns, max turn id + 1): k = `segment_turns`
    truncated to the turns both episodes have, so both segments hold the same number of turns (the paper's
    condition for the partition function to cancel). k' = 0: empty segments (no preference to learn)."""
    require("segment_turns", segment_turns, segment_turns >= 1, "must be >= 1")
    chosen_turn_id, rejected_turn_id = jnp.asarray(chosen_turn_id), jnp.asarray(rejected_turn_id)
    e = jnp.asarray(first_turn).astype(jnp.int32)

    def turns(turn_id):
        return jnp.max(turn_id, axis=-1, initial=-1) + 1

    k = jnp.clip(jnp.minimum(jnp.minimum(turns(chosen_turn_id), turns(rejected_turn_id)) - e, segment_turns), 0)

    def mask(turn_id):
        return ((turn_id >= e[:, None]) & (turn_id < (e + k)[:, None])).astype(jnp.float32)

    return mask(chosen_turn_id), mask(rejected_turn_id), k


def sdpo_loss(
    policy_chosen_logp: jax.Array,  # [P, T] per-token log-probs of the chosen episode
    policy_rejected_logp: jax.Array,  # [P, T'] of the rejected one
    ref_chosen_logp: jax.Array,  # [P, T]
    ref_rejected_logp: jax.Array,  # [P, T']
    chosen_segment: jax.Array,  # [P, T] 1 on the tokens of the chosen segment (`sdpo_segments`)
    rejected_segment: jax.Array,  # [P, T']
    *,
    beta: float = 0.1,
    valid: Optional[jax.Array] = None,  # [P] bool
) -> tuple[jax.Array, Metrics]:
    """SDPO (Kong et al. 2025, arXiv 2501.01821, segment-level DPO): DPO on the log-ratios summed over an
    equal-length segment of turns of each episode of a pair that shares its history before the segment,
    `L = −log σ(β·Σ_{t∈seg_c} log(π/π_ref)(y_c,t) − β·Σ_{t∈seg_r} log(π/π_ref)(y_r,t))`: `dpo_loss` (kind "sigmoid")
    on `sequence_logprobs` over the segment masks. Tokens outside the segments get zero gradient; segments with
    equal summed log-ratios give log 2. Returns `dpo_loss`'s (losses[P], metrics).

    The paper locates the segment's first turn e with a GPT-4o judge (the first erroneous turn of a negative
    session), re-samples positive continuations from the shared history and picks the key segment's length k with
    the judge; its segments come from those re-sampled sessions. The learner (`train.preference_step`) uses what
    the sampler already produces instead: each group's best-vs-worst episodes by return, e = their first
    divergent turn (`first_divergent_turn`), k a config field truncated to the turns both have (`sdpo_segments`).
    """
    return dpo_loss(sequence_logprobs(policy_chosen_logp, chosen_segment),
                    sequence_logprobs(policy_rejected_logp, rejected_segment),
                    sequence_logprobs(ref_chosen_logp, chosen_segment),
                    sequence_logprobs(ref_rejected_logp, rejected_segment), beta=beta, kind="sigmoid", valid=valid)
