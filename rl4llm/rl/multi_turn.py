"""Multi-turn agent kernels: turn-level credit assignment, over-turn masking, entropy control, branching.

Pure functions, arrays in / arrays out, jittable with static shapes. Batch layout (shared digest
`papers/multi_turn_agents.md` §2.2): B trajectories of T tokens (prompt, actions and observations
interleaved) with at most K turns.

- `mask[B, T]`        loss mask: 1 only on tokens the policy generated (observation/prompt/padding: 0).
- `turn_id[B, T]`     k on the action tokens of turn k, −1 elsewhere (explicit ids, never inferred from
                      mask transitions or non-zero rewards: both break on adjacent turns or zero rewards).
- `turn_end[B, K]`    position of the last action token of turn k (any value for turn slots that do not exist).
- `turn_valid[B, K]`  turn k exists; a prefix: turns 0 … K_i − 1 of trajectory i.
- `turn_rewards[B, K]` per-turn reward (its components already combined; the outcome NOT included).
- `scores[B]`         outcome reward of the trajectory; `group_ids[B]` ints in [0, num_groups).
- `gt_logprobs[B, K+1]` IGPO: mean log-prob of the ground-truth answer given the context before turn 0
                      (index 0) and after each turn k (index k + 1).

Estimators return token advantages `[B, T]` that are exactly 0 where `mask` is 0 (observation tokens get
no advantage). The trajectory-level baseline is the registry's plain `grpo` (outcome z-scored in the group,
broadcast over `mask`), i.e. `trajectory_grpo` here.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from rl4llm.rl.advantages import gae_scan, group_count, group_mean, group_std, grpo, to_members
from rl4llm.rl.aggregation import aggregate, masked_whiten, require, weighted_sum

Metrics = dict[str, jax.Array]


# ----------------------------------------------------------------------------------------------- layout


def _check_layout(mask: jax.Array, turn_id: jax.Array, turn_valid: jax.Array, **per_turn: Optional[jax.Array]) -> None:
    """Static shape checks; a mismatch raises ValueError naming the field."""
    if mask.ndim != 2:
        raise ValueError(f"mask must be [B, T], got shape {mask.shape}")
    if turn_id.shape != mask.shape:
        raise ValueError(f"turn_id must have the shape of mask {mask.shape}, got {turn_id.shape}")
    if turn_valid.ndim != 2 or turn_valid.shape[0] != mask.shape[0]:
        raise ValueError(f"turn_valid must be [B, K] with B = {mask.shape[0]}, got {turn_valid.shape}")
    for name, x in per_turn.items():
        if x is not None and x.shape != turn_valid.shape:
            raise ValueError(f"{name} must be [B, K] = {turn_valid.shape} like turn_valid, got {x.shape}")


def per_turn_sum(
    values: jax.Array,  # [B, T]
    turn_id: jax.Array,  # [B, T]
    mask: jax.Array,  # [B, T]
    *,
    num_turns: int,
) -> jax.Array:  # [B, K]
    """`S_{i,k} = Σ_t values_{i,t}·m_{i,t}·1[turn_id_{i,t} = k]` (one-hot contraction, no scatter)."""
    one_hot = (turn_id[..., None] == jnp.arange(num_turns)) & (mask[..., None] != 0)  # [B, T, K]
    values = jnp.where(mask != 0, values, 0.0)  # NaN outside the mask never reaches the sum
    return jnp.einsum("btk,bt->bk", one_hot.astype(values.dtype), values)


def turns_to_tokens(
    turn_values: jax.Array,  # [B, K]
    turn_id: jax.Array,  # [B, T]
    mask: jax.Array,  # [B, T]
) -> jax.Array:  # [B, T]
    """Broadcast a per-turn value to the tokens of its turn: `take_along_axis(v, clip(turn_id, 0)) · m`,
    also 0 where turn_id < 0 (so a token outside every turn never picks up turn 0's value)."""
    k = turn_values.shape[1]
    picked = jnp.take_along_axis(turn_values, jnp.clip(turn_id, 0, k - 1), axis=1)  # [B, T]
    keep = (mask != 0) & (turn_id >= 0)
    return jnp.where(keep, picked, 0.0) * mask.astype(picked.dtype)


def last_turn(turn_valid: jax.Array) -> jax.Array:  # [B, K] bool
    """One-hot of each trajectory's final turn K_i − 1 (all False for a trajectory with no turn)."""
    valid = turn_valid.astype(bool)
    next_valid = jnp.concatenate([valid[:, 1:], jnp.zeros_like(valid[:, :1])], axis=1)
    return valid & ~next_valid


def discounted_turn_returns(
    turn_rewards: jax.Array,  # [B, K]
    turn_valid: jax.Array,  # [B, K]
    *,
    gamma: float = 1.0,
) -> jax.Array:  # [B, K]
    """Turn reward-to-go `G_{i,k} = Σ_{k' ≥ k, valid} γ^{k'−k}·r_{i,k'}` (0 on turn slots that do not exist)."""
    valid = turn_valid.astype(jnp.float32)
    rewards = jnp.where(turn_valid, turn_rewards, 0.0).astype(jnp.float32)

    def step(running, xs):
        r_k, v_k = xs
        running = (r_k + gamma * running) * v_k
        return running, running

    _, returns = jax.lax.scan(step, jnp.zeros(rewards.shape[:1]), (rewards.T, valid.T), reverse=True)
    return returns.T


def _pair_group_ids(group_ids: jax.Array, turn_valid: jax.Array, *, per_turn_index: bool, num_groups: int) -> jax.Array:
    """Group ids of the (trajectory, turn) pairs, flattened to [B·K]; −1 (dropped from every statistic)
    for turn slots that do not exist. With `per_turn_index`, pairs are grouped by (group, turn index k)."""
    b, k = turn_valid.shape
    ids = jnp.broadcast_to(group_ids[:, None], (b, k))
    if per_turn_index:
        ids = ids * k + jnp.arange(k)[None, :]
    ids = jnp.where(turn_valid & (group_ids[:, None] >= 0) & (group_ids[:, None] < num_groups), ids, -1)
    return ids.reshape(-1)


def _turn_grpo(
    values: jax.Array,  # [B, K]
    group_ids: jax.Array,  # [B]
    turn_valid: jax.Array,  # [B, K]
    *,
    num_groups: int,
    per_turn_index: bool,
    normalize_std: bool,
    eps: float,
) -> jax.Array:  # [B, K]
    """`grpo` over the existing (trajectory, turn) pairs: z-scored within a group (and turn index), 0 elsewhere."""
    b, k = turn_valid.shape
    ids = _pair_group_ids(group_ids, turn_valid, per_turn_index=per_turn_index, num_groups=num_groups)
    total = num_groups * k if per_turn_index else num_groups
    z = grpo(values.reshape(-1), ids, num_groups=total, normalize_std=normalize_std, eps=eps).reshape(b, k)
    return jnp.where(turn_valid, z, 0.0)


# ------------------------------------------------------------------------------------------ estimators


def trajectory_grpo(
    scores: jax.Array,  # [B]
    group_ids: jax.Array,  # [B]
    mask: jax.Array,  # [B, T]
    *,
    num_groups: int,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> jax.Array:  # [B, T]
    """Trajectory-level GRPO on a multi-turn batch (the baseline of MT-GRPO, IGPO, GTPO; StarPO, RAGEN):
    `A_{i,t} = z_g(R^O)_i · m_{i,t}` — `advantages.grpo` of the outcome, broadcast to the policy's tokens
    only (the registry's `grpo` gives the same through the trainer's broadcast)."""
    adv = grpo(scores, group_ids, num_groups=num_groups, normalize_std=normalize_std, eps=eps)
    return adv[:, None] * mask.astype(adv.dtype)


def mt_grpo(
    scores: jax.Array,  # [B] outcome reward R^O
    group_ids: jax.Array,  # [B]
    mask: jax.Array,  # [B, T]
    turn_rewards: jax.Array,  # [B, K] turn reward R^T_k (tool executed, answer in the result, ...)
    turn_id: jax.Array,  # [B, T]
    turn_valid: jax.Array,  # [B, K]
    *,
    num_groups: int,
    mode: str = "aae",
    turn_advantage_coef: float = 1.0,
    discount_factor: float = 1.0,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> jax.Array:  # [B, T]
    """MT-GRPO turn-level credit assignment (Zeng et al. 2025, "Reinforcing Multi-Turn Reasoning in LLM
    Agents via Turn-Level Credit Assignment"; SiliangZeng/Multi-Turn-RL-Agent `mt_grpo_env_trainer.py`).

    z(·) is `grpo` within the group. A turn k is *intermediate* when a tool result follows it, i.e. turn
    k + 1 exists; z_k(·) is z over the group's trajectories that reach turn k.
    ```
    AAE (default):  A_{i,t} = z(R^O)_i + λ·z_k(R^T_k)_i   on the tokens of an intermediate turn k = κ(t)
                    A_{i,t} = z(R^O)_i                     on the final turn's tokens
    CAE:            A_{i,t} = z_k(R^T_k + γ·R^O)_i          on an intermediate turn k,  z(R^O)_i on the final turn
    no tool result (a single turn):  A_{i,t} = z(R^T_0 + R^O)_i   (CAE: z(R^T_0 + γ·R^O)_i)
    ```
    λ = `turn_advantage_coef` = 1, γ = `discount_factor` = 1 (official defaults). With K ≤ 2 turns this is
    exactly the official estimator (turn 0 = the tokens before the first tool result, R^T = R^T_0); for more
    turns every intermediate turn gets its own per-turn-index normalised turn advantage (our extension; the
    paper's setting has one tool call). Differences: verl's z (unbiased std, eps 1e-6, singleton μ=0 σ=1)
    instead of TRL's eps 1e-4. With all turn rewards 0, AAE is `trajectory_grpo` exactly.
    """
    require("mode", mode, mode in ("aae", "cae"), "must be 'aae' or 'cae'")
    _check_layout(mask, turn_id, turn_valid, turn_rewards=turn_rewards)
    valid = turn_valid.astype(bool)
    scores = jnp.asarray(scores, jnp.float32)
    turn_rewards = jnp.where(valid, turn_rewards, 0.0).astype(jnp.float32)
    z = lambda x: grpo(x, group_ids, num_groups=num_groups, normalize_std=normalize_std, eps=eps)  # noqa: E731
    z_turn = lambda x: _turn_grpo(x, group_ids, valid, num_groups=num_groups, per_turn_index=True,  # noqa: E731
                                  normalize_std=normalize_std, eps=eps)
    intermediate = valid & ~last_turn(valid)  # [B, K]
    outcome = z(scores)  # [B]
    if mode == "aae":
        per_turn = outcome[:, None] + turn_advantage_coef * jnp.where(intermediate, z_turn(turn_rewards), 0.0)
        no_result = z(turn_rewards[:, 0] + scores)
    else:
        cumulative = z_turn(turn_rewards + discount_factor * scores[:, None])  # [B, K]
        per_turn = jnp.where(intermediate, cumulative, outcome[:, None])
        no_result = z(turn_rewards[:, 0] + discount_factor * scores)
    has_result = jnp.any(intermediate, axis=1)  # [B]
    per_turn = jnp.where(has_result[:, None], per_turn, no_result[:, None])  # [B, K]
    return turns_to_tokens(per_turn, turn_id, mask)


def igpo_turn_rewards(
    scores: jax.Array,  # [B] outcome (F1 / exact match)
    gt_logprobs: jax.Array,  # [B, K+1]
    turn_valid: jax.Array,  # [B, K]
    *,
    gain_type: str = "prob_diff",
    outcome_coef: float = 1.0,
) -> tuple[jax.Array, jax.Array]:  # ([B, K] rewards, [B, K] bool: the reward is an information gain)
    """IGPO turn rewards (Wang et al. 2025, "Information Gain-based Policy Optimization", ICLR 2026;
    GuoqingWang1/IGPO `vectorized_gt_logprob.py`, `info_gain.py`).

    With ℓ_{i,k} = `gt_logprobs[i, k]` the mean log-prob of the ground-truth answer a* after the first k turns
    (teacher-forced, no gradient; ℓ_{i,0} on the question alone) and f = exp ("prob_diff", default:
    p = exp(mean log π(a*|·))) or f = identity ("log_prob_diff"):
    ```
    r_{i,k} = f(ℓ_{i,k+1}) − f(ℓ_{i,k})        for every turn k < K_i − 1   (information gain)
    r_{i,K_i−1} = α·R^O_i                        on the final turn            (α = outcome_coef = 1)
    ```
    The gains telescope: Σ_{k < K_i−1} r_{i,k} = f(ℓ_{i,K_i−1}) − f(ℓ_{i,0}). ℓ after the final turn is unused.
    """
    require("gain_type", gain_type, gain_type in ("prob_diff", "log_prob_diff"), "must be 'prob_diff' or 'log_prob_diff'")
    b, k = turn_valid.shape
    if gt_logprobs.shape != (b, k + 1):
        raise ValueError(f"gt_logprobs must be [B, K+1] = {(b, k + 1)} (before turn 0, then after each turn), "
                         f"got {gt_logprobs.shape}")
    valid = turn_valid.astype(bool)
    level = gt_logprobs.astype(jnp.float32)
    level = jnp.exp(level) if gain_type == "prob_diff" else level
    gains = level[:, 1:] - level[:, :-1]  # [B, K]
    final = last_turn(valid)
    is_gain = valid & ~final
    rewards = jnp.where(is_gain, gains, jnp.where(final, outcome_coef * jnp.asarray(scores, jnp.float32)[:, None], 0.0))
    return rewards, is_gain


def _igpo_zscore(
    values: jax.Array,  # [B, K]
    group_ids: jax.Array,  # [B]
    selected: jax.Array,  # [B, K] bool
    *,
    num_groups: int,
    normalize_std: bool,
    eps: float,
) -> jax.Array:  # [B, K]
    """IGPO's group z-score of the selected pairs: `(x − μ)/(sqrt(σ² + 1e-8) + eps)`, population σ, σ = 1
    for a group of ≤ 1 pair (μ is still its own mean, so a lone reward normalises to 0); 0 elsewhere."""
    b, k = selected.shape
    ids = _pair_group_ids(group_ids, selected, per_turn_index=False, num_groups=num_groups)
    flat = values.reshape(-1)
    count = to_members(group_count(ids, num_groups), ids, num_groups)
    centred = flat - to_members(group_mean(flat, ids, num_groups), ids, num_groups)
    if normalize_std:
        std = jnp.sqrt(jnp.square(to_members(group_std(flat, ids, num_groups, ddof=0), ids, num_groups)) + 1e-8)
        centred = centred / (jnp.where(count <= 1, 1.0, std) + eps)
    return jnp.where(selected, centred.reshape(b, k), 0.0)


def igpo(
    scores: jax.Array,  # [B] outcome (F1 / exact match)
    group_ids: jax.Array,  # [B]
    mask: jax.Array,  # [B, T]
    gt_logprobs: jax.Array,  # [B, K+1]
    turn_id: jax.Array,  # [B, T]
    turn_valid: jax.Array,  # [B, K]
    *,
    num_groups: int,
    gamma: float = 1.0,
    gain_type: str = "prob_diff",
    norm_mode: str = "joint",
    outcome_coef: float = 1.0,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> jax.Array:  # [B, T]
    """IGPO advantages (Wang et al. 2025; debajoycs98/IGPO `core_algos.compute_grpo_outcome_advantage`).

    Turn rewards r from `igpo_turn_rewards`; then, over all existing (trajectory, turn) pairs of a group:
    ```
    "joint" (default):  r̃ = (r − μ_g)/(sqrt(σ_g² + 1e-8) + eps)   μ, σ over ALL the group's turn rewards
                        (information gains and final outcomes together; population σ; σ = 1 for ≤ 1 pair)
    "separate":         the same, gains and final outcomes each normalised among themselves
    A_{i,t} = Σ_{k' ≥ κ(t)} γ^{k'−κ(t)}·r̃_{i,k'}         (turn reward-to-go, broadcast to turn κ(t)'s tokens)
    ```
    γ = 1 (`algorithm.gamma`) as the paper. Difference from the code: for γ ≠ 1 it discounts per TOKEN
    (and resets the return at observation tokens); we discount per turn, as the paper's formula.
    """
    require("norm_mode", norm_mode, norm_mode in ("joint", "separate"), "must be 'joint' or 'separate'")
    require("gamma", gamma, 0 <= gamma <= 1, "must lie in [0, 1]")
    _check_layout(mask, turn_id, turn_valid)
    rewards, is_gain = igpo_turn_rewards(scores, gt_logprobs, turn_valid, gain_type=gain_type, outcome_coef=outcome_coef)
    valid = turn_valid.astype(bool)
    norm = lambda sel: _igpo_zscore(rewards, group_ids, sel, num_groups=num_groups,  # noqa: E731
                                    normalize_std=normalize_std, eps=eps)
    normalised = norm(valid) if norm_mode == "joint" else norm(is_gain) + norm(valid & ~is_gain)
    returns = discounted_turn_returns(normalised, valid, gamma=gamma)
    return turns_to_tokens(returns, turn_id, mask)


def gtpo(
    scores: jax.Array,  # [B] outcome reward
    group_ids: jax.Array,  # [B]
    mask: jax.Array,  # [B, T]
    turn_rewards: jax.Array,  # [B, K] intermediate turn rewards (zeros for outcome-only GTPO)
    turn_id: jax.Array,  # [B, T]
    turn_valid: jax.Array,  # [B, K]
    *,
    num_groups: int,
    gamma: float = 1.0,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> jax.Array:  # [B, T]
    """GTPO-style per-turn normalised returns (Ding et al. 2025, "Empowering Multi-Turn Tool-Integrated
    Reasoning with Group Turn Policy Optimization", arXiv 2511.14846; no public code — digest §4.3).
    ```
    r_{i,k} = R^T_{i,k} + R^O_i·1[k = K_i − 1];    G_{i,k} = Σ_{k' ≥ k} γ^{k'−k}·r_{i,k'}
    A_{i,t} = z_{g,k}(G_{·,k})_i,  k = κ(t)      (`grpo` among the group's trajectories that reach turn k)
    ```
    With γ = 1 and only an outcome reward, every turn index that the whole group reaches gets the GRPO
    advantage. The paper's similarity-based shaping of failed trajectories is a reward, not part of this.
    """
    require("gamma", gamma, 0 <= gamma <= 1, "must lie in [0, 1]")
    _check_layout(mask, turn_id, turn_valid, turn_rewards=turn_rewards)
    valid = turn_valid.astype(bool)
    rewards = turn_rewards + jnp.where(last_turn(valid), jnp.asarray(scores, jnp.float32)[:, None], 0.0)
    returns = discounted_turn_returns(rewards, valid, gamma=gamma)
    adv = _turn_grpo(returns, group_ids, valid, num_groups=num_groups, per_turn_index=True,
                     normalize_std=normalize_std, eps=eps)
    return turns_to_tokens(adv, turn_id, mask)


def bilevel_gae(
    scores: jax.Array,  # [B] outcome reward (added to the final turn's reward)
    mask: jax.Array,  # [B, T]
    values: jax.Array,  # [B, T] critic values per token
    turn_rewards: jax.Array,  # [B, K]
    turn_id: jax.Array,  # [B, T]
    turn_end: jax.Array,  # [B, K]
    turn_valid: jax.Array,  # [B, K]
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
    turn_gamma: float = 0.95,
) -> tuple[jax.Array, jax.Array]:  # ([B, T] advantages, [B, T] returns)
    """RAGEN bi-level GAE (Wang et al. 2025, "RAGEN: Understanding Self-Evolution in LLM Agents via
    Multi-Turn RL", StarPO-S; RAGEN-AI/RAGEN `core_algos.compute_bi_level_gae_advantage_return`).

    With r_k = R^T_k + R^O·1[k = K_i − 1] and V_k = V(turn_end_k), the value at the turn's last action token:
    ```
    turn level:   δ_k = r_k + γ_hi·V_{k+1} − V_k  (V_{K_i} = 0);   Â_k = δ_k + γ_hi·λ·Â_{k+1};   R_k = Â_k + V_k
    token level:  inside each turn, GAE(γ, λ) over its action tokens with reward R_k on the last one and
                  bootstrap 0 after it (observation tokens are skipped; nothing crosses a turn boundary)
    advantages = masked_whiten(A, m)·m  (global, like `gae`, then zeroed off the mask);   returns = A + V
    ```
    Defaults γ = λ = 1, γ_hi = `turn_gamma` = 0.95 (RAGEN `base.yaml`). The turn-level scan reuses
    `advantages.gae_scan` over turns, the token level over each turn's tokens. Difference from the code:
    turn ends come from `turn_end`, not from non-zero reward positions (a turn with reward exactly 0
    disappears there). With one turn this is `advantages.gae` with the reward on the last token.
    """
    for name, x in (("gamma", gamma), ("lam", lam), ("turn_gamma", turn_gamma)):
        require(name, x, 0 <= x <= 1, "must lie in [0, 1]")
    _check_layout(mask, turn_id, turn_valid, turn_rewards=turn_rewards, turn_end=turn_end)
    if values.shape != mask.shape:
        raise ValueError(f"values must have the shape of mask {mask.shape}, got {values.shape}")
    b, t = mask.shape
    k = turn_valid.shape[1]
    valid = turn_valid.astype(bool)
    values = values.astype(jnp.float32)
    end = jnp.clip(turn_end, 0, t - 1)  # [B, K]
    turn_values = jnp.where(valid, jnp.take_along_axis(values, end, axis=1), 0.0)  # [B, K]
    rewards = jnp.where(valid, turn_rewards, 0.0) + jnp.where(last_turn(valid), jnp.asarray(scores, jnp.float32)[:, None], 0.0)
    turn_adv = gae_scan(rewards, turn_values, valid, gamma=turn_gamma, lam=lam)  # [B, K]
    turn_returns = jnp.where(valid, turn_adv + turn_values, 0.0)  # [B, K]

    positions = jnp.arange(t)

    def one_turn(kk):  # token-level GAE restricted to the tokens of turn kk, R_kk at its end
        in_turn = (mask != 0) & (turn_id == kk)  # [B, T]
        at_end = (positions[None, :] == end[:, kk][:, None]) & in_turn
        token_rewards = jnp.where(at_end, turn_returns[:, kk][:, None], 0.0)
        return jnp.where(in_turn, gae_scan(token_rewards, values, in_turn, gamma=gamma, lam=lam), 0.0)

    adv = jnp.sum(jax.vmap(one_turn)(jnp.arange(k)), axis=0)  # [B, T]
    return masked_whiten(adv, mask) * mask.astype(adv.dtype), adv + values


# ------------------------------------------------------------------------------- rewards and masking


def gated_reward_accumulation(
    scores: jax.Array,  # [B] high-priority (outcome) reward r^high
    turn_rewards: jax.Array,  # [B, K] dense low-priority step rewards r^low
    turn_valid: jax.Array,  # [B, K]
    *,
    threshold: float,
) -> tuple[jax.Array, jax.Array]:  # ([B, K] gated turn rewards, [B] gated return)
    """G-RA gated reward accumulation (Sun et al. 2025, "Stabilizing Long-term Multi-turn RL with Gated Rewards").
    ```
    r̃_{i,k} = r^low_{i,k}·1[r^high_i ≥ δ];      R_i = r^high_i + Σ_k r̃_{i,k}
    ```
    δ = `threshold`. Step rewards only count once the outcome clears the gate (direct accumulation, D-RA,
    lets the policy farm step rewards; the paper reports it collapsing). Feed r̃ to a turn-level estimator
    as `turn_rewards`, or R as the trajectory score.
    """
    if turn_rewards.shape != turn_valid.shape:
        raise ValueError(f"turn_rewards must be [B, K] = {turn_valid.shape} like turn_valid, got {turn_rewards.shape}")
    scores = jnp.asarray(scores, jnp.float32)
    gate = scores >= threshold  # [B]
    gated = jnp.where(gate[:, None] & turn_valid.astype(bool), turn_rewards, 0.0)
    return gated, scores + jnp.sum(gated, axis=1)


def over_turn_mask(
    mask: jax.Array,  # [B, T]
    truncated: jax.Array,  # [B] bool: hit the turn cap or the context limit
) -> jax.Array:  # [B, T]
    """Mini-o3 over-turn masking (Lai et al. 2025, "Mini-o3: Scaling Up Reasoning Patterns and Interaction
    Turns for Visual Search"): `M_{i,t} = m_{i,t}·(1 − truncated_i)`.

    Use the result as the loss mask (policy loss, KL, entropy): a truncated trajectory then contributes
    nothing and is not penalised as a failure, and the token-mean normalises over the remaining tokens. Group
    advantages are computed as usual, with the truncated trajectories still in their groups.
    """
    if truncated.shape != mask.shape[:1]:
        raise ValueError(f"truncated must be [B] = {mask.shape[:1]}, got {truncated.shape}")
    return jnp.where(truncated.astype(bool)[:, None], jnp.zeros_like(mask), mask)


# ------------------------------------------------------------------------------------------------ EPO


def turn_entropy_stats(
    entropy: jax.Array,  # [B, T] token entropy
    turn_id: jax.Array,  # [B, T]
    mask: jax.Array,  # [B, T]
    *,
    num_turns: int,
) -> tuple[jax.Array, jax.Array]:  # ([K] entropy sums, [K] token counts)
    """Per-turn-index entropy totals of a batch, `(Σ H, Σ 1)` over the action tokens of turn k. Accumulate
    them over training steps for EPO's historical per-turn mean `H̄_k = Σ sums / Σ counts`. No gradient."""
    entropy = jax.lax.stop_gradient(entropy)
    sums = jnp.sum(per_turn_sum(entropy, turn_id, mask, num_turns=num_turns), axis=0)
    counts = jnp.sum(per_turn_sum(jnp.ones_like(entropy), turn_id, mask, num_turns=num_turns), axis=0)
    return sums, counts


def epo_phase_weight(epoch, *, total_epochs: int = 150):
    """EPO phase weight of the corridor penalty (Xu et al. 2025, `_calculate_epoch_based_entropy_weight`):
    ```
    w(e) = 1 − 0.2·(1 − exp(−2e/(E/2)))         e ≤ E/2   (1 → 0.827)
    w(e) = 0.8·exp(−3·(e − E/2)/(E/2))           e > E/2   (0.8 → 0.8·e^−3)
    ```
    E = `total_epochs` (hard-coded 150 in the official code). Works on Python numbers and arrays.
    """
    half = total_epochs / 2.0
    early = 1.0 - 0.2 * (1.0 - jnp.exp(-2.0 * epoch / half))
    late = 0.8 * jnp.exp(-3.0 * (epoch - half) / half)
    return jnp.where(epoch <= half, early, late)


def epo_entropy_loss(
    entropy: jax.Array,  # [B, T] token entropy of the current policy (differentiable)
    turn_id: jax.Array,  # [B, T]
    mask: jax.Array,  # [B, T]
    history_sums: jax.Array,  # [K] accumulated `turn_entropy_stats` sums
    history_counts: jax.Array,  # [K] accumulated `turn_entropy_stats` counts
    *,
    coef: float = 0.001,
    smooth_coef: float = 1.0,
    phase_weight=1.0,
    kappa_low: float = 0.0,
    kappa_high: float = 2.0,
    alpha: float = 0.05,
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """EPO entropy term (Xu et al. 2025, "EPO: Entropy-regularized Policy Optimization for LLM Agents RL"),
    a loss to ADD to the policy loss:
    ```
    H̄_k = history_sums_k / history_counts_k           historical mean entropy of turn index k (constant)
    P_{i,t} = α·[relu(κ_l·H̄_k − H_{i,t}) + relu(H_{i,t} − κ_r·H̄_k)],   k = κ(t)    (hinge corridor)
    L = −λ·(agg(H) − c_s·w·agg(P))
    ```
    λ = `coef` = 0.001, c_s = `smooth_coef` = 1, w = `phase_weight` (`epo_phase_weight`), κ_l = 0, κ_r = 2,
    α = 0.05 (ScienceWorld; 0.1 ALFWorld); agg is the policy loss's aggregation (`agg_weights`: micro-batch
    path). Tokens of a turn index with no history yet get no penalty. The official code's penalty is
    `α·1[H ∉ (κ_l·H̄, κ_r·H̄)]` (a `torch.where` of constants): piecewise constant in H, it has NO gradient
    and changes nothing but the logged loss. The hinge above has the same zero set and pushes the entropy
    back into the corridor; the indicator version is reported as the metric `epo/indicator_penalty`.
    At a corridor edge (H = κ·H̄ exactly, e.g. H = 0 with κ_l = 0) the hinge has gradient 0 (relu'(0) = 0 in
    JAX and torch), while the indicator already counts the token as outside (closed complement, as official).
    """
    require("kappa_high", kappa_high, kappa_high > kappa_low, f"must be > kappa_low={kappa_low}")
    require("alpha", alpha, alpha >= 0, "must be >= 0")
    if entropy.shape != mask.shape or turn_id.shape != mask.shape:
        raise ValueError(f"entropy and turn_id must have the shape of mask {mask.shape}, got {entropy.shape}, {turn_id.shape}")
    if history_sums.shape != history_counts.shape or history_sums.ndim != 1:
        raise ValueError(f"history_sums and history_counts must both be [K], got {history_sums.shape}, {history_counts.shape}")
    known = history_counts > 0
    reference = jax.lax.stop_gradient(jnp.where(known, history_sums / jnp.where(known, history_counts, 1.0), 0.0))
    per_row = lambda x: jnp.broadcast_to(x[None, :], (mask.shape[0], x.shape[0]))  # noqa: E731  [K] -> [B, K]
    token_ref = turns_to_tokens(per_row(reference), turn_id, jnp.ones_like(mask))  # [B, T]
    token_known = turns_to_tokens(per_row(known.astype(jnp.float32)), turn_id, mask)  # [B, T]: turn has a history
    low, high = kappa_low * token_ref, kappa_high * token_ref
    hinge = alpha * (jax.nn.relu(low - entropy) + jax.nn.relu(entropy - high)) * token_known
    outside = alpha * ((entropy <= low) | (entropy >= high)).astype(jnp.float32) * token_known
    reduce = (lambda x: weighted_sum(x, agg_weights)) if agg_weights is not None else (lambda x: aggregate(x, mask, agg_mode))
    mean_entropy, penalty = reduce(entropy), reduce(hinge)
    loss = -coef * (mean_entropy - smooth_coef * phase_weight * penalty)
    metrics = {"epo/entropy": mean_entropy, "epo/hinge_penalty": penalty,
               "epo/indicator_penalty": jax.lax.stop_gradient(reduce(outside))}
    return loss, metrics


# ----------------------------------------------------------------------------------------------- ARPO


def arpo_step_entropy(
    top_logprobs: jax.Array,  # [B, L, k] top-k log-probs of the first L tokens generated after a tool call
    valid: jax.Array,  # [B, L]
    *,
    vocab_size: int,
) -> jax.Array:  # [B]
    """ARPO step entropy (Dong et al. 2025, "Agentic Reinforced Policy Optimization"; dongguanting/ARPO
    `vllm_rollout_with_tools.py`, `_calc_entropy`): `H = Σ_{t<L} Σ_{top-k} (−p·log p) / log|V|` over the first
    L = 20 tokens of a step, top-k = 10 log-probs each (the sampler's top-k, not renormalised).

    The official code SUMS over the L tokens (it pools the L·k log-probs into one list before `−Σ p·log p`); the
    paper text and this repo's digest read it as a per-token mean. The code is followed: H scales with the step's
    length up to L, and only ΔH = H_now − H_init enters the branching probability."""
    p_logp = jnp.exp(top_logprobs) * top_logprobs
    per_token = -jnp.sum(p_logp, axis=-1)  # [B, L]
    total = jnp.sum(per_token * valid.astype(per_token.dtype), axis=-1)  # [B]
    return total / jnp.log(float(vocab_size))


def arpo_branch_probability(
    entropy_now: jax.Array,  # [B] step entropy after the tool call
    entropy_init: jax.Array,  # [B] the rollout's first-step entropy
    *,
    entropy_weight: float = 0.2,
    branch_probability: float = 0.5,
) -> jax.Array:  # [B]
    """ARPO branching probability `P = clip(β + α·ΔH, 0, 1)`, ΔH = H_now − H_init, α = `entropy_weight` = 0.2,
    β = `branch_probability` = 0.5 (`scripts/ARPO_7B_Reasoning_1node.sh`)."""
    return jnp.clip(branch_probability + entropy_weight * (entropy_now - entropy_init), 0.0, 1.0)


def arpo_branch_counts(
    key: jax.Array,
    entropy_now: jax.Array,  # [B]
    entropy_init: jax.Array,  # [B]
    active: jax.Array,  # [B] bool: the rollout just got a tool result and is still running
    group_ids: jax.Array,  # [B]
    remaining: jax.Array,  # [num_groups] rollout slots left for each prompt (N − rollouts so far)
    *,
    entropy_weight: float = 0.2,
    branch_probability: float = 0.5,
    beam_size: int = 2,
) -> jax.Array:  # [B] int32 number of copies (env.clone() + context copy) to spawn from each rollout
    """ARPO entropy-based adaptive branching after a tool call (Dong et al. 2025; `vllm_rollout_with_tools.py`).

    Each active rollout makes `beam_size − 1` draws u ~ U(0, 1); a draw branches iff
    `clip(u − α·ΔH, 0, 1) ≤ β` (the official test), i.e. with probability `arpo_branch_probability`. Successes
    are granted in rollout order until the prompt's `remaining` slots are used up, so a prompt never exceeds
    its N rollouts. With `beam_size` = 2 (default: one branch per source and step) this is the official
    order exactly; for larger beams the official loop stops drawing for a source whose draws could overflow
    the budget, here the first successes in order fill it.
    """
    require("beam_size", beam_size, isinstance(beam_size, int) and beam_size >= 2, "must be an int >= 2")
    require("branch_probability", branch_probability, 0 <= branch_probability <= 1, "must lie in [0, 1]")
    b = entropy_now.shape[0]
    if remaining.ndim != 1:
        raise ValueError(f"remaining must be [num_groups], got {remaining.shape}")
    draws = jax.random.uniform(key, (b, beam_size - 1))
    shifted = jnp.clip(draws - entropy_weight * (entropy_now - entropy_init)[:, None], 0.0, 1.0)
    success = (shifted <= branch_probability) & active.astype(bool)[:, None]  # [B, beam−1]
    flat = success.reshape(-1).astype(jnp.int32)  # rollout-major order
    one_hot = (jnp.repeat(group_ids, beam_size - 1)[:, None] == jnp.arange(remaining.shape[0])).astype(jnp.int32)
    in_group = one_hot * flat[:, None]  # [B·(beam−1), G]
    before = jnp.sum((jnp.cumsum(in_group, axis=0) - in_group) * one_hot, axis=1)  # earlier successes, same group
    budget = jnp.sum(one_hot * remaining[None, :], axis=1)  # 0 for a group id outside [0, G)
    granted = (flat > 0) & (before < budget)
    return jnp.sum(granted.reshape(b, beam_size - 1), axis=1).astype(jnp.int32)
