"""Advantage estimators (pure functions; verl `core_algos` conventions unless a docstring says otherwise).

Shapes: N sequences, T tokens. `scores[N]` is the scalar outcome reward of each sequence,
`group_ids[N]` are ints in [0, num_groups) naming the prompt each sequence answers; groups need not be
contiguous or equal-sized (rows with an id outside that range are dropped from every group statistic).
`num_groups` must be static under jit. Outcome estimators return `[N]`; losses broadcast over tokens.
"""

from __future__ import annotations

import functools
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
from jax.scipy.special import betaln, xlogy

from rl4llm.rl.aggregation import masked_whiten, replicated, require


def _float(x: jax.Array) -> jax.Array:
    return jnp.asarray(x, jnp.result_type(x, jnp.float32))


def _one_hot(group_ids: jax.Array, num_groups: int) -> jax.Array:  # [N] -> [N, G]
    return (group_ids[:, None] == jnp.arange(num_groups)[None, :]).astype(jnp.float32)


def group_sum(values: jax.Array, group_ids: jax.Array, num_groups: int) -> jax.Array:  # [N] -> [G]
    """Sum of `values[N]` within each group.

    Computed as a dense one-hot contraction ([N, G] intermediate) rather than a scatter: deterministic
    on every backend, and shardable over N under both Auto and Explicit mesh axes.
    """
    return jnp.sum(_one_hot(group_ids, num_groups) * values[:, None], axis=0)


def to_members(stats: jax.Array, group_ids: jax.Array, num_groups: int) -> jax.Array:  # [G] -> [N]
    """`stats[group_ids]` (0 for ids outside [0, G)), as a one-hot contraction (see `group_sum`)."""
    return jnp.sum(_one_hot(group_ids, num_groups) * stats[None, :], axis=1)


def group_count(group_ids: jax.Array, num_groups: int) -> jax.Array:  # [G]
    """Number of members of each group."""
    return jnp.sum(_one_hot(group_ids, num_groups), axis=0)


def group_mean(values: jax.Array, group_ids: jax.Array, num_groups: int) -> jax.Array:  # [G]
    """Mean of `values[N]` within each group (0 for an empty group)."""
    return group_sum(values, group_ids, num_groups) / jnp.maximum(group_count(group_ids, num_groups), 1.0)


def group_rank(values: jax.Array, group_ids: jax.Array) -> jax.Array:  # [N] -> [N] ints
    """0-based position of each element in its group's stable ascending sort (ties by index); O(N²)."""
    values, group_ids = replicated(values), replicated(group_ids)
    idx = jnp.arange(values.shape[0])
    same = group_ids[:, None] == group_ids[None, :]  # [N, N]
    before = (values[None, :] < values[:, None]) | ((values[None, :] == values[:, None]) & (idx[None, :] < idx[:, None]))
    return jnp.sum(same & before, axis=1)


def group_median(values: jax.Array, group_ids: jax.Array, num_groups: int) -> jax.Array:  # [G]
    """Median of each group with linear interpolation (torch.quantile(·, 0.5)); 0 for an empty group."""
    rank = group_rank(values, group_ids).astype(jnp.float32)
    count = to_members(group_count(group_ids, num_groups), group_ids, num_groups)
    lo, hi = jnp.floor((count - 1) / 2), jnp.ceil((count - 1) / 2)
    lower = group_sum(jnp.where(rank == lo, values, 0.0), group_ids, num_groups)
    upper = group_sum(jnp.where(rank == hi, values, 0.0), group_ids, num_groups)
    return 0.5 * (lower + upper)


def group_std(values: jax.Array, group_ids: jax.Array, num_groups: int, ddof: int = 1) -> jax.Array:  # [G]
    """Std of `values[N]` within each group, two-pass, `sqrt(Σ(x − μ_g)² / (n_g − ddof))` (torch.std for ddof=1).

    Groups with n_g ≤ ddof get 0.
    """
    count = group_count(group_ids, num_groups)
    centered = values - to_members(group_mean(values, group_ids, num_groups), group_ids, num_groups)
    sq = group_sum(jnp.square(centered), group_ids, num_groups)
    return jnp.sqrt(jnp.where(count > ddof, sq / jnp.maximum(count - ddof, 1.0), 0.0))


def grpo(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    *,
    num_groups: int,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> jax.Array:  # [N]
    """GRPO group-relative advantage (Shao et al. 2024, DeepSeekMath; verl `compute_grpo_outcome_advantage`).

    `A_i = (s_i − μ_g)/(σ_g + eps)` with μ_g the group mean and σ_g the unbiased (n−1) group std;
    a singleton group has μ=0, σ=1 (so A = s/(1+eps)). `normalize_std=False` gives Dr.GRPO
    (Liu et al. 2025, "Understanding R1-Zero-Like Training"): `A_i = s_i − μ_g`. verl's loop semantics
    (eps added to σ, not inside a sqrt); TRL uses eps=1e-4.
    """
    scores = _float(scores)
    count = to_members(group_count(group_ids, num_groups), group_ids, num_groups)  # [N]
    singleton = count <= 1
    mean = jnp.where(singleton, 0.0, to_members(group_mean(scores, group_ids, num_groups), group_ids, num_groups))
    if not normalize_std:
        return scores - mean
    std = jnp.where(singleton, 1.0, to_members(group_std(scores, group_ids, num_groups), group_ids, num_groups))
    return (scores - mean) / (std + eps)


def rloo(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    *,
    num_groups: int,
) -> jax.Array:  # [N]
    """RLOO leave-one-out baseline (Ahmadian et al. 2024, "Back to Basics"; verl `rloo` loop version).

    For a group of size n > 1: `A_i = s_i·n/(n−1) − μ_g·n/(n−1) = s_i − mean_{j≠i} s_j`.
    A singleton keeps its raw score `A_i = s_i` (verl's loop; `rloo_vectorized` would give 0).
    """
    scores = _float(scores)
    count = to_members(group_count(group_ids, num_groups), group_ids, num_groups)  # [N]
    mean = to_members(group_mean(scores, group_ids, num_groups), group_ids, num_groups)
    scale = count / jnp.maximum(count - 1.0, 1.0)
    return jnp.where(count > 1, scores * scale - mean * scale, scores)


def _verl_group_mean(scores: jax.Array, group_ids: jax.Array, num_groups: int) -> jax.Array:  # [N]
    """Group mean broadcast to members, with verl's singleton convention (mean 0)."""
    count = to_members(group_count(group_ids, num_groups), group_ids, num_groups)
    mean = to_members(group_mean(scores, group_ids, num_groups), group_ids, num_groups)
    return jnp.where(count > 1, mean, 0.0)


def reinforce_plus_plus(
    rewards: jax.Array,  # [N, T] token-level rewards (outcome reward on the last valid token)
    mask: jax.Array,  # [N, T]
    *,
    gamma: float = 1.0,
) -> jax.Array:  # [N, T]
    """REINFORCE++ (Hu 2025, arXiv:2501.03262; verl `reinforce_plus_plus`): discounted return, batch-whitened.

    ```
    running = 0;  for t = T−1 … 0:  running = r_t + γ·running;  G_t = running;  running = running·m_t
    A = masked_whiten(G, m)·m          (global over the whole batch, unbiased variance)
    ```
    The return is reset after every masked token (so nothing propagates back across padding or
    observation tokens), exactly as verl.
    """
    rewards = _float(rewards)
    mask = mask.astype(rewards.dtype)

    def step(running, xs):
        r_t, m_t = xs
        running = r_t + gamma * running
        return running * m_t, running

    _, returns = jax.lax.scan(step, jnp.zeros(rewards.shape[:1], rewards.dtype), (rewards.T, mask.T), reverse=True)
    return masked_whiten(returns.T, mask) * mask


def prime(
    scores: jax.Array,  # [N] outcome rewards
    group_ids: jax.Array,  # [N]
    mask: jax.Array,  # [N, T]
    process_rewards: jax.Array,  # [N, T] implicit PRM rewards r_t = β·(log π_φ − log π_ref) (`rl.prime`)
    *,
    num_groups: int,
    process_coef: float = 5.0,
    outcome_coef: float = 5.0,
) -> jax.Array:  # [N, T]
    """PRIME advantages (Cui et al. 2025; verl recipe/prime `compute_rloo_advantage_return`): leave-one-out
    on each reward source, summed, then the γ = 1 return-to-go, whitened over the batch.

    With K_i the size of i's group and r̄_j = mean_t r_{j,t} (valid tokens):
    ```
    process:  r̃_{i,t} = r_{i,t}·K/(K−1) − Σ_{j∈g(i)} r̄_j/(K−1)
    outcome:  õ_i = R_i·K/(K−1) − Σ_{j∈g(i)} R_j/(K−1) = R_i − mean_{j≠i} R_j    (on the last valid token)
    G_t = Σ_{s≥t} m_s·(c_p·r̃_s + c_o·õ·[s = last]);   A = masked_whiten(G, m)·m
    ```
    Defaults c_p = c_o = 5 (the recipe's reward_dpo_coef / reward_gt_coef). Groups need K ≥ 2 (K−1 is taken
    as 1 for singletons, where leave-one-out is undefined).
    """
    rewards = _float(process_rewards)
    mask = mask.astype(rewards.dtype)
    scores = _float(scores)
    count = to_members(group_count(group_ids, num_groups), group_ids, num_groups)  # [N]
    denom = jnp.maximum(count - 1.0, 1.0)  # [N]
    member_sum = lambda x: to_members(group_sum(x, group_ids, num_groups), group_ids, num_groups)  # noqa: E731
    seq_mean = jnp.sum(rewards * mask, axis=-1) / jnp.maximum(jnp.sum(mask, axis=-1), 1.0)  # [N]
    process = (rewards * (count / denom)[:, None] - (member_sum(seq_mean) / denom)[:, None]) * mask  # [N, T]
    outcome = scores * count / denom - member_sum(scores) / denom  # [N]
    reverse_cumsum = lambda x: jnp.cumsum(x[:, ::-1], axis=-1)[:, ::-1]  # noqa: E731
    # Return-to-go of the outcome on the last valid token: õ at every position up to that token.
    up_to_last = (reverse_cumsum(mask) > 0).astype(rewards.dtype)  # [N, T]
    returns = process_coef * reverse_cumsum(process) + outcome_coef * outcome[:, None] * up_to_last
    return masked_whiten(returns, mask) * mask


def reinforce_plus_plus_baseline(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    mask: jax.Array,  # [N, T]
    *,
    num_groups: int,
) -> jax.Array:  # [N, T]
    """REINFORCE++-baseline (Hu 2025; verl `reinforce_plus_plus_baseline`).

    `Â_i = s_i − μ_g` (singleton μ = 0), broadcast over tokens, then `masked_whiten(Â·m, m)·m` over ALL
    valid tokens of the batch (longer sequences weigh more in the statistics).
    """
    scores = _float(scores)
    mask = mask.astype(scores.dtype)
    centred = (scores - _verl_group_mean(scores, group_ids, num_groups))[:, None] * mask
    return masked_whiten(centred, mask) * mask


def dler(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    mask: jax.Array,  # [N, T]
    *,
    num_groups: int,
    eps: float = 1e-6,
) -> jax.Array:  # [N]
    """DLER batch-wise reward normalisation (Liu et al. 2025, "DLER: Doing Length pEnalty Right", NVlabs).

    DLER replaces GRPO's per-group normalisation, whose std is unstable when a truncation penalty zeroes most
    rewards of a group, by a batch-wise one:
    ```
    Â_i = s_i − μ_g            (group mean; a singleton keeps μ = 0, verl's convention)
    A_i = (Â_i − mean_b Â) / (std_b Â + eps)   over the batch's trained sequences (rows with a valid token;
                                                unbiased std), 0 on the other rows
    ```
    Provenance: the paper's text ("swap out the group-wise normalization with batch-wise normalization"); the
    group-centred, batch-whitened form is Lite PPO's / REINFORCE++-baseline's at sequence level, which DLER builds
    on. Unlike `reinforce_plus_plus_baseline` the statistics weigh every sequence once, whatever its length.
    """
    scores = _float(scores)
    rows = (jnp.sum(mask, axis=-1) > 0).astype(scores.dtype)  # [N]
    centred = scores - _verl_group_mean(scores, group_ids, num_groups)
    n = jnp.maximum(jnp.sum(rows), 1.0)
    mean = jnp.sum(centred * rows) / n
    var = jnp.sum(jnp.square(centred - mean) * rows) / jnp.maximum(n - 1.0, 1.0)
    return (centred - mean) / (jnp.sqrt(var) + eps) * rows


def remax(
    rewards: jax.Array,  # [N, T]
    baseline_scores: jax.Array,  # [N] reward of the greedy response to the same prompt
    mask: jax.Array,  # [N, T]
) -> jax.Array:  # [N, T]
    """ReMax (Li et al. 2024; verl `remax`): `A_t = Σ_{t'≥t} r_{t'}·m_{t'} − b·m_t`, b = greedy-decoding reward."""
    rewards = _float(rewards)
    mask = mask.astype(rewards.dtype)
    returns = jnp.flip(jnp.cumsum(jnp.flip(rewards * mask, -1), axis=-1), -1)
    return returns - baseline_scores[:, None] * mask


def opo(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    lengths: jax.Array,  # [N] number of valid tokens
    *,
    num_groups: int,
) -> jax.Array:  # [N]
    """OPO optimal baseline (Hao et al. 2025, "On-Policy RL with Optimal Reward Baseline"; verl `opo`).

    `b_g = Σ_i |o_i|·s_i / Σ_i |o_i|` (length-weighted group mean), `A_i = s_i − b_g`; singleton b = 0.
    """
    scores = _float(scores)
    lengths = lengths.astype(scores.dtype)
    weighted = group_sum(lengths * scores, group_ids, num_groups)
    total = group_sum(lengths, group_ids, num_groups)
    baseline = to_members(weighted / jnp.where(total > 0, total, 1.0), group_ids, num_groups)
    count = to_members(group_count(group_ids, num_groups), group_ids, num_groups)
    return scores - jnp.where(count > 1, baseline, 0.0)


def gpg(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    *,
    num_groups: int,
    f_norm: float = 1.0,
) -> jax.Array:  # [N]
    """GPG advantage (Chu et al. 2025, "GPG: A Simple and Strong RL Baseline"; verl `gpg`).

    `α = N / max(#{i: s_i ≠ 0}, 1)` over the whole batch; `A_i = α·(s_i − μ_g)/f_norm` (singleton μ = 0).
    """
    scores = _float(scores)
    alpha = scores.shape[0] / jnp.maximum(jnp.sum(scores != 0), 1)
    return alpha * (scores - _verl_group_mean(scores, group_ids, num_groups)) / f_norm


def lite_ppo(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    *,
    num_groups: int,
    eps: float = 1e-6,
) -> jax.Array:  # [N]
    """Lite PPO: group-level mean, batch-level std (Liu et al. 2025, "Tricks or Traps? Part I").

    `A_i = (s_i − μ_g) / (σ_batch + eps)`, σ_batch = unbiased std of all N scores. Singleton μ = 0
    (verl's group convention); eps inside the denominator as in GRPO. Pair with token-mean aggregation.
    """
    scores = _float(scores)
    centred = scores - _verl_group_mean(scores, group_ids, num_groups)
    return centred / (jnp.std(scores, ddof=1) + eps)


def bnpo(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    *,
    num_groups: int,
    reward_components: Optional[jax.Array] = None,  # [N, K]
    r_min: float = 0.0,
    r_max: float = 1.0,
    alpha: Optional[float] = None,
    beta: Optional[float] = None,
) -> jax.Array:  # [N]
    """BNPO Beta normalisation (Xiao et al. 2025, "BNPO"; official `compute_bnpo_outcome_advantage`).

    ```
    R̃ = (s − r_min)/(r_max − r_min);  p_g = mean_g R̃  (singleton p = 0)
    m, v = mean and unbiased var of p over the groups present  (m = 0, v = 1 if only one group)
    a = (m(1−m)/v − 1)·m;  b = (m(1−m)/v − 1)·(1−m);  α = max(1 + a/3, 1);  β = max(1 + b/3, 1)
    A_i = (R̃_i − p_g)·clip(1/BetaPDF(p_g; α, β), 0, 1e6)
    ```
    With `reward_components[N, K]` (several rewards, e.g. accuracy and format) this is BNPO's advantage
    decomposition: `A = (1/K)·Σ_k A^k`, each A^k the formula above on component k alone with its own
    fitted (α_k, β_k) (official trainer, `use_advantage_decomposition`); `scores` are then unused.
    `alpha`/`beta` override the fitted values (α=β=1 is REINFORCE with a mean baseline; α=β=3/2 gives
    GRPO with population std, up to the factor π/8, for binary rewards). Difference from the official
    code: v = 0 (all groups with equal p) falls back to α=β=1 instead of producing inf/NaN.
    """
    require("r_max", r_max, r_max > r_min, f"must be > r_min={r_min}")
    require("alpha", alpha, alpha is None or alpha > 0, "must be > 0 (or None: fitted)")
    require("beta", beta, beta is None or beta > 0, "must be > 0 (or None: fitted)")
    one = functools.partial(_bnpo_component, group_ids=group_ids, num_groups=num_groups, r_min=r_min, r_max=r_max,
                            alpha=alpha, beta=beta)
    if reward_components is None:
        return one(scores)
    return jnp.mean(jax.vmap(one, in_axes=1, out_axes=1)(reward_components), axis=-1)


def _bnpo_component(scores, *, group_ids, num_groups, r_min, r_max, alpha, beta) -> jax.Array:  # [N] -> [N]
    """`bnpo` of one reward component (see its docstring)."""
    scaled = (_float(scores) - r_min) / (r_max - r_min)
    count = group_count(group_ids, num_groups)  # [G]
    p = jnp.where(count > 1, group_mean(scaled, group_ids, num_groups), 0.0)  # [G]
    present = (count > 0).astype(p.dtype)
    n_groups = jnp.sum(present)
    m = jnp.where(n_groups > 1, jnp.sum(p * present) / jnp.maximum(n_groups, 1.0), 0.0)
    v = jnp.sum(jnp.square(p - m) * present) / jnp.maximum(n_groups - 1.0, 1.0)
    v = jnp.where(n_groups > 1, v, 1.0)
    k = m * (1.0 - m) / jnp.where(v > 0, v, 1.0) - 1.0
    fitted = v > 0
    a = jnp.where(fitted, jnp.maximum(1.0 + k * m / 3.0, 1.0), 1.0) if alpha is None else jnp.asarray(alpha)
    b = jnp.where(fitted, jnp.maximum(1.0 + k * (1.0 - m) / 3.0, 1.0), 1.0) if beta is None else jnp.asarray(beta)
    p_i = to_members(p, group_ids, num_groups)
    log_pdf = xlogy(a - 1.0, p_i) + xlogy(b - 1.0, 1.0 - p_i) - betaln(a, b)
    weight = jnp.clip(jnp.exp(-log_pdf), 0.0, 1e6)
    return (scaled - p_i) * weight


def hapo(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    lengths: jax.Array,  # [N] number of valid tokens
    *,
    num_groups: int,
    normalize_std: bool = True,
    eps: float = 1e-6,
    fallback: float = 5.0,
) -> jax.Array:  # [N]
    """HAPO token-level group-average advantage (Liu et al. 2025, "From Uniform to Heterogeneous";
    starriver030515/HAPO `compute_hapo_outcome_advantage`).

    The group statistics are over all valid TOKENS of the group (each response's reward counted once
    per token, population std):
    ```
    μ_g = Σ_i L_i·s_i / Σ_i L_i;   σ_g = sqrt(Σ_i L_i·(s_i − μ_g)² / Σ_i L_i)
    A_i = (s_i − μ_g)/(σ_g + eps)          (s_i − μ_g without `normalize_std`)
    ```
    If any response of the group with L_i > 0 has |A_i| ≥ `fallback` (5), the whole group gets its
    `grpo` advantage instead. With equal lengths μ_g is GRPO's mean. Difference from the reference:
    it also tests the padded positions (where its value is (0 − μ_g)/σ_g) against the threshold; we
    test responses only. Pair with the `hapo` loss (entropy-adaptive clip and advantage redistribution).
    """
    require("fallback", fallback, fallback > 0, "must be > 0")
    scores = _float(scores)
    weights = lengths.astype(scores.dtype)
    total = group_sum(weights, group_ids, num_groups)  # [G]
    denominator = jnp.where(total > 0, total, 1.0)
    mean = group_sum(weights * scores, group_ids, num_groups) / denominator
    centred = scores - to_members(mean, group_ids, num_groups)
    if normalize_std:
        std = jnp.sqrt(group_sum(weights * jnp.square(centred), group_ids, num_groups) / denominator)
        centred = centred / (to_members(std, group_ids, num_groups) + eps)
    too_large = group_sum(((jnp.abs(centred) >= fallback) & (weights > 0)).astype(scores.dtype), group_ids, num_groups)
    use_grpo = to_members(too_large, group_ids, num_groups) > 0
    grpo_adv = grpo(scores, group_ids, num_groups=num_groups, normalize_std=normalize_std, eps=eps)
    return jnp.where(use_grpo, grpo_adv, centred)


def gdpo(
    reward_components: jax.Array,  # [N, K]
    group_ids: jax.Array,  # [N]
    mask: jax.Array,  # [N, T]
    *,
    num_groups: int,
    weights: Optional[Sequence[float]] = None,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> jax.Array:  # [N, T]
    """GDPO decoupled multi-reward normalisation (Liu et al. 2026, NVlabs/GDPO; verl `gdpo`).

    `A^k = grpo(r^k)` per component (verl GRPO: unbiased std, eps 1e-6, singleton μ=0 σ=1);
    `A = Σ_k w_k A^k` broadcast over tokens; then `masked_whiten(A·m, m)·m` over all valid tokens.
    verl convention; the paper's TRL patch instead uses eps 1e-4 and a sequence-level batch norm.
    """
    comps = _float(reward_components)
    w = jnp.ones(comps.shape[-1], comps.dtype) if weights is None else jnp.asarray(weights, comps.dtype)
    per_component = jax.vmap(
        lambda r: grpo(r, group_ids, num_groups=num_groups, normalize_std=normalize_std, eps=eps),
        in_axes=1,
        out_axes=1,
    )(comps)  # [N, K]
    mask = mask.astype(comps.dtype)
    combined = jnp.sum(per_component * w, axis=-1)[:, None] * mask
    return masked_whiten(combined, mask) * mask


def mapo(
    scores: jax.Array,  # [N] binary rewards in {0, 1}
    group_ids: jax.Array,  # [N]
    *,
    num_groups: int,
    eps: float = 1e-6,
) -> jax.Array:  # [N]
    """MAPO mixed advantage (Huang et al. 2025, arXiv:2509.18849).

    With group success rate p = μ_g (binary rewards), `λ = 1 − 4p(1−p)`:
    `A_i = (1−λ)·(s_i − μ_g)/(σ_g + eps) + λ·(s_i − μ_g)/(μ_g + eps)` (σ_g unbiased).
    At p = 0.5 this is the GRPO z-score; a singleton gets 0 (no verl singleton convention here).
    """
    scores = _float(scores)
    mean = to_members(group_mean(scores, group_ids, num_groups), group_ids, num_groups)
    std = to_members(group_std(scores, group_ids, num_groups), group_ids, num_groups)
    lam = 1.0 - 4.0 * mean * (1.0 - mean)
    centred = scores - mean
    return (1.0 - lam) * centred / (std + eps) + lam * centred / (mean + eps)


def canon(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    seq_metric: jax.Array,  # [N] e.g. mean token entropy or length of each response
    *,
    num_groups: int,
    mu: float = 1.0,
    alpha: float = 1.0,
    b: float = 0.0,
    norm: float = 1.0,
) -> jax.Array:  # [N]
    """CANON conditional advantage (Chen et al. 2025, biuboomc/CANON `compute_dr_*_group_outcome_advantage`).

    Each group is sorted by `seq_metric` (stable) and split at ⌊n/2⌋ into a low half C⁻ and a high half C⁺
    (the median element goes to C⁺ for odd n). With means m⁻, m⁺ (both 0 for a singleton):
    ```
    i ∈ C⁺:  A_i = μ·(α·s_i − m⁻ + b) + (1−μ)·(s_i − m⁺)
    i ∈ C⁻:  A_i = μ·(s_i − α·m⁺ − b) + (1−μ)·(s_i − m⁻)
    ```
    divided by `norm` (the reference code divides by max_length=8192 and pairs it with Dr.GRPO; here
    the default is 1 and the constant belongs in `seq-mean-token-sum-norm` aggregation). μ = 1 is pure
    inter-group (the paper's default); μ = 0.5 with equal halves is Dr.GRPO's `s_i − μ_g`.
    """
    scores = _float(scores)
    rank = group_rank(seq_metric, group_ids)
    count = to_members(group_count(group_ids, num_groups), group_ids, num_groups)
    high = rank >= jnp.floor(count / 2)
    high_f = high.astype(scores.dtype)
    mean_high = to_members(
        group_sum(scores * high_f, group_ids, num_groups)
        / jnp.maximum(group_sum(high_f, group_ids, num_groups), 1.0), group_ids, num_groups)
    mean_low = to_members(
        group_sum(scores * (1.0 - high_f), group_ids, num_groups)
        / jnp.maximum(group_sum(1.0 - high_f, group_ids, num_groups), 1.0), group_ids, num_groups)
    singleton = count <= 1
    mean_high = jnp.where(singleton, 0.0, mean_high)
    mean_low = jnp.where(singleton, 0.0, mean_low)
    adv_high = mu * (alpha * scores - mean_low + b) + (1.0 - mu) * (scores - mean_high)
    adv_low = mu * (scores - alpha * mean_high - b) + (1.0 - mu) * (scores - mean_low)
    return jnp.where(high, adv_high, adv_low) / norm


def canon_length(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    lengths: jax.Array,  # [N]
    *,
    num_groups: int,
    mu: float = 1.0,
    alpha: float = 1.0,
    b: float = 0.0,
    norm: float = 1.0,
) -> jax.Array:  # [N]
    """CANON with responses split by length (`canon` with `seq_metric = lengths`)."""
    return canon(scores, group_ids, lengths, num_groups=num_groups, mu=mu, alpha=alpha, b=b, norm=norm)


def grpo_passk(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    *,
    num_groups: int,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> jax.Array:  # [N]
    """GRPO pass@k advantage (verl `grpo_passk`; Chen et al. 2025, "Pass@k Training").

    Only the best sample of each group gets `A = r_max − r_2nd` (÷ (σ_g + eps) with `normalize_std`,
    σ_g unbiased); every other sample gets 0. With tied maxima the advantage is 0 whoever is picked
    (we pick the lowest index). verl raises on singleton groups; here they get 0.
    """
    scores = _float(scores)
    one_hot = _one_hot(group_ids, num_groups) > 0  # [N, G]
    idx = jnp.arange(scores.shape[0])
    r_max = jnp.max(jnp.where(one_hot, scores[:, None], -jnp.inf), axis=0)  # [G]
    is_max = one_hot & (scores[:, None] == r_max[None, :])
    top = jnp.min(jnp.where(is_max, idx[:, None], scores.shape[0]), axis=0)  # [G]
    rest = one_hot & (idx[:, None] != top[None, :])
    r_second = jnp.max(jnp.where(rest, scores[:, None], -jnp.inf), axis=0)  # [G]
    count = group_count(group_ids, num_groups)
    gap = jnp.where(count > 1, r_max - jnp.where(count > 1, r_second, 0.0), 0.0)
    if normalize_std:
        gap = gap / (group_std(scores, group_ids, num_groups) + eps)
    is_top = jnp.any(one_hot & (idx[:, None] == top[None, :]), axis=1)
    return jnp.where(is_top, to_members(gap, group_ids, num_groups), 0.0)


def gae(
    rewards: jax.Array,  # [N, T]
    values: jax.Array,  # [N, T]
    mask: jax.Array,  # [N, T]
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[jax.Array, jax.Array]:  # ([N, T], [N, T])
    """Generalised Advantage Estimation (Schulman et al. 2016; verl `compute_gae_advantage_return`).

    Reverse scan that skips masked tokens (multi-turn observation tokens are transparent):
    ```
    next_v = 0; last = 0
    for t = T−1 … 0:
        δ = r_t + γ·next_v − V_t;  last' = δ + γλ·last
        next_v = V_t·m_t + (1−m_t)·next_v;  last = last'·m_t + (1−m_t)·last;  adv_t = last
    returns = adv + V (before whitening);  advantages = masked_whiten(adv, m) (global, not zeroed)
    ```
    Defaults γ = 1, λ = 0.95 (LLM PPO recipes, e.g. Lite-PPO/ROLL); verl's AlgoConfig default is λ = 1.
    """
    values = values.astype(_float(rewards).dtype)
    adv = gae_scan(rewards, values, mask, gamma=gamma, lam=lam)
    return masked_whiten(adv, mask), adv + values


def gae_scan(
    rewards: jax.Array,  # [N, T]
    values: jax.Array,  # [N, T]
    mask: jax.Array,  # [N, T]
    *,
    gamma: float,
    lam: float,
) -> jax.Array:  # [N, T]
    """The unwhitened GAE advantages of `gae` (its reverse scan; masked positions are transparent and
    carry the next valid token's advantage). Nothing after the last valid token: bootstrap value 0."""
    rewards = _float(rewards)
    values = values.astype(rewards.dtype)
    mask = mask.astype(rewards.dtype)

    def step(carry, xs):
        next_value, last = carry
        r_t, v_t, m_t = xs
        delta = r_t + gamma * next_value - v_t
        candidate = delta + gamma * lam * last
        next_value = v_t * m_t + (1.0 - m_t) * next_value
        last = candidate * m_t + (1.0 - m_t) * last
        return (next_value, last), last

    zeros = jnp.zeros(rewards.shape[:1], rewards.dtype)
    _, adv = jax.lax.scan(step, (zeros, zeros), (rewards.T, values.T, mask.T), reverse=True)
    return adv.T


def gbpo_targets(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    *,
    num_groups: int,
    temperature: float = 1.0,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> jax.Array:  # [N]
    """GBPO target signal (Ao et al. 2026; bounded-ratio-rl `compute_gbpo_outcome_advantage_and_target`).

    `z̃_i = (s_i − median_g)/(σ_g + eps)/temperature` (σ_g unbiased; ÷σ only with `normalize_std`;
    singleton: median 0, σ 1). Feed to `losses.gbpo(..., target_advantages=z̃)`; the GBPO weights
    `advantages` are plain `grpo` advantages. The authors' TTRL scripts use temperature 1e-4.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    scores = _float(scores)
    count = to_members(group_count(group_ids, num_groups), group_ids, num_groups)
    singleton = count <= 1
    median = jnp.where(singleton, 0.0, to_members(group_median(scores, group_ids, num_groups), group_ids, num_groups))
    centred = scores - median
    if normalize_std:
        std = jnp.where(singleton, 1.0, to_members(group_std(scores, group_ids, num_groups), group_ids, num_groups))
        centred = centred / (std + eps)
    return centred / temperature
