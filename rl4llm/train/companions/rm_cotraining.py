"""The outcome reward model co-trained with the policy (Cooper: Hong et al. 2025, "Cooper: Co-Optimizing Policy and
Reward Models in Reinforcement Learning for Large Language Models"), `config.reward_model.co_train`.

The RM that scores the rollouts (`config.reward_model.checkpoint`) is part of the run's state
(`TrainState.extras["reward_model"]`: params and AdamW state, checkpointed and resumed with the policy). Each RL step
scores the rollouts with the RM as it stands, then, before the policy's update, the RM takes one Bradley–Terry step
on the step's own pairs, within the groups the rule verifier splits (`reward_model.co_train_pairs`): every (accepted,
rejected) pair of a group, the mean over all of them (`all_pairs_loss`: InstructGPT's K-choose-2 comparisons of one
prompt), or only the accepted completion the RM scores lowest vs the rejected one it scores highest
(`rl.preference.verified_pairs`: `hardest`). Positives come from the high-precision verifier as in Cooper; its
negatives are an assistant model's rewrites of positives, ours are the policy's own rejected completions — what a
policy hacking the RM produces. The update uses the RM's training fields (`reward_model.learning_rate`,
`weight_decay`, `grad_clip`, `margin`; no warm-up).

Reward-hacking monitors (before the update, on the step's rollouts): `reward_model/pair_accuracy`, the share of
(accepted, rejected) pairs of a group the RM orders right (falls when the policy finds what the RM overrates;
1 = the RM agrees with the verifier), `reward_model/hard_pair_accuracy` (on each group's worst-ordered pair),
`reward_model/loss`, `reward_model/pairs` (groups with a pair) and `reward_model/grad_norm`.
"""

from __future__ import annotations

import functools

import flax
import jax
import jax.numpy as jnp

from rl4llm import reward_model as rm_lib
from rl4llm.rl import preference
from rl4llm.train import optim


class CoTrainBatch(flax.struct.PyTreeNode):
    """One step's rollouts as the RM sees them."""

    tokens: jax.Array  # [N, P+T] int32: [prompt | completion]
    attention_mask: jax.Array  # [N, P+T]
    correct: jax.Array  # [N] bool: the rule verifier accepts the completion
    group_ids: jax.Array  # [N]


def enabled(config) -> bool:
    return bool(config.reward_model.co_train)


def make_optimizer(config):
    r = config.reward_model
    return optim.make_optimizer(r.learning_rate, 0, r.weight_decay, r.grad_clip)


def _group_pairs(correct: jax.Array, group_ids: jax.Array) -> jax.Array:  # [N, N] bool
    """(i, j): i accepted and j rejected by the verifier, in one group."""
    return (group_ids[:, None] == group_ids[None, :]) & correct[:, None] & ~correct[None, :]


def pair_accuracy(scores: jax.Array, correct: jax.Array, group_ids: jax.Array) -> jax.Array:
    """The share of a group's (accepted, rejected) pairs whose accepted completion scores strictly higher, over all
    such pairs of the batch (0 when there is none)."""
    pairs = _group_pairs(correct, group_ids)
    right = pairs & (scores[:, None] > scores[None, :])
    return jnp.sum(right) / jnp.maximum(jnp.sum(pairs), 1)


def all_pairs_loss(scores: jax.Array, correct: jax.Array, group_ids: jax.Array, margin: float) -> jax.Array:
    """Mean Bradley–Terry loss −log σ(r_i − r_j − m) over every pair (i accepted, j rejected) of one group (0 when
    there is none)."""
    pairs = _group_pairs(correct, group_ids)
    losses = jax.nn.softplus(-(scores[:, None] - scores[None, :] - margin))
    return jnp.sum(jnp.where(pairs, losses, 0.0)) / jnp.maximum(jnp.sum(pairs), 1)


def objective(cfg, num_groups: int, margin: float, pairs: str, params, batch: CoTrainBatch):
    """The Bradley–Terry loss of the step's pairs (`pairs`: "all" or "hardest"), all rows scored in one forward;
    metrics `loss`, `pair_accuracy` (all pairs) and `hard_pair_accuracy` (each group's worst-ordered pair) before
    the update, `pairs` (groups with a pair)."""
    scores = rm_lib.score(cfg, params, batch.tokens, batch.attention_mask)
    fixed = jax.lax.stop_gradient(scores)
    chosen, rejected, valid = preference.verified_pairs(fixed, batch.correct, batch.group_ids, num_groups=num_groups)
    _, hardest = preference.bradley_terry_loss(scores[chosen], scores[rejected], margin=jnp.float32(margin),
                                               valid=valid)
    loss = hardest["loss"] if pairs == "hardest" else all_pairs_loss(scores, batch.correct, batch.group_ids, margin)
    return loss, {"loss": loss, "hard_pair_accuracy": hardest["accuracy"], "pairs": jnp.sum(valid),
                  "pair_accuracy": pair_accuracy(fixed, batch.correct, batch.group_ids)}


def make_step(config, setup):
    """Jitted `(RMState, CoTrainBatch) -> (RMState, metrics)`: one update (`reward_model.train_step`), state donated."""
    r = config.reward_model
    fn = functools.partial(objective, setup.reward_model.cfg, config.rl.num_prompts, r.margin, r.co_train_pairs)
    return jax.jit(functools.partial(rm_lib.train_step, fn, make_optimizer(config)), donate_argnums=0)


def params(config, state):
    """The RM params that score this step's rollouts: the co-trained ones, or None (the checkpoint's)."""
    return state.extra("reward_model").params if enabled(config) else None


def batch(config, tokens, attention_mask, components, group_ids) -> CoTrainBatch | None:
    """The step's CoTrainBatch (accepted: the main rule reward `components[:, 0]` is 1), or None when off."""
    if not enabled(config):
        return None
    return CoTrainBatch(tokens=tokens, attention_mask=attention_mask,
                        correct=jnp.asarray(components[:, 0] >= 1.0), group_ids=jnp.asarray(group_ids))


# ------------------------------------------------------------------------------ in the RL step


def init(config, setup, state):
    """`state` with the RM's params (the checkpoint's) and a fresh optimizer state, when co-training."""
    if not enabled(config):
        return state
    return state.with_extras(reward_model=rm_lib.init_state(setup.reward_model.params, make_optimizer(config)))


def update(config, programs, state, rollouts, step: int, metrics: dict):
    """Before the policy's updates: the RM's update on the step's pairs, `reward_model/*` added to `metrics`."""
    if rollouts.reward_model_batch is None:
        return state
    rm_state, rm_metrics = programs.reward_model_step(state.extra("reward_model"), rollouts.reward_model_batch)
    metrics.update({f"reward_model/{k}": v for k, v in rm_metrics.items()})
    return state.with_extras(reward_model=rm_state)


def after_step(config, programs, state, rollouts, step: int, metrics: dict, updates: list):
    """Nothing after the learner's updates."""
    return state
