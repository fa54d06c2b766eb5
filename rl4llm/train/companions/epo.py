"""EPO in the learner (Xu et al. 2025, "EPO: Entropy-regularized Policy Optimization for LLM Agents RL").

The loss term is `rl.multi_turn.epo_entropy_loss` (entropy bonus minus the differentiable hinge corridor around
each turn index's historical mean entropy), added to the policy loss with the policy loss's aggregation weights
(so micro-batching does not change it). Its state lives in `TrainState.extras["epo"]` (checkpointed with the rest, so a
resumed run continues exactly):

* the history `(Σ H, Σ 1)` per turn index k over the action tokens of every learner update so far
  (`rl.multi_turn.turn_entropy_stats` of the entropies the learner computes anyway, before its update). An
  update's penalty reads the history of the updates before it (the first update of a run has none: no penalty).
  With `ppo_epochs x num_minibatches` updates per RL step every token of the step joins the history once per
  epoch: the mean over a step's tokens is what it is either way;
* the RL step being learned, set by `update` before the step's learner updates: the phase weight's "epoch" is the
  RL step (the official code counts training epochs over its data; one RL step is our unit of training time).
"""

from __future__ import annotations

import flax
import jax
import jax.numpy as jnp

from rl4llm.rl import multi_turn

# Keyword arguments of `loss`'s settings besides `total_epochs` (config.agent.epo's fields, same names).
LOSS_FIELDS = ("coef", "smooth_coef", "kappa_low", "kappa_high", "alpha")


class EPOState(flax.struct.PyTreeNode):
    entropy_sums: jax.Array  # [K] float32: Σ of the learner's action-token entropies of turn index k, all updates
    token_counts: jax.Array  # [K] float32: how many tokens those are
    step: jax.Array  # int32 scalar: the RL step being learned (the phase weight's epoch)


def init_state(num_turns: int) -> EPOState:
    """An empty history of `num_turns` turn indices (K = the env's turn cap), at RL step 0."""
    zeros = lambda: jnp.zeros((num_turns,), jnp.float32)  # noqa: E731  distinct buffers: the learner donates them
    return EPOState(entropy_sums=zeros(), token_counts=zeros(), step=jnp.zeros((), jnp.int32))


def enabled(config) -> bool:
    """Whether the run adds EPO's term: an agent run with `config.agent.epo.coef > 0`."""
    return bool(config.agent.env) and config.agent.epo.coef != 0


def init(config, setup, state):
    """`state` with an empty EPO history of the env's turn cap (`setup.mt_cfg.max_turns`) when EPO is on."""
    return state.with_extras(epo=init_state(setup.mt_cfg.max_turns)) if enabled(config) else state


def update(config, programs, state, rollouts, step: int, metrics: dict):
    """Before RL step `step`'s learner updates: the step being learned (the phase weight's epoch)."""
    if state.extra("epo") is None:
        return state
    return state.with_extras(epo=state.extra("epo").replace(step=jnp.asarray(step, jnp.int32)))


def after_step(config, programs, state, rollouts, step: int, metrics: dict, updates: list):
    """After RL step `step`: logs the phase weight it used (epo/phase_weight); the history grew in the learner."""
    if state.extra("epo") is not None:
        weight = multi_turn.epo_phase_weight(step, total_epochs=config.agent.epo.total_epochs)
        metrics["epo/phase_weight"] = float(weight)
    return state


def learner_settings(config) -> tuple:
    """`LearnerConfig.epo` of a run: sorted (name, value) pairs of `config.agent.epo` (LOSS_FIELDS and
    total_epochs), or () when EPO is off (not an agent run, or `config.agent.epo.coef == 0`)."""
    if not enabled(config):
        return ()
    epo = config.agent.epo
    settings = {name: float(getattr(epo, name)) for name in LOSS_FIELDS}
    settings["total_epochs"] = int(epo.total_epochs)
    return tuple(sorted(settings.items()))


def loss(settings: tuple, epo: EPOState, entropy: jax.Array, turn_id, mask: jax.Array, agg_weights: jax.Array):
    """EPO's loss term of one micro-batch and its metrics (epo/entropy, epo/hinge_penalty, epo/indicator_penalty):
    `rl.multi_turn.epo_entropy_loss` with phase weight `epo_phase_weight(epo.step, total_epochs)` and the whole
    minibatch's aggregation weights `agg_weights` (the loss and metrics of the micro-batches sum to the whole
    minibatch's). entropy, mask, agg_weights: [m, T]; turn_id: [m, T] int32 (the batch's `turn_id`)."""
    if turn_id is None:
        raise ValueError("config.agent.epo.coef > 0: EPO needs the LearnerBatch's turn_id (multi-turn batches, "
                         "agent.learner_batch); this batch has none")
    kwargs = dict(settings)
    weight = multi_turn.epo_phase_weight(epo.step, total_epochs=kwargs.pop("total_epochs"))
    return multi_turn.epo_entropy_loss(entropy, turn_id, mask, epo.entropy_sums, epo.token_counts,
                                       phase_weight=weight, agg_weights=agg_weights, **kwargs)


def accumulate(epo: EPOState, entropy: jax.Array, turn_id: jax.Array, mask: jax.Array) -> EPOState:
    """The history after an update on a batch of token entropies [N, T] (no gradient), turn ids and loss mask."""
    sums, counts = multi_turn.turn_entropy_stats(entropy, turn_id, mask, num_turns=epo.entropy_sums.shape[0])
    return epo.replace(entropy_sums=epo.entropy_sums + sums, token_counts=epo.token_counts + counts)
