"""Weighting several reward components from step to step: dynamic reward weighting and constrained optimisation with
Lagrange multipliers (pure kernels; the state they update lives in `rl4llm.train.companions.reward_weighting`).

Dynamic reward weighting (Lu et al. 2025, "Learning to Optimize Multi-Objective Alignment Through Dynamic Reward
Weighting"; official code yining610/dynamic-reward-weighting, `verl/trainer/ppo/ray_trainer_optimization.py` and
`verl/workers/actor/dp_actor.py: compute_gradients`), its gradient-based weight optimisation:

* g_k = the policy loss's gradient with the advantages of reward k alone, clipped to norm <= c as
  `torch.nn.utils.clip_grad_norm_` does (`clip_gram`), over the whole batch;
* influence s_k = Σ_j <g_k, g_j>, the row sums of the Gram matrix (`gradient_influence`), summed over
  `accumulation_steps` RL steps and averaged at the update (`accumulate_influence`);
* w <- softmax(log w + lr_t · s / reg) (`mirror_descent_weights`: exponentiated gradient), lr_t = the policy's
  current learning rate, reg = the code's `regularization_factor`; the training reward is r = Σ_k w_k r_k.

Constrained RLHF (Moskovitz et al. 2024, "Confronting Reward Model Overoptimization with Constrained RLHF", ICLR;
official code tedmoskovitz/ConstrainedRL4LMs, `rl4lms/algorithms/constrained_ppo/constrained_ppo.py`): maximise the
task reward V_0 subject to V_i >= θ_i for constraint components i. Lagrangian L(π, λ) = V_0 + Σ_i λ_i (V_i − θ_i);
the policy ascends it with the mixed advantage (`mix_advantages`), the multipliers descend it by projected gradient
steps λ_i <- clip(λ_i + η (θ_i − V̂_i), 0, λ_max) (`multiplier_update`), V̂_i the batch mean of component i: a
violated constraint (V̂_i < θ_i) raises λ_i, a satisfied one lowers it, to 0 at most.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1


def clip_gram(gram, max_norm: float):  # [K, K] -> [K, K]
    """The Gram matrix <g_k, g_j> of the gradients after clipping each to norm <= `max_norm` (0: no clip), as the
    official `compute_gradients` does (`clip_grad_norm_` before flattening): g_k <- c_k g_k, c_k = min(1, max_norm /
    (||g_k|| + 1e-6)), so G'_kj = c_k c_j G_kj, ||g_k|| = sqrt(G_kk)."""
    if max_norm <= 0:
        return gram
    coef = jnp.minimum(1.0, max_norm / (jnp.sqrt(jnp.maximum(jnp.diagonal(gram), 0.0)) + CLIP_EPS))
    return gram * coef[:, None] * coef[None, :]


def gradient_influence(gram):  # [K, K] -> [K]
    """s_k = Σ_j <g_k, g_j>: how much a step along reward k's gradient moves every reward (the code's
    `scores_mat.sum(dim=-1)`, the diagonal included)."""
    return jnp.sum(gram, axis=-1)


def accumulate_influence(influence_sum, influence, steps_done, *, accumulation_steps: int):
    """(whether the weights update now, the influence to update them with, the new running sum) after one more RL
    step's `influence` [K]; `steps_done` counts the RL steps including this one. The code adds each step's influence
    to `scores_vec` and, when global_steps % weight_accumulation_steps == 0, updates with scores_vec /
    weight_accumulation_steps and zeroes it."""
    total = influence_sum + influence
    update = steps_done % accumulation_steps == 0
    return update, total / accumulation_steps, jnp.where(update, jnp.zeros_like(total), total)


def mirror_descent_weights(weights, influence, *, learning_rate, regularization: float):  # [K] -> [K]
    """w' = softmax(log w + lr · s / reg): one exponentiated-gradient (mirror-descent on the simplex) step toward the
    rewards with the largest gradient influence s; w' > 0 and Σ w' = 1 for any w > 0."""
    return jax.nn.softmax(jnp.log(weights) + learning_rate * influence / regularization)


def constraint_violation(values, thresholds):  # [C], [C] -> [C]
    """θ_i − V̂_i: positive where constraint V_i >= θ_i is violated (the gradient of −L with respect to λ_i)."""
    return thresholds - values


def multiplier_update(multipliers, values, thresholds, *, learning_rate: float, max_multiplier: float = 0.0):
    """λ' = clip(λ + η (θ − V̂), 0, λ_max) [C]: projected gradient descent of the Lagrangian in λ (λ >= 0 for
    inequality constraints; `max_multiplier` 0: no upper bound).

    The official code takes torch SGD steps (momentum 0.9, η = `lagrange_lr` 1e-2, λ's gradient clipped to
    `max_grad_norm`) on `lagrange * (threshold - constraint_returns).mean()` after every minibatch, without the
    projection in its last version; here it is one plain projected step per RL step with the step's batch means,
    the paper's μ >= 0."""
    new = multipliers + learning_rate * constraint_violation(values, thresholds)
    return jnp.clip(new, 0.0, max_multiplier if max_multiplier > 0 else jnp.inf)


def mix_advantages(task_advantages, constraint_advantages, multipliers, *, normalize: bool = False):
    """The policy's advantage [N, T] from the task's [N, T] and each constraint's [C, N, T] (each from the run's
    estimator on that component alone): A = A_0 + Σ_i λ_i A_i (the official code's mixed advantages, the gradient of
    the Lagrangian), or with `normalize` A = (A_0 + Σ_i λ_i A_i) / (1 + Σ_i λ_i), a convex combination that keeps
    the advantage's scale as λ grows (with one constraint it is the code's `sigmoid_lagrange` mixing
    (1 − σ)A_0 + σA_1 at σ = λ / (1 + λ))."""
    mixed = task_advantages + jnp.tensordot(multipliers, constraint_advantages, axes=1)
    return mixed / (1.0 + jnp.sum(multipliers)) if normalize else mixed
