"""PPO's critic: value-model state, the jitted (donated) critic step, and the shared-trunk joint step.

The critic is `models.value_head` params (a separate decoder + head, or a head on the policy's trunk)
with its own optimizer and learning rate, carried in `TrainState.extras["critic"]`. Its loss is verl's clipped
value loss (`rl.losses.value_loss`: `½·agg(max((V−R)², (clip(V, V_old ± c_v)−R)²))`), aggregated with
whole-minibatch weights (`rl.aggregation.aggregation_weights`) and accumulated over micro-batches in a
`lax.scan`, so the update does not depend on the micro-batch size (as in the actor's `learner_step`).

* separate critic: `critic_step` updates the critic alone (one jitted step; the actor has its own);
* shared trunk: `shared_trunk_step` is ONE jitted step with ONE decoder forward (and backward) per
  micro-batch: the policy's log-probs and the head's values are read from the same completion hidden
  states (`learner.policy_gradients` with a `learner.HeadLoss`); the policy's trainable params get
  `∇(policy loss) + value_loss_coef·∇(value loss)`, the head `∇(value loss)` by the critic optimizer.
  During critic warm-up `critic_step` updates the head only (the actor, trunk included, is unchanged).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import optax

from rl4llm.models import value_head
from rl4llm.rl import aggregation, registry
from rl4llm.rl import losses as losses_lib
from rl4llm.config import validation as config_lib
from rl4llm.train import learner as learner_lib
from rl4llm.train import optim


class CriticState(flax.struct.PyTreeNode):
    params: Any  # value_head.init_critic tree: {"trunk", "head"} (separate) or {"head"} (shared trunk)
    opt_state: Any  # critic optimizer state of `params`


class CriticBatch(flax.struct.PyTreeNode):
    """Value targets of one (mini)batch of N completions (P prompt + T completion tokens per row)."""

    tokens: jax.Array  # [N, P+T] int32
    attention_mask: jax.Array  # [N, P+T] int32
    completion_mask: jax.Array  # [N, T] float32
    old_values: jax.Array  # [N, T] values at rollout time (the clipping centre)
    returns: jax.Array  # [N, T] GAE returns (before whitening)


@dataclasses.dataclass(frozen=True)
class CriticConfig:
    """Static hyper-parameters of the critic step (hashable)."""

    cliprange_value: float  # verl critic.cliprange_value (0.5)
    agg_mode: str
    micro_batch_size: int  # 0: no accumulation
    value_loss_coef: float = 1.0  # shared trunk: weight of the value-loss gradient on the policy's params
    agg_norm_length: float = 0.0  # C of "seq-mean-token-sum-norm" (LearnerConfig.agg_norm_length)


def value_loss_weights(ccfg: CriticConfig, completion_mask: jax.Array) -> jax.Array:  # [N, T]
    """Whole-minibatch aggregation weights of the value loss (`rl.aggregation.aggregation_weights`)."""
    return aggregation.aggregation_weights(completion_mask, ccfg.agg_mode, norm_length=ccfg.agg_norm_length or None)


def _value_loss(ccfg: CriticConfig, values, mb: CriticBatch, agg_weights):  # values [m, T]
    """This micro-batch's share of the whole-batch value loss, and summed metrics."""
    loss, metrics = losses_lib.value_loss(
        values, mb.old_values, mb.returns, mb.completion_mask,
        clip=ccfg.cliprange_value, agg_mode=ccfg.agg_mode, agg_weights=agg_weights,
    )
    tokens = jnp.sum(mb.completion_mask)
    return loss, {"vf_loss": loss, "vf_clip_frac": metrics["vf_clip_frac"] * tokens, "tokens": tokens}


def _critic_metrics(sums: dict) -> dict:
    """The step's value-loss metrics from the micro-batches' summed ones."""
    tokens = jnp.maximum(sums["tokens"], 1.0)
    return {"critic/vf_loss": sums["vf_loss"], "critic/vf_clip_frac": sums["vf_clip_frac"] / tokens}


def value_loss_grads(model_cfg, ccfg: CriticConfig, state: learner_lib.TrainState, batch: CriticBatch):
    """Gradients of the whole-minibatch value loss w.r.t. the critic params (the policy's are read, a shared
    trunk gets no gradient), and the metrics."""
    completion_len = batch.completion_mask.shape[1]

    def loss_fn(critic_params, mb, weights):
        values = value_head.completion_values(model_cfg, critic_params, state.params, mb.tokens, mb.attention_mask,
                                              completion_len)
        return _value_loss(ccfg, values, mb, weights)

    grad_fn = jax.grad(loss_fn, has_aux=True)
    weights = value_loss_weights(ccfg, batch.completion_mask)
    xs = optim.split_microbatches((batch, weights), ccfg.micro_batch_size)
    sums0 = {"vf_loss": 0.0, "vf_clip_frac": 0.0, "tokens": 0.0}
    init = (jax.tree.map(jnp.zeros_like, state.extra("critic").params), jax.tree.map(jnp.float32, sums0))
    (grads, sums), _ = optim.accumulate(lambda x: (grad_fn(state.extra("critic").params, *x), None), init, xs)
    return grads, _critic_metrics(sums)


def _apply_critic_update(optimizer, critic: CriticState, grads) -> CriticState:
    params, opt_state = optim.apply_update(optimizer, critic.params, critic.opt_state, grads)
    return critic.replace(params=params, opt_state=opt_state)


def critic_step(model_cfg, ccfg: CriticConfig, optimizer, state: learner_lib.TrainState, batch: CriticBatch):
    """One critic update (critic params only; the policy is read, never changed) -> (state, metrics)."""
    grads, metrics = value_loss_grads(model_cfg, ccfg, state, batch)
    metrics["critic/grad_norm"] = optax.tree.norm(grads)
    return state.with_extras(critic=_apply_critic_update(optimizer, state.extra("critic"), grads)), metrics


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _scale_gradient(x: jax.Array, scale: float) -> jax.Array:
    """Identity whose backward pass multiplies the cotangent by `scale`."""
    return x


def _scale_gradient_fwd(x, scale):
    return x, None


def _scale_gradient_bwd(scale, _, g):
    return (g * jnp.asarray(scale, g.dtype),)


_scale_gradient.defvjp(_scale_gradient_fwd, _scale_gradient_bwd)


def _head_value_loss(ccfg: CriticConfig, critic_params, hidden, inputs):  # hidden [m, T, E]
    """The value loss of a shared-trunk head on the policy's completion hidden states (a `learner.HeadLoss`):
    the head gets `∇(value loss)`, the trunk `value_loss_coef·∇(value loss)`."""
    mb, agg_weights = inputs
    values = value_head.values_from_hidden(critic_params["head"], _scale_gradient(hidden, ccfg.value_loss_coef))
    return _value_loss(ccfg, values, mb, agg_weights)


def shared_trunk_step(model_cfg, lcfg: learner_lib.LearnerConfig, ccfg: CriticConfig, optimizer, critic_optimizer,
                      state: learner_lib.TrainState, batch: learner_lib.LearnerBatch, critic_batch: CriticBatch,
                      key: jax.Array):
    """One joint update of a shared-trunk actor-critic, one decoder forward per micro-batch: policy params by
    `optimizer` on `∇(policy loss) + value_loss_coef·∇(value loss)`, the value head by `critic_optimizer` on
    `∇(value loss)`. Micro-batches of `lcfg.micro_batch_size` (the critic's is the same, `rl.micro_batch_size`)."""
    head = learner_lib.HeadLoss(
        loss_fn=functools.partial(_head_value_loss, ccfg), params=state.extra("critic").params,
        batch=(critic_batch, value_loss_weights(ccfg, critic_batch.completion_mask)),
    )
    pg = learner_lib.policy_gradients(model_cfg, lcfg, state, batch, key, head)
    new_state, actor_metrics = learner_lib.apply_policy_gradients(optimizer, state, batch, pg)
    metrics = {**actor_metrics, **_critic_metrics(pg.head_sums), "critic/grad_norm": optax.tree.norm(pg.head_grads)}
    critic = _apply_critic_update(critic_optimizer, state.extra("critic"), pg.head_grads)
    return new_state.with_extras(critic=critic), metrics


def make_critic_step(model_cfg, ccfg: CriticConfig, optimizer) -> Callable:
    """Jitted `critic_step(state, batch)`, state donated."""
    return jax.jit(functools.partial(critic_step, model_cfg, ccfg, optimizer), donate_argnums=0)


def make_shared_trunk_step(model_cfg, lcfg, ccfg: CriticConfig, optimizer, critic_optimizer) -> Callable:
    """Jitted `shared_trunk_step(state, batch, critic_batch, key)`, state donated."""
    step = functools.partial(shared_trunk_step, model_cfg, lcfg, ccfg, optimizer, critic_optimizer)
    return jax.jit(step, donate_argnums=0)


@functools.lru_cache(maxsize=None)
def make_values_fn(model_cfg, completion_len: int) -> Callable:
    """Jitted `(critic params, policy params, tokens, attention_mask) -> values [N, T]` of a rollout, one per model
    and completion length (the agent loop's records come in a few bucketed widths; each compiles once)."""
    return jax.jit(functools.partial(value_head.completion_values, model_cfg, completion_len=completion_len))


# ------------------------------------------------------------------------------ from the job config


def enabled(config) -> bool:
    """Whether the run trains a value model: the advantage estimator needs values (`registry.RETURNS_VALUE_TARGETS`:
    "gae"; the agent loop also "bilevel_gae")."""
    return config.rl.advantage in registry.RETURNS_VALUE_TARGETS


def critic_config(config) -> CriticConfig:
    return CriticConfig(
        cliprange_value=config.critic.cliprange_value,
        agg_mode=config.rl.agg_mode,
        micro_batch_size=config.rl.micro_batch_size,
        value_loss_coef=config.critic.value_loss_coef,
        agg_norm_length=config_lib.agg_norm_length(config),
    )


def make_critic_optimizer(config) -> optax.GradientTransformation:
    """AdamW of the critic, with its own learning rate (`config.critic.*`), like the actor's optimizer."""
    c = config.critic
    return optim.make_optimizer(c.learning_rate, c.lr_warmup_steps, c.weight_decay, c.grad_clip)


def init_critic_state(config, model_cfg, policy_params, optimizer) -> CriticState:
    """Critic initialised from the policy (a copy of its decoder + a zero head, or the head alone on a
    shared trunk), or restored from `config.critic.checkpoint` (written by `value_head.save_critic`)."""
    shared = config.critic.shared_trunk
    params = value_head.init_critic(model_cfg, policy_params, shared_trunk=shared)
    if config.critic.checkpoint:
        loaded = value_head.load_critic(config.critic.checkpoint, jax.eval_shape(lambda: params))
        # Restored arrays are committed to a device, fresh ones are not: a committed input makes every jitted step's
        # outputs committed, so each program (sampler, values, steps) would compile again on RL step 2.
        params = jax.tree.map(lambda x: jnp.asarray(jax.device_get(x)), loaded)
    return CriticState(params=params, opt_state=optimizer.init(params))


def value_metrics(values, returns, mask) -> dict:  # [N, T] each
    """The step's critic diagnostics on the rollout: explained variance of the returns by the values,
    masked means of values and returns (verl `critic/vf_explained_var`, `critic/values/mean`)."""
    return {
        "critic/vf_explained_var": losses_lib.explained_variance(values, returns, mask),
        "critic/values_mean": aggregation.masked_mean(values, mask),
        "critic/returns_mean": aggregation.masked_mean(returns, mask),
    }


# ------------------------------------------------------------------------------ in the RL step


def warming_up(config, rollouts, step: int) -> bool:
    """Whether RL step `step` (its `rollouts`) is a critic warm-up step (`config.critic.warmup_steps`): the critic
    is updated alone; the actor, and with it the controllers, wait."""
    return rollouts.critic_batch is not None and step < config.critic.warmup_steps


def init(config, setup, state):
    """`state` with the critic (`init_critic_state` from the policy `state.params`) when the run trains one."""
    if not enabled(config):
        return state
    return state.with_extras(critic=init_critic_state(config, setup.model_cfg, state.params,
                                                      make_critic_optimizer(config)))


def update(config, programs, state, rollouts, step: int, metrics: dict):
    """Nothing before the learner's updates: the critic is updated with the actor (`train.step`'s `_update`)."""
    return state


def after_step(config, programs, state, rollouts, step: int, metrics: dict, updates: list):
    """After RL step `step`: marks a warm-up step (critic/warmup, `warming_up`)."""
    if warming_up(config, rollouts, step):
        metrics["critic/warmup"] = 1.0
    return state
