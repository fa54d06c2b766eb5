"""Supervised warm start: maximise log π(solution | prompt) on the task's reference solutions.

loss = −token-mean over the batch of log π(y_t | x, y_<t), the completion tokens including eos.
"""

from __future__ import annotations

import functools
import os
import time

import flax
import jax
import jax.numpy as jnp
import optax

from rl4llm.models import lora
from rl4llm.train import checkpointing
from rl4llm.train import logprobs as logprobs_lib
from rl4llm.train import loop
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import optim
from rl4llm.train import preemption
from rl4llm.train import progress as progress_lib
from rl4llm.train import setup as setup_lib


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
        params, opt_state = optim.apply_policy_update(optimizer, state.params, state.opt_state, grads)
        return SFTState(params=params, opt_state=opt_state), {"loss": loss, "grad_norm": optax.tree.norm(grads)}

    if layout is not None:
        return layout.jit_step(step, state, batch_argnums=(1, 2, 3))
    return jax.jit(step, donate_argnums=0)


def run_sft(config, setup, source, key, writer: metrics_lib.MetricsWriter, workdir: str,
            stop: preemption.StopSignal):
    """Warm-start stage; returns (params, eval metrics of the warm-started policy). When `stop` asks for it (a
    signal), checkpoints the step just done and raises `preemption.Preempted`; after `config.max_skipped_updates`
    non-finite updates in a row, checkpoints the last good state and raises `optim.NonFiniteError`. The rollout `source`
    (`train.single_turn` or `train.agent`) gives the batches, `source.sft_batch(config, setup, step)` -> (tokens
    [N, P+T], attention [N, P+T], completion mask [N, T]), and the evaluation, `source.evaluate(config, setup,
    params, key)`."""
    cfg = config.sft
    optimizer = optim.make_optimizer(
        cfg.learning_rate, cfg.warmup_steps, cfg.weight_decay, cfg.grad_clip,
        schedule=cfg.lr_schedule, total_steps=cfg.steps,
    )
    params = setup_lib.initial_params(config, setup.model_cfg, jax.random.fold_in(key, 0))
    state = setup_lib.placed(setup, SFTState(params=params, opt_state=optimizer.init(lora.trainable(params))))
    ckpt = checkpointing.Checkpointer(
        os.path.join(workdir, "checkpoints", "sft"), max_to_keep=config.checkpoint.max_to_keep
    )
    restored = ckpt.restore_latest(state)
    start = 0
    if restored is not None:
        state, start = restored.state, restored.step
        if "eval" in restored.meta:
            print(f"SFT stage already complete in {workdir} (step {start}); reusing it.", flush=True)
            return state.params, restored.meta["eval"]
        print(f"resuming SFT from step {start}", flush=True)
    step_fn = make_sft_step(setup.model_cfg, optimizer, config.rl.logprob_chunk_size, setup.layout, state)
    t0 = time.time()
    skips = optim.SkipMonitor("sft", state.opt_state, config.max_skipped_updates)
    progress = progress_lib.StageProgress("sft", cfg.steps, start)
    for step in range(start + 1, cfg.steps + 1):
        state, step_metrics = step_fn(state, *source.sft_batch(config, setup, step - 1))
        give_up = skips.after_step(step, state.opt_state, step_metrics)
        progress.advance(step)
        if loop.due(config.log_every, step, cfg.steps):
            writer.write("sft", step, {**step_metrics, "step_s": (time.time() - t0) / (step - start)},
                         progress=progress)
        stopping = stop.should_stop(step) and step < cfg.steps  # at the last: the evaluation, then RL's first step
        if (step % config.checkpoint.every == 0 and step < cfg.steps) or stopping or give_up:
            ckpt.save(step, state, {"data_step": step})
        if stopping or give_up:
            progress.close()
            ckpt.close()
            raise skips.error(step) if give_up else preemption.Preempted("sft", step, ckpt.directory)
    progress.close()
    eval_metrics = source.evaluate(config, setup, state.params, jax.random.fold_in(key, 2))
    writer.write("sft", cfg.steps, eval_metrics)
    ckpt.save(cfg.steps, state, {"data_step": cfg.steps, "eval": eval_metrics})
    ckpt.close()
    return state.params, eval_metrics
