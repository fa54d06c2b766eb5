"""Optimizers of every trained part (policy in SFT and RL, critic, implicit PRM): AdamW after global-norm clipping,
with a warm-up then constant or cosine learning rate."""

from __future__ import annotations

import optax

from rl4llm.config.validation import LR_SCHEDULES


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
