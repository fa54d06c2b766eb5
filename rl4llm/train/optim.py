"""Optimization of every trained part (policy in SFT and RL, critic, implicit PRM): AdamW after global-norm clipping
with a warm-up then constant or cosine learning rate (`make_optimizer`), gradient accumulation over micro-batches
(`split_microbatches`, `accumulate`) and the update (`apply_update`).

Non-finite guard: an update whose gradient has a NaN or inf anywhere is skipped (params and optimizer moments left
as they were: `optax.apply_if_finite`), and counted in the optimizer state (`skipped_updates`). The stage's loop logs
each skip and, after `config.max_skipped_updates` in a row, checkpoints the last good state and raises
`NonFiniteError` (`check_skipped`)."""

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
    """AdamW after global-norm gradient clipping, with `learning_rate_schedule(...)` as its learning rate; an update
    with a non-finite gradient is skipped (module docstring; the host decides when to stop, so optax's own limit is
    never reached)."""
    lr = learning_rate_schedule(learning_rate, warmup_steps, schedule, total_steps)
    adamw = optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
    update = optax.chain(optax.clip_by_global_norm(grad_clip), adamw) if grad_clip > 0 else adamw
    return optax.apply_if_finite(update, max_consecutive_errors=2**30)


class NonFiniteError(RuntimeError):
    """Too many updates in a row had a non-finite gradient; the last good state is checkpointed."""


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


class SkipMonitor:
    """The host's view of a stage's skipped updates (module docstring): `after_step` logs a step's skips and says
    whether to stop (`limit` in a row); `error` is the exception to raise once the state is checkpointed."""

    def __init__(self, stage: str, opt_state, limit: int):
        self.stage, self.limit = stage, limit
        self.total = int(opt_state.total_notfinite)

    def after_step(self, step: int, opt_state, metrics: dict) -> bool:
        """Adds `optim/skipped_updates` (this step's) to `metrics`, prints one line if any; True: stop now."""
        in_a_row, total = int(opt_state.notfinite_count), int(opt_state.total_notfinite)
        metrics["optim/skipped_updates"] = float(total - self.total)
        if total > self.total:
            print(f"[{self.stage}] step {step}: {total - self.total} update(s) skipped for a non-finite gradient "
                  f"({in_a_row} in a row; the run stops at {self.limit})", flush=True)
        self.total, self.in_a_row = total, in_a_row
        return in_a_row >= self.limit

    def error(self, step: int) -> NonFiniteError:
        return NonFiniteError(f"{self.stage.upper()} step {step}: {self.in_a_row} updates in a row had a non-finite "
                              "gradient; the last good state is checkpointed. Lower the learning rate, or check the "
                              "rewards and the loss's inputs.")
