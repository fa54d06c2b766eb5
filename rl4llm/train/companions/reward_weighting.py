"""Reward components weighted from step to step (`config.reward_weighting`; kernels `rl4llm.rl.reward_weighting`).

The components are the reward pipeline's [N, K]: the main reward, then each of `config.task.extra_rewards` as it
enters the combination (`rewards.pipeline`). Their state lives in `TrainState.extras` (checkpointed and resumed
with it, so a resumed run continues with the same weights / multipliers):

* "reward_weights" (method "dynamic", Lu et al. 2025): `DynamicWeights`, the weights w [K] on the simplex (initially
  (1, w_1, ..., w_{K-1}) of `task.extra_rewards`, normalised) and the influences summed since their last update;
* "multipliers" (method "constrained", Moskovitz et al. 2024): λ [C] >= 0 of the constraints of
  `reward_weighting.thresholds`, in its order.

One RL step: `weighted_advantages` (called by `train.single_turn.collect`, which reads the state only) gives the
advantages from the state's weights: dynamic, the estimator on r = Σ_k w_k r_k (the official code re-weights the
reward, not the advantages); constrained, the estimator on each component alone, mixed A_main + Σ_i λ_i A_i. Then
`update` (dynamic, before the learner's updates): the Gram matrix of the K policy gradients with each component's
advantages, at the params the step starts from (`make_gram_fn`), accumulated; every `accumulation_steps` steps w
moves by mirror descent. The new w weighs the NEXT step's batch: the official code re-weights the batch the
influence was measured on, which here would mean updating state inside `collect`. `after_step` (constrained): λ by
one projected step on the batch means' violation, after the policy's updates (as the official code).

Each component's advantages come from the run's estimator on that component alone: with GRPO a per-component group
normalisation, GDPO's first stage (`rl.advantages.gdpo`, without its batch whitening); the official constrained code
whitens each of its PPO (GAE) advantages over the batch instead. The logged `reward` stays the pipeline's combined
reward (main + the `extra_rewards` weights); `reward_weighting/weighted_reward` is the dynamic run's Σ_k w_k mean r_k.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import flax
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from rl4llm.rewards import combine as combine_lib
from rl4llm.rl import reward_weighting as rw
from rl4llm.train import learner as learner_lib
from rl4llm.train import optim

# Stream of fold_in(step_key, ·) of the per-component gradients (losses that draw random numbers); `train.step` uses
# 1 + epoch, 999 and 1000 + update.
_GRAM_STREAM = 998


class DynamicWeights(flax.struct.PyTreeNode):
    weights: jax.Array  # [K] float32 on the simplex: the reward is Σ_k w_k r_k
    influence_sum: jax.Array  # [K] float32: Σ of the influences since the weights' last update


class ComponentBatch(NamedTuple):
    """What a step's collection hands the companion: each component's batch mean [K] (host) and, for dynamic
    weighting, the estimator's advantages of each component alone [K, N, T] (else None)."""

    means: np.ndarray
    advantages: Any = None


def enabled(config) -> bool:
    """Whether the run re-weights its reward components (`reward_weighting.method` dynamic or constrained)."""
    return config.reward_weighting.method != "none"


def component_names(config) -> list[str]:
    """The K components' names: the main reward, then the extra rewards in config order."""
    return [config.task.reward, *combine_lib.parse_weights(config.task.extra_rewards)]


def constraints(config) -> tuple[list[int], np.ndarray]:
    """The constrained components' indices into the K components, and their thresholds [C] (thresholds' order)."""
    names, thresholds = component_names(config), combine_lib.parse_weights(config.reward_weighting.thresholds)
    return [names.index(n) for n in thresholds], np.asarray(list(thresholds.values()), np.float32)


def init(config, setup, state):
    """`state` with the initial weights (dynamic) or multipliers (constrained), when the run re-weights."""
    w = config.reward_weighting
    if w.method == "dynamic":
        initial = np.asarray([1.0, *combine_lib.parse_weights(config.task.extra_rewards).values()], np.float32)
        return state.with_extras(reward_weights=DynamicWeights(weights=jnp.asarray(initial / initial.sum()),
                                                               influence_sum=jnp.zeros(len(initial), jnp.float32)))
    if w.method == "constrained":
        return state.with_extras(multipliers=jnp.full(len(constraints(config)[0]), w.multiplier_init, jnp.float32))
    return state


def weighted_advantages(config, state, components: np.ndarray, estimate: Callable):
    """(advantages [N, T], ComponentBatch) of a step from its components [N, K] and the state's weights, or None
    when the run does not re-weight. `estimate(scores [N]) -> advantages [N, T]`: the run's estimator."""
    w = config.reward_weighting
    if w.method == "none":
        return None
    components = np.asarray(components, np.float32)
    means = components.mean(axis=0)
    if w.method == "dynamic":
        weights = np.asarray(state.extra("reward_weights").weights)
        per_component = jnp.stack([estimate(jnp.asarray(components[:, k])) for k in range(components.shape[1])])
        return estimate(jnp.asarray(components @ weights)), ComponentBatch(means, per_component)
    index, _ = constraints(config)
    constrained = jnp.stack([estimate(jnp.asarray(components[:, k])) for k in index])
    advantages = rw.mix_advantages(estimate(jnp.asarray(components[:, 0])), constrained, state.extra("multipliers"),
                                   normalize=w.normalize)
    return advantages, ComponentBatch(means)


def make_gram_fn(model_cfg, lcfg) -> Callable:
    """Jitted (state, batch, advantages [K, N, T], key) -> the Gram matrix [K, K] of the K flattened gradients of
    the learner's loss (`learner.policy_gradients`, over all trainable params: the official code may restrict them
    to `target_layer_ids`) with the batch's advantages replaced by each component's."""

    def gram(state, batch, advantages, key):
        def flat_gradient(adv):
            grads = learner_lib.policy_gradients(model_cfg, lcfg, state, batch.replace(advantages=adv), key).grads
            return ravel_pytree(grads)[0]

        flat = jax.lax.map(flat_gradient, advantages)  # [K, D]
        return flat @ flat.T

    return jax.jit(gram)


def _learning_rate(config, step: int) -> float:
    """The policy's learning rate of RL step `step`'s first update (the official code's lr_t, get_last_lr)."""
    rl = config.rl
    schedule = optim.learning_rate_schedule(rl.learning_rate, rl.warmup_steps, rl.lr_schedule,
                                            rl.steps * rl.ppo_epochs * rl.num_minibatches)
    return float(schedule(step * rl.ppo_epochs * rl.num_minibatches)) if callable(schedule) else float(schedule)


def _log_components(config, batch: ComponentBatch, metrics: dict) -> None:
    for name, mean in zip(component_names(config), batch.means):
        metrics[f"reward_weighting/mean/{name}"] = float(mean)


def update(config, programs, state, rollouts, step: int, metrics: dict):
    """Dynamic weighting, before RL step `step`'s learner updates: the components' gradient influence at the params
    the step starts from, and every `accumulation_steps` steps the weights' mirror-descent step. Logs the weights the
    step trained with, the influences, and `reward_weighting/weight_change` (Σ_k |w'_k − w_k|)."""
    current = state.extra("reward_weights")
    if current is None:
        return state
    w = config.reward_weighting
    step_key = jax.random.fold_in(jax.random.wrap_key_data(state.key), step)
    gram = programs.component_gram_fn(state, rollouts.batch, rollouts.reward_components.advantages,
                                      jax.random.fold_in(step_key, _GRAM_STREAM))
    influence = rw.gradient_influence(rw.clip_gram(gram, config.rl.grad_clip))
    now, mean_influence, influence_sum = rw.accumulate_influence(current.influence_sum, influence, step + 1,
                                                                 accumulation_steps=w.accumulation_steps)
    weights = current.weights
    if now:
        weights = rw.mirror_descent_weights(weights, mean_influence, learning_rate=_learning_rate(config, step),
                                            regularization=w.regularization)
    _log_components(config, rollouts.reward_components, metrics)
    for name, weight, s in zip(component_names(config), np.asarray(current.weights), np.asarray(influence)):
        metrics[f"reward_weighting/weight/{name}"] = float(weight)
        metrics[f"reward_weighting/influence/{name}"] = float(s)
    metrics["reward_weighting/weight_change"] = float(jnp.sum(jnp.abs(weights - current.weights)))
    metrics["reward_weighting/weighted_reward"] = float(np.dot(rollouts.reward_components.means, current.weights))
    return state.with_extras(reward_weights=DynamicWeights(weights=weights, influence_sum=influence_sum))


def after_step(config, programs, state, rollouts, step: int, metrics: dict, updates: list):
    """Constrained RLHF, after RL step `step`'s updates: one projected step of the multipliers on the batch means
    (`rl.reward_weighting.multiplier_update`). Logs each constraint's multiplier the step trained with and its
    violation threshold − mean (positive: violated)."""
    multipliers = state.extra("multipliers")
    if multipliers is None:
        return state
    w = config.reward_weighting
    index, thresholds = constraints(config)
    values = rollouts.reward_components.means[index]
    _log_components(config, rollouts.reward_components, metrics)
    names = component_names(config)
    for i, lam, violation in zip(index, np.asarray(multipliers), rw.constraint_violation(values, thresholds)):
        metrics[f"constraint/multiplier/{names[i]}"] = float(lam)
        metrics[f"constraint/violation/{names[i]}"] = float(violation)
    new = rw.multiplier_update(multipliers, jnp.asarray(values), jnp.asarray(thresholds),
                               learning_rate=w.multiplier_lr, max_multiplier=w.multiplier_max)
    return state.with_extras(multipliers=new)
