"""Optimization of every trained part (policy in SFT and RL, critic, implicit PRM): AdamW after global-norm clipping
with a warm-up then constant or cosine learning rate (`make_optimizer`), gradient accumulation over micro-batches
(`split_microbatches`, `accumulate`) and the update (`apply_update`)."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax

from rl4llm.config.validation import LR_SCHEDULES
from rl4llm.models import lora


def learning_rate_schedule(learning_rate: float, warmup_steps: int, schedule: str = "constant",
                           total_steps: int = 0) -> optax.Schedule | float:
    """Learning rate per optimizer update: linear warm-up from 0 over `warmup_steps`, then

    - "constant": `learning_rate`;
    - "cosine": `learning_rate * (1 + cos(pi * (t - warmup) / (total - warmup))) / 2`, reaching 0 at update
      `total_steps` (SGDR, Loshchilov & Hutter 2017; optax.warmup_cosine_decay_schedule).
    """
    if schedule == "cosine":
        return optax.warmup_cosine_decay_schedule(0.0, learning_rate, warmup_steps, total_steps, end_value=0.0)
    if schedule != "constant":
        raise ValueError(f"learning-rate schedule {schedule!r}: must be one of {LR_SCHEDULES}")
    return optax.linear_schedule(0.0, learning_rate, warmup_steps) if warmup_steps > 0 else learning_rate


def make_optimizer(
    learning_rate: float,
    warmup_steps: int,
    weight_decay: float,
    grad_clip: float,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    *,
    schedule: str = "constant",
    total_steps: int = 0,
) -> optax.GradientTransformation:
    """AdamW after global-norm gradient clipping, with `learning_rate_schedule(...)` as its learning rate."""
    lr = learning_rate_schedule(learning_rate, warmup_steps, schedule, total_steps)
    adamw = optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
    return optax.chain(optax.clip_by_global_norm(grad_clip), adamw) if grad_clip > 0 else adamw


def split_microbatches(tree, micro_batch_size: int):
    """Reshapes every leaf [N, ...] -> [N // m, m, ...] (m = micro_batch_size, or N if 0)."""
    n = jax.tree.leaves(tree)[0].shape[0]
    m = micro_batch_size or n
    return jax.tree.map(lambda x: x.reshape((n // m, m) + x.shape[1:]), tree)


def accumulate(fn: Callable, init, xs, combine: Callable | None = None):
    """Gradient accumulation over micro-batches: `fn(x) -> (part, out)` on each micro-batch of `xs` (leaves
    [n_micro, m, ...], `split_microbatches`), the parts combined into `init` (default: summed; gradients and summed
    metrics of whole-batch-weighted losses add up to the whole batch's), in one `lax.scan`. -> (total, outs)."""
    combine = combine or (lambda carry, part: jax.tree.map(jnp.add, carry, part))

    def body(carry, x):
        part, out = fn(x)
        return combine(carry, part), out

    return jax.lax.scan(body, init, xs)


def apply_update(optimizer: optax.GradientTransformation, params, opt_state, grads):
    """One optimizer update of `params` by `grads`. -> (params, opt_state)."""
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


def apply_policy_update(optimizer: optax.GradientTransformation, params, opt_state, grads):
    """`apply_update` of the policy's `lora.trainable(params)` (the adapters alone for LoRA params, else all of
    them; `grads` are theirs). -> (params, opt_state)."""
    trainable, opt_state = apply_update(optimizer, lora.trainable(params), opt_state, grads)
    return lora.with_trainable(params, trainable), opt_state
