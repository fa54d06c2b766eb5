"""Preference objectives: the Bradley–Terry reward-model loss, DPO / cDPO / robust DPO / IPO, sequence
log-probs, and best-vs-worst pairs from a GRPO group. Kernels only (not in the registry): the outcome reward model
trains with `bradley_terry_loss`, and online DPO (`config.preference.loss`, `rl4llm.train.preference_step`) runs
`dpo_loss` on `pairs_from_groups`' pairs.

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

from rl4llm.rl.aggregation import masked_sum, require

Metrics = dict

DPO_KINDS = ("sigmoid", "cdpo", "robust", "ipo")


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
