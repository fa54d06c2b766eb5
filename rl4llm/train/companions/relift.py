"""ReLIFT in the RL loop (Ma et al. 2025, "Learning What RL Can't: Interleaved Online Fine-Tuning for Hardest
Questions"; TheRoadQaQ/ReLIFT `relift/trainer.py`, `relift/actor.py`).

Each RL step, every question all of whose rollouts fail (ReLIFT's "solve none": main reward <= 0) joins a buffer
with its reference solution (`hardest_questions`; ReLIFT's demonstrations are a dataset field, here the
task's reference solutions), newest first. After the step's RL updates, when the buffer holds `relift.batch_size`
questions, one SFT step on the newest `batch_size` of them, with its own AdamW (`relift.learning_rate`, no warm-up
or schedule, `relift.grad_clip`), minimising the token-mean NLL of the solutions minus `relift.entropy_coef` x their
token-mean entropy (ReLIFT's `compute_sft_loss` with its entropy bonus, 0.001 in its scripts), no KL; those
questions leave the buffer, the others stay. State in `TrainState.extras["relift"]` (buffer and optimizer state,
checkpointed: a resumed run continues exactly). Departures: ReLIFT's buffer is unbounded, here it keeps the newest
`relift.capacity` questions; a prompt longer than `relift.prompt_tokens` is not buffered (`relift/too_long`).
Metrics: relift/solve_none, relift/buffer, relift/sft_updates and, at an SFT step, relift/sft_loss,
relift/sft_entropy, relift/sft_grad_norm.
"""

from __future__ import annotations

from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from rl4llm.models import lora
from rl4llm.rl.aggregation import masked_mean
from rl4llm.train import batches
from rl4llm.train import logprobs as logprobs_lib
from rl4llm.train import optim


class ReliftState(flax.struct.PyTreeNode):
    tokens: jax.Array  # [C, W+T] int32 buffered [prompt | solution] rows, newest first
    attention: jax.Array  # [C, W+T] int32
    completion_mask: jax.Array  # [C, T] float32
    count: jax.Array  # int32 scalar: rows in use (the first `count`)
    opt_state: Any  # the SFT step's AdamW state over the trainable params


def enabled(config) -> bool:
    """Whether the run interleaves ReLIFT's SFT steps (`config.relift.batch_size > 0`)."""
    return config.relift.batch_size > 0


def make_optimizer(config) -> optax.GradientTransformation:
    """The SFT step's own AdamW: `relift.learning_rate`, constant, no weight decay, `relift.grad_clip`."""
    return optim.make_optimizer(config.relift.learning_rate, 0, 0.0, config.relift.grad_clip)


def init(config, setup, state):
    """`state` with an empty buffer of `relift.capacity` rows and a fresh optimizer state when ReLIFT is on."""
    if not enabled(config):
        return state
    c, w, t = config.relift.capacity, config.relift.prompt_tokens, config.sampling.max_new_tokens
    relift = ReliftState(tokens=jnp.zeros((c, w + t), jnp.int32), attention=jnp.zeros((c, w + t), jnp.int32),
                         completion_mask=jnp.zeros((c, t), jnp.float32), count=jnp.zeros((), jnp.int32),
                         opt_state=make_optimizer(config).init(lora.trainable(state.params)))
    return state.with_extras(relift=relift)


def push_front(buffer: tuple, count: int, new: tuple) -> tuple[tuple, int]:
    """The buffer (arrays [C, ...] whose first `count` rows are in use, newest first) with `new` rows [k, ...] in
    front, keeping the newest C rows. -> (arrays, count). Host numpy."""
    capacity = buffer[0].shape[0]
    merged = tuple(np.concatenate([n, b[:count]])[:capacity] for n, b in zip(new, buffer))
    used = merged[0].shape[0]
    return tuple(np.concatenate([m, np.zeros((capacity - used,) + m.shape[1:], m.dtype)]) for m in merged), used


def pop_front(buffer: tuple, count: int, n: int) -> tuple[tuple, tuple, int]:
    """(the first `n` rows, the buffer without them, count - n). Host numpy."""
    taken = tuple(b[:n] for b in buffer)
    rest = tuple(np.concatenate([b[n:], np.zeros((n,) + b.shape[1:], b.dtype)]) for b in buffer)
    return taken, rest, count - n


def make_step(config, setup) -> callable:
    """Jitted `(params, opt_state, tokens [n, W+T], attention, completion_mask [n, T]) -> (params, opt_state,
    metrics)`: one ReLIFT SFT step (module docstring), the learner's log-prob pass at temperature 1."""
    optimizer, coef, t = make_optimizer(config), config.relift.entropy_coef, config.sampling.max_new_tokens

    def loss_fn(trainable, params, tokens, attention, mask):
        logp, entropy = logprobs_lib.completion_logprobs(setup.model_cfg, lora.with_trainable(params, trainable),
                                                         tokens, attention, t, chunk_size=config.rl.logprob_chunk_size)
        nll, mean_entropy = -masked_mean(logp, mask), masked_mean(entropy, mask)
        return nll - coef * mean_entropy, (nll, mean_entropy)

    def step(params, opt_state, tokens, attention, mask):
        trainable = lora.trainable(params)
        (_, (nll, mean_entropy)), grads = jax.value_and_grad(loss_fn, has_aux=True)(trainable, params, tokens,
                                                                                 attention, mask)
        params, opt_state = optim.apply_policy_update(optimizer, params, opt_state, grads)
        metrics = {"relift/sft_loss": nll, "relift/sft_entropy": mean_entropy,
                   "relift/sft_grad_norm": optax.tree.norm(grads)}
        return params, opt_state, metrics

    return jax.jit(step, donate_argnums=(0, 1))


def update(config, programs, state, rollouts, step: int, metrics: dict):
    """Nothing before the learner's updates: ReLIFT's SFT step follows the RL update."""
    return state


def after_step(config, programs, state, rollouts, step: int, metrics: dict, updates: list):
    """After RL step `step`'s updates: its hardest questions join the buffer; with `relift.batch_size` of them, one
    SFT step on the newest, which leave it."""
    if not enabled(config):
        return state
    relift, n = state.extra("relift"), config.relift.batch_size
    buffer = jax.device_get((relift.tokens, relift.attention, relift.completion_mask))
    count = int(relift.count)
    if rollouts.relift_rows is not None and len(rollouts.relift_rows[0]):
        buffer, count = push_front(buffer, count, rollouts.relift_rows)
    params, opt_state = state.params, relift.opt_state
    metrics["relift/sft_updates"] = 0.0
    if count >= n:
        batch, buffer, count = pop_front(buffer, count, n)
        params, opt_state, sft_metrics = programs.relift_step(params, opt_state, *map(jnp.asarray, batch))
        metrics.update({k: float(v) for k, v in jax.device_get(sft_metrics).items()})
        metrics["relift/sft_updates"] = 1.0
    metrics["relift/buffer"] = float(count)
    relift = relift.replace(tokens=jnp.asarray(buffer[0]), attention=jnp.asarray(buffer[1]),
                            completion_mask=jnp.asarray(buffer[2]), count=jnp.asarray(count, jnp.int32),
                            opt_state=opt_state)
    return state.replace(params=params).with_extras(relift=relift)


def hardest_questions(config, setup, rows, group_ids: np.ndarray):
    """ReLIFT's new buffer rows: one per group all of whose fresh rollouts fail (main reward <= 0; ReLIFT's
    "solve none"), as an SFT example of its prompt (left-padded to `relift.prompt_tokens`) and its reference
    solution + eos (right-padded to `sampling.max_new_tokens`, cut beyond). -> ((tokens [k, W+T] int32, attention
    [k, W+T] int32, completion mask [k, T] float32), metrics relift/solve_none (share of groups) and relift/too_long
    (hardest prompts longer than W, not buffered)), or (None, {}) when ReLIFT is off."""
    if not config.relift.batch_size:
        return None, {}
    width, t = config.relift.prompt_tokens, config.sampling.max_new_tokens
    fresh = rows.fresh & ~rows.off_policy
    groups = np.unique(group_ids)
    hardest = [g for g in groups if fresh[group_ids == g].any() and (rows.main[(group_ids == g) & fresh] <= 0).all()]
    prompt_tokens = np.full((0, width), setup.tokenizer.pad_id, np.int32)
    prompt_mask, solutions, too_long = np.zeros((0, width), bool), [], 0
    for g in hardest:
        row = int(np.flatnonzero(group_ids == g)[0])
        prompt = rows.prompt_tokens[row][rows.prompt_mask[row]]
        if prompt.size > width or rows.solutions is None:
            too_long += int(prompt.size > width)
            continue
        padded = np.full((1, width), setup.tokenizer.pad_id, np.int32)
        padded[0, width - prompt.size:] = prompt
        prompt_tokens = np.concatenate([prompt_tokens, padded])
        prompt_mask = np.concatenate([prompt_mask, np.arange(width)[None, :] >= width - prompt.size])
        solutions.append(str(rows.solutions[row]))
    metrics = {"relift/solve_none": len(hardest) / max(len(groups), 1), "relift/too_long": float(too_long)}
    completion_tokens, completion_mask = batches.encode_completions(setup.tokenizer, solutions, t, truncate=True)
    tokens = np.concatenate([prompt_tokens, completion_tokens], axis=1).astype(np.int32)
    attention = np.concatenate([prompt_mask, completion_mask > 0], axis=1).astype(np.int32)
    return (tokens, attention, completion_mask.astype(np.float32)), metrics
