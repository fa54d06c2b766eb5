"""PRIME's implicit PRM in the training loop (Cui et al. 2025, "Process Reinforcement through Implicit Rewards").

The PRM π_φ is a second decoder initialised from the warm-start policy, which is also its frozen reference
π_ref (both carried in `TrainState.extras["prm"]`). Each RL step: the PRM and reference log-probs of the rollout give
the dense rewards `r_t = β·(log π_φ − log π_ref)` (`rl.prime.implicit_process_rewards`) for the "prime"
advantage, then the PRM takes one AdamW step on the batch's outcome labels (cross-entropy on the sequence
reward `β·Σ_t (log π_φ − log π_ref)`, `rl.prime.implicit_prm_loss`), i.e. the rewards of a batch come from
the PRM before it has seen that batch's labels (PRIME's "update after" order). Log-probs are those of the
untempered model (temperature 1): the PRM scores the text, it does not sample it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import optax

from rl4llm.rl import prime as prime_lib
from rl4llm.rl import registry
from rl4llm.train import learner as learner_lib
from rl4llm.train import optim
from rl4llm.train import logprobs as logprobs_lib


class PRMState(flax.struct.PyTreeNode):
    params: Any  # π_φ (decoder params), trained
    ref_params: Any  # π_ref, frozen (the warm-start policy)
    opt_state: Any


class PRMBatch(flax.struct.PyTreeNode):
    tokens: jax.Array  # [N, P+T] int32
    attention_mask: jax.Array  # [N, P+T] int32
    completion_mask: jax.Array  # [N, T] float32
    ref_logp: jax.Array  # [N, T] log π_ref of the completions (fixed: computed once per step)
    labels: jax.Array  # [N] outcome labels in [0, 1]


@dataclasses.dataclass(frozen=True)
class PRMConfig:
    beta: float  # 0.05 (PRIME)
    micro_batch_size: int  # 0: no accumulation
    logprob_chunk_size: int


def enabled(config) -> bool:
    """Whether the run trains an implicit PRM: the advantage estimator takes process rewards ("prime") and no process
    judge gives them (`config.task.step_reward`)."""
    return "process_rewards" in registry.advantage_inputs(config.rl.advantage) and config.task.step_reward == "none"


def prm_config(config) -> PRMConfig:
    return PRMConfig(beta=config.prime.beta, micro_batch_size=config.rl.micro_batch_size,
                     logprob_chunk_size=config.rl.logprob_chunk_size)


def _logp(model_cfg, pcfg: PRMConfig, params, tokens, attention_mask, completion_len: int):  # [N, T]
    return logprobs_lib.completion_logprobs(model_cfg, params, tokens, attention_mask, completion_len,
                                            chunk_size=pcfg.logprob_chunk_size)[0]


def make_logprobs_fn(model_cfg, pcfg: PRMConfig, completion_len: int) -> Callable:
    """Jitted `(prm_state, tokens, attention_mask) -> (log π_φ, log π_ref)` [N, T] of a rollout."""
    logp = functools.partial(_logp, model_cfg, pcfg, completion_len=completion_len)
    return jax.jit(lambda prm, tokens, mask: (logp(prm.params, tokens, mask), logp(prm.ref_params, tokens, mask)))


def prm_step(model_cfg, pcfg: PRMConfig, optimizer, state: learner_lib.TrainState, batch: PRMBatch):
    """One PRM update on `batch`: mean over sequences of the implicit-PRM cross-entropy, gradients
    accumulated over micro-batches (each sequence weighs 1/N whatever the split). -> (state, metrics)."""
    n, completion_len = batch.completion_mask.shape

    def loss_fn(params, mb: PRMBatch):
        logp = _logp(model_cfg, pcfg, params, mb.tokens, mb.attention_mask, completion_len)
        per_seq = prime_lib.implicit_prm_loss(logp, mb.ref_logp, mb.completion_mask, mb.labels, beta=pcfg.beta)
        # verl `compute_dpo_abs_accuracy`: sign of the sequence reward agrees with the label
        z = jnp.sum(prime_lib.implicit_process_rewards(logp, mb.ref_logp, mb.completion_mask, beta=pcfg.beta), -1)
        correct = jnp.sum((jnp.sign(z) == jnp.sign(2 * mb.labels - 1)).astype(jnp.float32))
        return jnp.sum(per_seq) / n, correct / n

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    micro = optim.split_microbatches(batch, pcfg.micro_batch_size)

    def part(mb):
        (loss, acc), grads = grad_fn(state.extra("prm").params, mb)
        return (grads, loss, acc), None

    zeros = (jax.tree.map(jnp.zeros_like, state.extra("prm").params), jnp.float32(0), jnp.float32(0))
    (grads, loss, acc), _ = optim.accumulate(part, zeros, micro)
    params, opt_state = optim.apply_update(optimizer, state.extra("prm").params, state.extra("prm").opt_state, grads)
    prm = state.extra("prm").replace(params=params, opt_state=opt_state)
    return state.with_extras(prm=prm), {"prm/loss": loss, "prm/accuracy": acc, "prm/grad_norm": optax.tree.norm(grads)}


def make_prm_step(model_cfg, pcfg: PRMConfig, optimizer) -> Callable:
    """Jitted `prm_step(state, batch)`, state donated."""
    return jax.jit(functools.partial(prm_step, model_cfg, pcfg, optimizer), donate_argnums=0)


def make_prm_optimizer(config) -> optax.GradientTransformation:
    p = config.prime
    return optim.make_optimizer(p.learning_rate, 0, p.weight_decay, p.grad_clip)


def init_prm_state(policy_params, optimizer) -> PRMState:
    """π_φ and π_ref both start as copies of the warm-start policy."""
    params = jax.tree.map(jnp.copy, policy_params)
    return PRMState(params=params, ref_params=jax.tree.map(jnp.copy, policy_params), opt_state=optimizer.init(params))


# ------------------------------------------------------------------------------ in the RL step


def init(config, setup, state):
    """`state` with the implicit PRM (`init_prm_state` of the policy `state.params`) when the run trains one."""
    if not enabled(config):
        return state
    return state.with_extras(prm=init_prm_state(state.params, make_prm_optimizer(config)))


def update(config, programs, state, rollouts, step: int, metrics: dict):
    """Before RL step `step`'s learner updates: the PRM's update on the batch's outcome labels (`programs.prm_step`;
    the batch's process rewards came from the PRM before it: PRIME's order), its prm/* metrics added to `metrics`."""
    if rollouts.prm_batch is None:
        return state
    state, prm_metrics = programs.prm_step(state, rollouts.prm_batch)
    metrics.update(prm_metrics)
    return state


def after_step(config, programs, state, rollouts, step: int, metrics: dict, updates: list):
    """Nothing after the learner's updates."""
    return state
