"""Step-level process rewards from a process judge's segment labels, and the estimator that trains on them.

Layout (token-aligned, what `rewards.process.step_layout` returns): `step_scores[N, T]` holds the score s_k ∈ [0, 1] of
step k on the token that ends it (`step_ends[N, T]` marks those tokens; 0 elsewhere). The score is a PRM's estimate
that the step is right; with an exact judge (`rewards.arithmetic.step_labels`) it is the label itself.

Refinements (`STEP_REWARDS`, `config.task.step_reward`), each -> rewards r[N, T] on the step-end tokens:

    prm         r_k = s_k                                       the raw PRM score (Gao et al.'s hackable baseline:
                                                                its return grows with the number of steps)
    prm_clip    r_k = min(s_k − η, 0)                           Clip (Gao et al. 2024, "On Designing Effective RL
                                                                Reward at Training Time for LLM Reasoning"): every
                                                                reward ≤ 0, so no length of reasoning farms reward
    prm_delta   r_k = s_k − s_{k+1} (k < K),  r_K = s_K          Delta (same paper): the return-to-go from step k
                                                                telescopes to s_k, so repeating steps earns nothing
    thought     Delta over the thought values v_k = ±1          TP-GRPO (He et al. 2025, "Good Learners Think Their
                                                                Thinking"): see `thought_values`

`process_grpo` adds the rewards' return-to-go (γ = 1) to GRPO's outcome advantage. The papers' own optimisers differ:
Gao et al. train with PPO and GAE over the same rewards (a critic); TP-GRPO's "off-policy grouped PPO" is not public in
enough detail (its code release holds no algorithm) — both are documented departures.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rl4llm.rl.advantages import group_mean, grpo, to_members


def _next_end(values: jax.Array, ends: jax.Array) -> tuple[jax.Array, jax.Array]:  # [N, T] x2 -> [N, T] x2
    """At each position t: the value at the first end strictly after t, and whether there is one."""

    def step(carry, xs):
        value, end = xs
        return (jnp.where(end, value, carry[0]), carry[1] | end), carry

    init = (jnp.zeros(values.shape[:1], values.dtype), jnp.zeros(values.shape[:1], bool))
    _, (nxt, has) = jax.lax.scan(step, init, (values.T, ends.T), reverse=True)
    return nxt.T, has.T


def prm(step_scores: jax.Array, step_ends: jax.Array) -> jax.Array:  # [N, T]
    """The raw PRM score on each step's end: r_k = s_k."""
    return jnp.where(step_ends, step_scores, 0.0)


def prm_clip(step_scores: jax.Array, step_ends: jax.Array, *, eta: float = 0.5) -> jax.Array:  # [N, T]
    """PRM Clip (Gao et al. 2024): r_k = min(s_k − η, 0) on each step's end, so Σ_k r_k ≤ 0 for any number of steps.
    η: the threshold (the paper's choice is about the PRM's mean score; 0.5 on an exact judge's 0/1 labels)."""
    return jnp.where(step_ends, jnp.minimum(step_scores - eta, 0.0), 0.0)


def prm_delta(step_scores: jax.Array, step_ends: jax.Array) -> jax.Array:  # [N, T]
    """PRM Delta (Gao et al. 2024): r_k = s_k − s_{k+1} for k < K, r_K = s_K on each step's end, so the return-to-go
    from any token of step k is Σ_{j≥k} r_j = s_k (the sum telescopes): the reward of a response cannot grow by
    repeating steps."""
    nxt, has_next = _next_end(step_scores, step_ends)
    return jnp.where(step_ends, step_scores - jnp.where(has_next, nxt, 0.0), 0.0)


def thought_values(step_scores: jax.Array, step_ends: jax.Array) -> jax.Array:  # [N, T]
    """TP-GRPO's thought-level values on each step's end: a *thought* is a maximal run of consecutive steps with the
    same label (sound: s ≥ ½), and every step of it gets the thought's value, +1 sound, −1 flawed: labels
    [✓, ✓, ✗, ✗, ✓] are three thoughts (+1, −1, +1). [reconstruction: the paper's step judge is a generative PRM
    reading "intrinsic signals"; here it is the task's exact judge, and the ±1 scale is the digest's reading.]"""
    return jnp.where(step_ends, jnp.where(step_scores >= 0.5, 1.0, -1.0), 0.0)


def thought(step_scores: jax.Array, step_ends: jax.Array) -> jax.Array:  # [N, T]
    """TP-GRPO's thought rewards as step-end rewards: Delta over `thought_values`, so every token's return-to-go is the
    value of the thought that holds it, and the non-zero rewards sit on the thoughts' boundaries (one per thought)."""
    return prm_delta(thought_values(step_scores, step_ends), step_ends)


def count_thoughts(step_scores: jax.Array, step_ends: jax.Array) -> jax.Array:  # [N]
    """The number of thoughts (maximal runs of equally labelled steps) of each response."""
    return jnp.sum(thought(step_scores, step_ends) != 0.0, axis=-1)


STEP_REWARDS = {"prm": prm, "prm_clip": prm_clip, "prm_delta": prm_delta, "thought": thought}


def process_grpo(
    scores: jax.Array,  # [N] outcome rewards
    group_ids: jax.Array,  # [N]
    mask: jax.Array,  # [N, T]
    process_rewards: jax.Array,  # [N, T] step rewards on the step-end tokens (`STEP_REWARDS`)
    *,
    num_groups: int,
    process_coef: float = 0.5,
    capability_adaptive: bool = False,
    eps: float = 1e-6,
) -> jax.Array:  # [N, T]
    """GRPO's outcome advantage plus the return-to-go of the step rewards:

        A_{i,t} = (R_i − mean_g R) / (std_g R + ε) + c · w_g · Σ_{s ≥ t} m_{i,s}·r_{i,s}

    c = `process_coef`; w_g = 1 with `capability_adaptive` off, else 1 − acc_g, acc_g the group's mean outcome clipped
    to [0, 1] (TP-GRPO's capability-adaptive weight, reconstructed: process rewards count most where the policy
    mostly fails and fade as it masters the prompt). Return-to-go as DeepSeekMath's process-supervised GRPO (Shao et
    al. 2024 §4.1.3) and Gao et al.'s γ = 1, without their normalisation of the step rewards across the group."""
    mask = mask.astype(jnp.float32)
    outcome = grpo(scores, group_ids, num_groups=num_groups, eps=eps)  # [N]
    rewards = process_rewards.astype(jnp.float32) * mask
    to_go = jnp.cumsum(rewards[:, ::-1], axis=-1)[:, ::-1]
    weight = jnp.ones_like(outcome)
    if capability_adaptive:
        accuracy = to_members(group_mean(jnp.clip(scores.astype(jnp.float32), 0.0, 1.0), group_ids, num_groups),
                              group_ids, num_groups)
        weight = 1.0 - accuracy
    return (outcome[:, None] + process_coef * weight[:, None] * to_go) * mask
