"""ARRoL's quality head, trained online beside the policy (`config.pruning`; kernels `rl4llm.rl.pruning`).

The head (w [E], b) and its Adam state live in `TrainState.extras["quality_head"]` (checkpointed and resumed with
the policy). Each RL step prunes its rollouts with the head as it stands (`train.completions.pruned_completions`),
then, before the policy's update, the head takes one step of binary cross-entropy on the kept rollouts' checkpoint
features and their verifier outcomes (the main reward is 1); the pruned ones were never finished, so they have
none. Logged: `pruning/head_loss`, `head_accuracy` (q > ½ agrees with the outcome), `head_predicted` (mean q) and
`head_outcome` (share correct) on the kept rollouts before the update, and `pruning/head_grad_norm`.
"""

from __future__ import annotations

import functools

import flax
import jax
import jax.numpy as jnp
import numpy as np

from rl4llm import reward_model as rm_lib
from rl4llm.rl import pruning
from rl4llm.train import optim


class QualityBatch(flax.struct.PyTreeNode):
    """The kept rollouts as the head learns from them."""

    features: jax.Array  # [N, E] float32: the policy's hidden state at the pruning checkpoint
    outcomes: jax.Array  # [N] bool: the main (correctness) reward is 1
    valid: jax.Array  # [N] bool: the rows the head learns from


def enabled(config) -> bool:
    return bool(config.pruning.enabled)


def make_optimizer(config):
    return optim.make_optimizer(config.pruning.learning_rate, 0, 0.0, 1.0)


def _objective(params, batch: QualityBatch):
    return pruning.quality_loss(params, batch.features, batch.outcomes, batch.valid)


def make_step(config):
    """Jitted `(RMState, QualityBatch) -> (RMState, metrics)`: one Adam step on the BCE, state donated."""
    return jax.jit(functools.partial(rm_lib.train_step, _objective, make_optimizer(config)), donate_argnums=0)


def params(config, state):
    """The head that prunes this step's rollouts, or None when off."""
    return state.extra("quality_head").params if enabled(config) else None


def batch(config, features: np.ndarray | None, main: np.ndarray) -> QualityBatch | None:
    """The step's QualityBatch from the rows' checkpoint features [N, E] and main rewards [N] (every row is a kept
    rollout: validation refuses traces and replay with pruning), or None when off."""
    if not enabled(config):
        return None
    return QualityBatch(features=jnp.asarray(features), outcomes=jnp.asarray(main >= 1.0),
                        valid=jnp.ones(len(main), bool))


# ------------------------------------------------------------------------------ in the RL step


def init(config, setup, state):
    """`state` with a head that predicts ½ everywhere and a fresh Adam state, when pruning."""
    if not enabled(config):
        return state
    head = pruning.init_head(setup.model_cfg.hidden_size)
    return state.with_extras(quality_head=rm_lib.init_state(head, make_optimizer(config)))


def update(config, programs, state, rollouts, step: int, metrics: dict):
    """Before the policy's updates: the head's step on the kept rollouts' outcomes, `pruning/head_*` in `metrics`."""
    if rollouts.quality_batch is None:
        return state
    head_state, head_metrics = programs.quality_head_step(state.extra("quality_head"), rollouts.quality_batch)
    metrics.update({f"pruning/head_{k}": v for k, v in head_metrics.items()})
    return state.with_extras(quality_head=head_state)


def after_step(config, programs, state, rollouts, step: int, metrics: dict, updates: list):
    """Nothing after the learner's updates."""
    return state
