"""Supervised warm start: maximise log π(solution | prompt) on the task's reference solutions.

loss = −token-mean over the batch of log π(y_t | x, y_<t), the completion tokens including eos.
"""

from __future__ import annotations

import functools

import flax
import jax
import jax.numpy as jnp
import optax

from rl4llm.models import lora
from rl4llm.train import logprobs as logprobs_lib


class SFTState(flax.struct.PyTreeNode):
    params: dict
    opt_state: optax.OptState  # of lora.trainable(params): the adapters alone for LoRA params


def sft_loss(model_cfg, chunk_size: int, params, tokens, attention_mask, completion_mask):
    """Token-mean negative log-likelihood of the completions. tokens [N, P+T], completion_mask [N, T]."""
    logp, _ = logprobs_lib.completion_logprobs(
        model_cfg, params, tokens, attention_mask, completion_mask.shape[1], chunk_size=chunk_size
    )
    return -jnp.sum(logp * completion_mask) / jnp.maximum(jnp.sum(completion_mask), 1.0)


def make_sft_step(model_cfg, optimizer: optax.GradientTransformation, chunk_size: int, layout=None, state=None):
    """Jitted `(state, tokens, attention_mask, completion_mask) -> (state, metrics)`, state donated; with a
    `parallel.layout.Layout` (and the `state` whose shardings it keeps), compiled on the learner mesh
    (`Layout.jit_step`)."""
    loss_fn = functools.partial(sft_loss, model_cfg, chunk_size)

    def step(state: SFTState, tokens, attention_mask, completion_mask):
        trainable = lora.trainable(state.params)
        loss, grads = jax.value_and_grad(lambda t: loss_fn(lora.with_trainable(state.params, t), tokens,
                                                           attention_mask, completion_mask))(trainable)
        updates, opt_state = optimizer.update(grads, state.opt_state, trainable)
        params = lora.with_trainable(state.params, optax.apply_updates(trainable, updates))
        return SFTState(params=params, opt_state=opt_state), {"loss": loss, "grad_norm": optax.tree.norm(grads)}

    if layout is not None:
        return layout.jit_step(step, state, batch_argnums=(1, 2, 3))
    return jax.jit(step, donate_argnums=0)
