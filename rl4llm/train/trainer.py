"""The main job: tokenizer, model, SFT warm start, RL (GRPO by default), evaluation, checkpoints.

`run(config, workdir)` is what `experiments/train.py` calls. An RL step (`rl_step`) is `collect_rollouts`
(the learner's inputs, read-only on the state) then `learn_on_rollouts` (the updates): rollout and score,
an optional forward pass of the rollout policy (old log-probs, entropies for the forking-token mask,
Lp-Reg proxy log-probs, KL in the reward), advantages by registry name (with ReMax's greedy baseline
rollout when needed; PPO: the critic's values of the rollout, `train.critic`; PRIME: the implicit PRM's
dense rewards and its online update, `train.prime`), the learner (and critic) updates, then the adaptive
KL / entropy controllers and the periodic reference reset. Both stages checkpoint with Orbax under
`<workdir>/checkpoints/{sft,rl}`; running again with the same workdir resumes from the newest
readable checkpoint and continues exactly as the uninterrupted run would (every random draw of RL
step s comes from `fold_in(key, s)` and the data of step s is a pure function of s).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from rl4llm import models
from rl4llm import rewards as rewards_lib
from rl4llm import sampling
from rl4llm.models import lora
from rl4llm.parallel import distributed
from rl4llm.parallel import layout as layout_lib
from rl4llm.data import selection as selection_lib
from rl4llm.data import tasks as tasks_lib
from rl4llm.rewards import combine as combine_lib
from rl4llm.rewards import pipeline as pipeline_lib
from rl4llm.rl import advantages as advantages_lib
from rl4llm.rl import aggregation
from rl4llm.rl import entropy as entropy_lib
from rl4llm.rl import kl as kl_lib
from rl4llm.rl import prime as prime_rewards
from rl4llm.rl import registry
from rl4llm.tokenizers import sentencepiece_tokenizer
from rl4llm.train import async_rollouts as async_lib
from rl4llm.train import batches
from rl4llm.train import checkpointing
from rl4llm.train import config_validation
from rl4llm.train import critic as critic_lib
from rl4llm.train import epo as epo_lib
from rl4llm.train import evaluate as evaluate_lib
from rl4llm.train import learner as learner_lib
from rl4llm.train import logprobs as logprobs_lib
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import prime as prime_lib
from rl4llm.train import prompt_selection
from rl4llm.train import sft as sft_lib

# RL draws its problems from step RL_DATA_OFFSET + s of the training stream, so SFT (steps 0..) and
# RL see different problems; the held-out split is disjoint from both.
RL_DATA_OFFSET = 1 << 20


@dataclasses.dataclass(frozen=True)
class Setup:
    """What both stages share, built once from the config."""

    task: tasks_lib.Task
    tokenizer: sentencepiece_tokenizer.Tokenizer
    model_cfg: models.ModelConfig
    rollout_cfg: sampling.SamplingConfig
    eval_examples: tuple
    eval_spec: evaluate_lib.EvalSpec
    score_fn: Callable[[str, str], float]  # main reward of (completion text, reference answer): evaluation
    rewards: pipeline_lib.RewardPipeline  # a step's batch rewards (pool, extra components, shaping, pseudo-labels)
    selector: prompt_selection.Selector | None = None  # the RL step's prompts and rollouts (config.selection)
    layout: layout_lib.Layout | None = None  # the meshes' placement of arrays (`parallel`); None on one device


def build_setup(config, workdir: str) -> Setup:
    """Task, tokenizer (trained once and cached in the workdir), model config, sampler configs."""
    task = tasks_lib.build(config.task, config.seed)
    tokenizer = model_tokenizer(config, workdir, task)
    model_cfg = model_config(config, tokenizer.vocab_size)
    rollout_cfg = sampling.SamplingConfig(
        max_new_tokens=config.sampling.max_new_tokens,
        temperature=config.sampling.temperature,
        top_k=config.sampling.top_k,
        top_p=config.sampling.top_p,
        stop_token_ids=tokenizer.stop_token_ids,
        pad_id=tokenizer.pad_id,
    )
    eval_spec = evaluate_lib.EvalSpec(
        greedy=dataclasses.replace(rollout_cfg, temperature=0.0, top_k=0, top_p=1.0),
        sampled=rollout_cfg,
        pass_n=config.eval.pass_n,
        pass_k=tuple(config.eval.pass_k),
        prompt_bucket=config.sampling.prompt_bucket,
        batch_size=config.rl.num_prompts * config.rl.num_generations,
        extract_answer=rewards_lib.EXTRACTORS.get(config.task.reward),
    )
    eval_examples = tuple(task.source.test_examples(config.eval.num_examples))
    reward_pipeline = pipeline_lib.RewardPipeline(reward_spec(config))
    selector = prompt_selection.Selector(
        config, task, data_offset=RL_DATA_OFFSET, pad_id=tokenizer.pad_id,
        encode=lambda prompts: batches.encode_prompts(tokenizer, prompts, config.sampling.prompt_bucket),
    )
    return Setup(
        task, tokenizer, model_cfg, rollout_cfg, eval_examples, eval_spec, reward_pipeline.score_one, reward_pipeline,
        selector,
    )


# Training lines of the char tokenizer of a non-arithmetic task.
_TOKENIZER_CORPUS_LINES = 2000


def model_tokenizer(config, workdir: str, task: tasks_lib.Task):
    """The HF checkpoint's tokenizer (tokenizer.json, chat template, stop ids) when config.model.hf_checkpoint
    is set, else the task's char tokenizer (`task_tokenizer`)."""
    if config.model.hf_checkpoint:
        from rl4llm.tokenizers import hf_tokenizer  # the `hf` extra

        return hf_tokenizer.HFTokenizer.load(config.model.hf_checkpoint)
    return task_tokenizer(workdir, task)


def model_config(config, vocab_size: int) -> models.ModelConfig:
    """The policy's ModelConfig: the HF checkpoint's config.json, or the preset with the tokenizer's
    vocabulary; with config.model's precision (dtype, param_dtype), remat and LoRA (lora.rank/alpha/targets)."""
    m = config.model
    fields = dict(
        dtype=m.dtype,
        param_dtype=m.param_dtype,
        remat=m.remat,
        lora_rank=m.lora.rank,
        lora_alpha=m.lora.alpha,
        lora_targets=tuple(m.lora.targets) if m.lora.rank else (),
    )
    if m.hf_checkpoint:
        from rl4llm.models import hf_checkpoint  # the `hf` extra

        return hf_checkpoint.config_from_hf(hf_checkpoint.read_hf_config(m.hf_checkpoint), **fields)
    return models.get_config(m.preset, vocab_size=vocab_size, **fields)


def initial_params(config, model_cfg: models.ModelConfig, key):
    """Warm-start params: the HF checkpoint's weights (config.model.hf_checkpoint, streamed and cast to
    param_dtype) or a random init; with LoRA, fresh adapters on top (B = 0: the same function)."""
    base_cfg = lora.base_config(model_cfg)
    if config.model.hf_checkpoint:
        from rl4llm.models import hf_checkpoint  # the `hf` extra

        _, params = hf_checkpoint.load_hf_checkpoint(
            config.model.hf_checkpoint, dtype=model_cfg.dtype, param_dtype=model_cfg.param_dtype
        )
    else:
        params = models.init_params(base_cfg, key)
    return lora.add_adapters(model_cfg, params, jax.random.fold_in(key, 1)) if model_cfg.lora_rank else params


def export_hf(config, setup: Setup, params, out_dir: str) -> None:
    """Writes the policy as a HF model directory (LoRA merged into the weights; the imported checkpoint's
    config.json fields and tokenizer files carried over when there is one), loadable by transformers / vLLM."""
    from rl4llm.models import hf_checkpoint  # the `hf` extra

    cfg, merged = lora.merge(setup.model_cfg, params)
    source = config.model.hf_checkpoint or None
    hf_checkpoint.save_hf_checkpoint(
        cfg, merged, out_dir,
        base_config=hf_checkpoint.read_hf_config(source) if source else None,
        copy_files_from=source,
    )
    print(f"exported the policy (Hugging Face format) to {out_dir}", flush=True)


def task_tokenizer(workdir: str, task: tasks_lib.Task) -> sentencepiece_tokenizer.Tokenizer:
    """The task's char tokenizer, cached in the workdir. Arithmetic: `<workdir>/tokenizer/arith.model`
    (`sentencepiece_tokenizer.get_or_train_task_tokenizer`); any other task: `<workdir>/tokenizer/<task>.model`,
    trained on `task.source.corpus(...)`, whose first line holds every character the task uses."""
    if task.name == "arithmetic":
        return sentencepiece_tokenizer.get_or_train_task_tokenizer(workdir, task.source.what)
    path = os.path.join(workdir, "tokenizer", f"{task.name}.model")
    if not os.path.exists(path):
        sentencepiece_tokenizer.train_tokenizer(task.source.corpus(_TOKENIZER_CORPUS_LINES), path[: -len(".model")])
    tokenizer = sentencepiece_tokenizer.Tokenizer.load(path)
    missing = tokenizer.unknown_chars(task.source.corpus(0)[0])
    if missing:
        raise ValueError(f"cached tokenizer {path} maps {sorted(missing)} to unk; delete it or use a fresh workdir.")
    return tokenizer


def reward_spec(config) -> pipeline_lib.RewardSpec:
    """The reward pipeline of `config.task` (validated fields)."""
    task = config.task
    return pipeline_lib.RewardSpec(
        reward=task.reward,
        extra_weights=tuple(combine_lib.parse_weights(task.extra_rewards).items()),
        extra_mode=task.extra_rewards_mode,
        length_shaping=task.length_shaping,
        length_kwargs=tuple(sorted(config_validation.set_kwargs(task.length_shaping_kwargs).items())),
        pseudo_labels=task.pseudo_labels,
        num_workers=task.reward_workers,
        timeout_s=task.reward_timeout_s,
    )


def _evaluate(setup: Setup, params, key) -> dict:
    params = setup.layout.sampler_params(params) if setup.layout else params
    return evaluate_lib.evaluate(
        setup.model_cfg, params, setup.tokenizer, setup.eval_examples, key, setup.eval_spec, setup.score_fn
    )


def _generate(setup: Setup, params, prompt_tokens, prompt_mask, key, sampling_cfg) -> sampling.Rollout:
    """`sampling.generate`, on the sampler mesh when the run has a mesh (`Layout.generate`)."""
    if setup.layout is None:
        return sampling.generate(setup.model_cfg, params, prompt_tokens, prompt_mask, key, sampling_cfg)
    return setup.layout.generate(params, prompt_tokens, prompt_mask, key, sampling_cfg)


def _placed(setup: Setup, state):
    """A learner state on the learner mesh (`Layout.shard_state`), or as it is without a mesh."""
    return setup.layout.shard_state(state) if setup.layout else state


def _should(every: int, step: int, last: int) -> bool:
    return step % every == 0 or step == last


# ----------------------------------------------------------------------------------------- SFT


def sft_batch(config, setup: Setup, step: int):
    """Tokens [N, P+T], attention mask [N, P+T] and completion mask [N, T] of SFT step `step`."""
    examples = setup.task.source.train_examples(step, config.sft.batch_size)
    prompt_tokens, prompt_mask = batches.encode_prompts(
        setup.tokenizer, [e.prompt for e in examples], config.sampling.prompt_bucket
    )
    completion_tokens, completion_mask = batches.encode_completions(
        setup.tokenizer, [e.solution for e in examples], config.sampling.max_new_tokens
    )
    tokens, attention_mask = batches.join_sequences(prompt_tokens, prompt_mask, completion_tokens, completion_mask)
    return tokens, attention_mask, jnp.asarray(completion_mask)


def run_sft(config, setup: Setup, key, writer: metrics_lib.MetricsWriter, workdir: str, *,
            batch_fn: Callable = None, evaluate_fn: Callable = None):
    """Warm-start stage; returns (params, eval metrics of the warm-started policy).

    `batch_fn(config, setup, step)` -> (tokens [N, P+T], attention [N, P+T], completion mask [N, T]) and
    `evaluate_fn(setup, params, key)` -> metrics default to the single-turn task's (`sft_batch`, `_evaluate`); the
    agent job (`train.agent_trainer`) passes its own.
    """
    batch_fn, evaluate_fn = batch_fn or sft_batch, evaluate_fn or _evaluate
    cfg = config.sft
    optimizer = learner_lib.make_optimizer(
        cfg.learning_rate, cfg.warmup_steps, cfg.weight_decay, cfg.grad_clip,
        schedule=cfg.lr_schedule, total_steps=cfg.steps,
    )
    params = initial_params(config, setup.model_cfg, jax.random.fold_in(key, 0))
    state = _placed(setup, sft_lib.SFTState(params=params, opt_state=optimizer.init(lora.trainable(params))))
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
    step_fn = sft_lib.make_sft_step(setup.model_cfg, optimizer, config.rl.logprob_chunk_size, setup.layout, state)
    t0 = time.time()
    for step in range(start + 1, cfg.steps + 1):
        state, step_metrics = step_fn(state, *batch_fn(config, setup, step - 1))
        if _should(config.log_every, step, cfg.steps):
            writer.write("sft", step, {**step_metrics, "step_s": (time.time() - t0) / (step - start)})
        if step % config.checkpoint.every == 0 and step < cfg.steps:
            ckpt.save(step, state, {"data_step": step})
    eval_metrics = evaluate_fn(setup, state.params, jax.random.fold_in(key, 2))
    writer.write("sft", cfg.steps, eval_metrics)
    ckpt.save(cfg.steps, state, {"data_step": cfg.steps, "eval": eval_metrics})
    ckpt.close()
    return state.params, eval_metrics


# ------------------------------------------------------------------------------------------ RL


# Streams of fold_in(step_key, ·) within one RL step: minibatch shuffles use 1 + epoch, learner updates
# 1000 + update index, and the ReMax greedy rollout (which draws nothing, but gets its own key) this one.
_GREEDY_BASELINE_STREAM = 999


def several_updates_per_step(config) -> bool:
    """More than one optimizer update per rollout batch: PPO "old" log-probs need their own pass."""
    return config.rl.ppo_epochs * config.rl.num_minibatches > 1


def learner_config(config) -> learner_lib.LearnerConfig:
    rl = config.rl
    return learner_lib.LearnerConfig(
        loss=rl.loss,
        loss_kwargs=tuple(sorted(config_validation.set_kwargs(rl.loss_kwargs).items())),
        agg_mode=rl.agg_mode,
        kl_coef=0.0 if rl.kl_in_reward else rl.kl_coef,
        kl_kind=rl.kl_kind,
        entropy_coef=rl.entropy_coef,
        temperature=config.sampling.temperature,
        micro_batch_size=rl.micro_batch_size,
        logprob_chunk_size=rl.logprob_chunk_size,
        logprob_vocab_chunk_size=rl.logprob_vocab_chunk_size,
        use_old_logp=several_updates_per_step(config),
        tis_cap=rl.tis_cap,
        tis_level=rl.tis_level,
        epo=epo_lib.learner_settings(config),
        agg_norm_length=config_validation.agg_norm_length(config),
    )


@functools.partial(jax.jit, static_argnames=("name", "num_groups", "kwargs"))
def _advantages(scores, group_ids, mask, *, name: str, num_groups: int, kwargs: tuple, **inputs):
    """Advantages [N, T] (zero outside the mask) from the registered estimator `name`, and the value
    targets (returns [N, T] of estimators in `registry.RETURNS_VALUE_TARGETS`, else None).

    `inputs`: optional standard inputs (rewards [N, T], values [N, T], baseline_scores [N], reward_components
    [N, K], process_rewards [N, T], seq_metric [N]) for estimators that declare them.
    """
    out = registry.get_advantage(name)(scores, group_ids, mask, num_groups=num_groups, **inputs, **dict(kwargs))
    adv, returns = out if name in registry.RETURNS_VALUE_TARGETS else (out, None)
    adv = adv[:, None] if adv.ndim == 1 else adv
    return jnp.broadcast_to(adv, mask.shape) * mask, returns


def advantage_kwargs(config) -> dict:
    """The estimator's hyper-parameters: those set in `config.rl.advantage_kwargs`, and for an estimator with
    per-component `weights` (GDPO) that gets the reward components, w = (1, w_1, ..., w_{K-1}) of the main and
    extra rewards of `config.task.extra_rewards` (the weights of the combined reward)."""
    kwargs = config_validation.set_kwargs(config.rl.advantage_kwargs)
    estimator = inspect.signature(registry.ADVANTAGES[config.rl.advantage])
    if config_validation.uses_reward_components(config) and "weights" in estimator.parameters:
        kwargs["weights"] = (1.0, *combine_lib.parse_weights(config.task.extra_rewards).values())
    return kwargs


def _step_prompts(config, setup: Setup, step: int):
    """The RL step's uniform examples (the task's stream, or the curriculum's stage) and their left-padded prompt
    tokens / mask [B, P] (a pure function of step)."""
    examples = setup.selector.stream_examples(step, config.rl.num_prompts)
    prompt_tokens, prompt_mask = batches.encode_prompts(
        setup.tokenizer, [e.prompt for e in examples], config.sampling.prompt_bucket
    )
    return examples, prompt_tokens, prompt_mask


def _score(config, setup: Setup, rollout, answers, group_ids: np.ndarray, prefixes=None):
    """Host rewards of a rollout (one device->host transfer; the batch scored in one pipeline call).
    `prefixes` [N]: text scored before each completion (a hint the prompt already holds), or None.

    Returns (rewards [N], main reward [N], reward components [N, K], completion mask [N, T], finished [N],
    reward metrics).
    """
    completion_tokens, completion_mask, finished = jax.device_get(
        (rollout.completion_tokens, rollout.completion_mask, rollout.finished)
    )
    texts = batches.decode_completions(setup.tokenizer, completion_tokens, completion_mask)
    if prefixes is not None:
        texts = [prefix + text for prefix, text in zip(prefixes, texts)]
    scores, main, components, metrics = setup.rewards.score(
        texts, answers, completion_mask.sum(-1), group_ids, max_length=config.sampling.max_new_tokens
    )
    return scores, main, components, completion_mask, finished, metrics


def greedy_baseline_scores(config, setup: Setup, params, step: int, key) -> np.ndarray:
    """ReMax baseline (Li et al. 2024): reward of the greedy completion of each prompt, repeated over its group [N].

    One extra greedy rollout of the step's B prompts (verl: `do_sample=False` generation in the trainer).
    """
    examples, prompt_tokens, prompt_mask = _step_prompts(config, setup, step)
    rollout = _generate(setup, params, prompt_tokens, prompt_mask, key, setup.eval_spec.greedy)
    scores = _score(config, setup, rollout, [e.answer for e in examples], np.arange(len(examples)))[0]
    return np.repeat(scores, config.rl.num_generations)


def generate_rows(config, setup: Setup, params, prompts, answers, counts, key, prefixes):
    """`counts[i]` completions of each prompt `prompts[i]` (in order), scored against `answers[i]` with
    `prefixes[i]` scored before each completion. -> (`prompt_selection.Rows` [sum(counts)], reward metrics)."""
    counts = np.asarray(counts)
    prompt_tokens, prompt_mask = batches.encode_prompts(setup.tokenizer, prompts, config.sampling.prompt_bucket)
    prompt_tokens = np.repeat(prompt_tokens, counts, axis=0)
    prompt_mask = np.repeat(prompt_mask, counts, axis=0)
    rollout = _generate(setup, params, prompt_tokens, prompt_mask, key, setup.rollout_cfg)
    group_ids = np.repeat(np.arange(len(prompts)), counts)
    scores, main, components, completion_mask, finished, reward_metrics = _score(
        config, setup, rollout, np.repeat(answers, counts).tolist(), group_ids,
        np.repeat(prefixes, counts).tolist() if any(prefixes) else None,
    )
    completion_tokens, logprobs = jax.device_get((rollout.completion_tokens, rollout.logprobs))
    rows = prompt_selection.Rows(
        prompt_tokens=prompt_tokens, prompt_mask=prompt_mask, completion_tokens=completion_tokens,
        completion_mask=completion_mask, logprobs=logprobs, finished=finished, scores=scores, main=main,
        components=components, hint_chars=np.zeros(len(scores), np.int32), fresh=np.ones(len(scores), bool),
    )
    return rows, reward_metrics


def rollout_and_score(config, setup: Setup, params, step: int, key, selection_state=None):
    """The step's rollouts under `config.selection` (`prompt_selection.Selector.collect`: uniform prompts with G
    completions each by default), scored on the host.

    Returns (rollout, scores [N], reward components [N, K], group ids [N], host metrics, new selection state).
    """
    generate = functools.partial(generate_rows, config, setup, params)
    collected, selection_state = setup.selector.collect(selection_state, step, key, generate)
    rows = collected.rows
    rollout = sampling.Rollout(
        prompt_tokens=jnp.asarray(rows.prompt_tokens),
        prompt_mask=jnp.asarray(rows.prompt_mask),
        completion_tokens=jnp.asarray(rows.completion_tokens),
        completion_mask=jnp.asarray(rows.completion_mask),
        logprobs=jnp.asarray(rows.logprobs),
        lengths=jnp.asarray(rows.completion_mask.sum(-1), jnp.int32),
        finished=jnp.asarray(rows.finished),
        num_decode_steps=jnp.asarray(config.sampling.max_new_tokens - 1, jnp.int32),  # an upper bound
    )
    return rollout, rows.scores, rows.components, collected.group_ids, collected.metrics, selection_state


@dataclasses.dataclass(frozen=True)
class RLPrograms:
    """The compiled pieces of the RL stage, built once per run."""

    optimizer: Any
    learner_step: Callable  # (state, batch, key) -> (state, metrics), state donated
    # (params, tokens, attention_mask) -> (logp, entropy[, proxy_logp]) [N, T] of the completions, or None
    # when no step statistic of the rollout policy is needed (see `needs_behaviour_pass`).
    behaviour_fn: Callable | None
    # PPO's critic (rl.advantage="gae"), else None: (critic params, policy params, tokens, attention_mask) ->
    # values [N, T]; critic_step (state, critic_batch) -> (state, metrics) updates the critic alone (warm-up,
    # separate critic); shared_trunk_step (state, batch, critic_batch, key) -> (state, metrics) updates both.
    values_fn: Callable | None = None
    critic_step: Callable | None = None
    shared_trunk_step: Callable | None = None
    # PRIME's implicit PRM (rl.advantage="prime"), else None: (prm state, tokens, attention_mask) ->
    # (log π_φ, log π_ref) [N, T]; prm_step (state, prm_batch) -> (state, metrics).
    prm_logprobs_fn: Callable | None = None
    prm_step: Callable | None = None


def needs_behaviour_pass(config) -> bool:
    """Whether an RL step needs a forward pass of the rollout policy before learning: old log-probs
    (several updates per step), entropies (forking-token mask), Lp-Reg proxy log-probs, or the
    log-probs of the KL-in-reward penalty, or the responses' mean token entropies (CANON's `seq_metric`)."""
    rl = config.rl
    return (
        several_updates_per_step(config)
        or rl.token_selection == "high_entropy"
        or "proxy_logp" in registry.policy_loss_inputs(rl.loss)
        or rl.kl_in_reward
        or "seq_metric" in registry.advantage_inputs(rl.advantage)
    )


def update_controllers(config, state, *, current_kl, entropy, num_sequences: int):
    """Adaptive coefficients after an RL step (no-op for fixed ones).

    KL (Ziegler et al. 2019, `rl.kl.adaptive_kl_coef`): β ← β·(1 + clip(KL/target − 1, ±0.2)·N/horizon).
    Entropy (Skywork-OR1, `rl.entropy.adaptive_entropy_coef`): c ← clip(c ± δ, 0, 1), up while the mean
    token entropy is below the target. `current_kl` / `entropy` are the step's measurements.
    """
    rl = config.rl
    if state.kl_coef is not None:
        kl_coef = kl_lib.adaptive_kl_coef(
            state.kl_coef, current_kl, num_sequences, target=rl.kl_target, horizon=rl.kl_horizon
        )
        state = state.replace(kl_coef=jnp.asarray(kl_coef, jnp.float32))
    if state.entropy_coef is not None:
        entropy_coef = entropy_lib.adaptive_entropy_coef(
            state.entropy_coef, entropy, target=rl.entropy_target, delta=rl.entropy_coef_delta
        )
        state = state.replace(entropy_coef=jnp.asarray(entropy_coef, jnp.float32))
    return state


def maybe_reset_reference(config, state, optimizer, steps_done: int):
    """ProRL reference reset (Liu et al. 2025, "ProRL"): after every `rl.ref_reset_every`-th RL step the
    reference policy becomes a copy of the current policy and the optimizer state is re-initialised.

    Returns (state, whether it reset)."""
    every = config.rl.ref_reset_every
    if not every or steps_done % every:
        return state, False
    params = state.params
    return state.replace(ref_params=jax.tree.map(jnp.copy, params), opt_state=optimizer.init(params)), True


@dataclasses.dataclass(frozen=True)
class RolloutBatch:
    """The learner's inputs of one RL step (`collect_rollouts`), consumed by `learn_on_rollouts`."""

    step: int  # the RL step (0-based) whose data this is
    params_version: int  # RL steps done by the params that generated it (= step when collection is synchronous)
    batch: learner_lib.LearnerBatch  # [N, ...] the whole step's batch
    critic_batch: critic_lib.CriticBatch | None  # PPO's value targets, None without a critic
    prm_batch: prime_lib.PRMBatch | None  # PRIME: the implicit PRM's update on the outcome labels, else None
    current_kl: Any  # KL-in-reward's measured KL (the adaptive controller's input), None otherwise
    host_metrics: dict  # rewards, lengths, value metrics, ... of the rollout
    t_gen: float  # seconds of generation and host scoring
    selection: Any = None  # the selection state after choosing this step's prompts (config.selection), or None


def collect_rollouts(config, setup: Setup, programs: RLPrograms, state, step: int, *,
                     params_version: int | None = None) -> RolloutBatch:
    """The learner's inputs of RL step `step`: prompts (`_step_prompts`), G completions each, host rewards,
    the rollout policy's forward passes (old log-probs, entropies, proxy log-probs, KL in the reward), the
    critic's values / the PRM's dense rewards, and advantages. Reads `state` (params, reference, critic,
    PRM, adaptive KL coefficient, key) and never updates it. `params_version`: RL steps done by
    `state.params` (default `step`: synchronous collection)."""
    rl = config.rl
    step_key = jax.random.fold_in(jax.random.wrap_key_data(state.key), step)
    t0 = time.time()
    rollout, scores, components, group_ids, host_metrics, selection = rollout_and_score(
        config, setup, state.params, step, step_key, state.selection
    )
    advantage_inputs = registry.advantage_inputs(rl.advantage)
    extra_inputs = {}
    if config_validation.uses_reward_components(config):
        extra_inputs["reward_components"] = jnp.asarray(components)
    if "baseline_scores" in advantage_inputs:
        baseline = greedy_baseline_scores(
            config, setup, state.params, step, jax.random.fold_in(step_key, _GREEDY_BASELINE_STREAM)
        )
        extra_inputs["baseline_scores"] = jnp.asarray(baseline)
        host_metrics["greedy_baseline_reward"] = baseline.mean()
    t_gen = time.time() - t0
    mask = rollout.completion_mask.astype(jnp.float32)
    group_ids = jnp.asarray(group_ids)
    tokens, attention_mask = batches.join_sequences(
        rollout.prompt_tokens, rollout.prompt_mask, rollout.completion_tokens, rollout.completion_mask
    )
    behaviour = programs.behaviour_fn(state.params, tokens, attention_mask) if programs.behaviour_fn else None
    adv_scores = jnp.asarray(scores)
    current_kl = None
    if rl.kl_in_reward:
        ref_logp = programs.behaviour_fn(learner_lib.reference_params(state), tokens, attention_mask)[0]
        kl_coef = rl.kl_coef if state.kl_coef is None else state.kl_coef
        rewards, current_kl = kl_lib.kl_in_reward(
            registry.last_token_rewards(adv_scores, mask), behaviour[0], ref_logp, mask, coef=kl_coef, kind=rl.kl_kind
        )
        adv_scores = jnp.sum(rewards, axis=-1)  # verl: outcome estimators use Σ_t token rewards
        extra_inputs["rewards"] = rewards
        host_metrics["kl"] = current_kl
    if "seq_metric" in advantage_inputs:  # CANON: each response's mean token entropy under the rollout policy
        extra_inputs["seq_metric"] = aggregation.masked_mean(behaviour[1], mask, axis=-1)
    if programs.values_fn is not None:  # PPO: the rollout's values, once per step
        extra_inputs["values"] = programs.values_fn(state.critic.params, state.params, tokens, attention_mask)
    prm_batch = None
    if programs.prm_step is not None:  # PRIME: dense rewards from the PRM (its update is in learn_on_rollouts)
        prm_logp, ref_logp = programs.prm_logprobs_fn(state.prm, tokens, attention_mask)
        extra_inputs["process_rewards"] = prime_rewards.implicit_process_rewards(
            prm_logp, ref_logp, mask, beta=config.prime.beta
        )
        # PRIME's mechanism acting: the dense rewards are non-zero once the PRM has moved from its reference
        host_metrics["prime/process_reward_abs"] = jnp.sum(jnp.abs(extra_inputs["process_rewards"]) * mask) / jnp.maximum(
            jnp.sum(mask), 1.0)
        prm_batch = prime_lib.PRMBatch(tokens=tokens, attention_mask=attention_mask, completion_mask=mask,
                                       ref_logp=ref_logp, labels=jnp.clip(jnp.asarray(scores, jnp.float32), 0.0, 1.0))
    advantages, returns = _advantages(
        adv_scores,
        group_ids,
        mask,
        name=rl.advantage,
        num_groups=rl.num_prompts,
        kwargs=tuple(sorted(advantage_kwargs(config).items())),
        **{k: v for k, v in extra_inputs.items() if k in advantage_inputs},
    )
    # rows that carry a learning signal (a non-zero advantage on a trained token): 1 − the share of the batch that
    # all-equal groups (or masked rows) waste; generated rollouts / useful rows = samples per useful gradient
    host_metrics["useful_frac"] = jnp.mean(jnp.any((advantages != 0) & (mask > 0), axis=-1))
    loss_inputs = registry.policy_loss_inputs(rl.loss)
    batch = learner_lib.LearnerBatch(
        tokens=tokens,
        attention_mask=attention_mask,
        completion_mask=mask,
        advantages=advantages,
        old_logp=behaviour[0] if several_updates_per_step(config) else rollout.logprobs,
        sampler_logp=rollout.logprobs,
        token_weights=(
            entropy_lib.forking_token_mask(behaviour[1], mask, rho=rl.token_selection_rho)
            if rl.token_selection == "high_entropy"
            else None
        ),
        proxy_logp=behaviour[2] if "proxy_logp" in loss_inputs else None,
        target_advantages=(
            advantages_lib.gbpo_targets(adv_scores, group_ids, num_groups=rl.num_prompts)
            if "target_advantages" in loss_inputs
            else None
        ),
    )
    critic_batch = None
    if returns is not None:
        critic_batch = critic_lib.CriticBatch(
            tokens=tokens, attention_mask=attention_mask, completion_mask=mask,
            old_values=extra_inputs["values"], returns=returns,
        )
        host_metrics.update(critic_lib.value_metrics(extra_inputs["values"], returns, mask))
    return RolloutBatch(
        step=step,
        params_version=step if params_version is None else params_version,
        batch=batch,
        critic_batch=critic_batch,
        prm_batch=prm_batch,
        current_kl=current_kl,
        host_metrics=host_metrics,
        t_gen=t_gen,
        selection=selection,
    )


def learn_on_rollouts(config, programs: RLPrograms, state, rollouts: RolloutBatch, step: int):
    """RL step `step`'s updates on its rollouts: PRIME's PRM update, `ppo_epochs x num_minibatches` learner
    (and critic) updates, then the adaptive controllers and the reference reset. -> (state, metrics).

    Rollouts generated by older params (`rl.async_rollouts`) must be within `rl.max_staleness` versions
    (else `async_rollouts.StaleRolloutsError`); with several updates their PPO "old" log-probs are recomputed
    under the params this step starts from (decoupled PPO, `async_rollouts` docstring).
    """
    rl = config.rl
    n = rl.num_prompts * rl.num_generations
    step_key = jax.random.fold_in(jax.random.wrap_key_data(state.key), step)
    host_metrics = dict(rollouts.host_metrics)
    staleness = async_lib.check_staleness(
        step, rollouts.step, rollouts.params_version, rl.max_staleness if rl.async_rollouts else 0
    )
    state = state.replace(selection=None)  # host-side selection state: not an input of the jitted updates
    if rollouts.prm_batch is not None:  # PRIME: the PRM's update on the outcome labels (touches state.prm only)
        state, prm_metrics = programs.prm_step(state, rollouts.prm_batch)
        host_metrics.update(prm_metrics)
    batch, critic_batch = rollouts.batch, rollouts.critic_batch
    if staleness and several_updates_per_step(config):  # decoupled PPO: old = π_prox, the params of this step
        batch = batch.replace(old_logp=programs.behaviour_fn(state.params, batch.tokens, batch.attention_mask)[0])
    actor_frozen = critic_batch is not None and step < config.critic.warmup_steps  # critic warm-up
    updates = []
    for epoch in range(rl.ppo_epochs):
        order = jax.random.permutation(jax.random.fold_in(step_key, 1 + epoch), n) if rl.num_minibatches > 1 else None
        shuffled = (batch, critic_batch) if order is None else jax.tree.map(lambda x: x[order], (batch, critic_batch))
        size = n // rl.num_minibatches
        for i in range(rl.num_minibatches):
            minibatch, critic_minibatch = jax.tree.map(lambda x: x[i * size : (i + 1) * size], shuffled)
            update_key = jax.random.fold_in(step_key, 1000 + len(updates))
            state, update_metrics = _update(config, programs, state, minibatch, critic_minibatch, update_key,
                                            actor_frozen=actor_frozen)
            updates.append(update_metrics)
    updates = jax.device_get(updates)
    metrics = {k: np.mean([u[k] for u in updates]) for k in updates[0]}
    if actor_frozen:  # critic warm-up: no actor update, so no controller update and no reference reset
        metrics["critic/warmup"] = 1.0
    else:
        state = _after_actor_updates(config, programs, state, step, metrics, updates[0], rollouts.current_kl)
    if rl.async_rollouts:
        metrics["async/staleness"] = float(staleness)
    metrics.update(host_metrics)
    return state.replace(selection=rollouts.selection), metrics


def _step_timing(rollouts: RolloutBatch, t_learn: float, t_step: float) -> dict:
    """Timing metrics of an RL step: generation + host scoring, the learner's updates, the whole step, and
    generated tokens per second of the whole step."""
    return {
        "time/gen_s": rollouts.t_gen,
        "time/learn_s": t_learn,
        "time/step_s": t_step,
        "tokens_per_s": rollouts.host_metrics["generated_tokens"] / t_step,
    }


def rl_step(config, setup: Setup, programs: RLPrograms, state, step: int):
    """One synchronous RL step: `collect_rollouts` with the current params, then `learn_on_rollouts`."""
    t0 = time.time()
    rollouts = collect_rollouts(config, setup, programs, state, step)
    t1 = time.time()
    state, metrics = learn_on_rollouts(config, programs, state, rollouts, step)
    t_step = time.time() - t0
    metrics.update(_step_timing(rollouts, t_step - (t1 - t0), t_step))
    return state, metrics


def async_rl_step(pipeline: async_lib.RolloutPipeline, config, setup: Setup, programs: RLPrograms, state,
                  step: int):
    """One RL step on the batch `pipeline` generated in the background (params at most `rl.max_staleness`
    steps old, `async_rollouts`): `learn_on_rollouts`, then the new params are published to the sampler (a
    copy, before the next update donates them). `time/wait_s`: how long the learner waited for the batch."""
    del setup  # the pipeline's collection holds it
    t0 = time.time()
    rollouts = pipeline.get(step)
    t_wait = time.time() - t0
    state, metrics = learn_on_rollouts(config, programs, state, rollouts, step)
    pipeline.publish(state, step + 1)
    t_step = time.time() - t0
    metrics.update(_step_timing(rollouts, t_step - t_wait, t_step))
    metrics["time/wait_s"] = t_wait
    return state, metrics


def rollout_pipeline(config, setup: Setup, programs: RLPrograms, state, start: int, end: int):
    """Background collection (`async_rollouts.RolloutPipeline`) of RL steps [start, end), each batch
    generated by params version `async_rollouts.generation_version` (flushed at `start` and at every
    checkpoint), with version `start` (`state`) published. Collection runs in step order in one thread, so
    the selection state (`config.selection`) is carried from each collected batch to the next (as in a
    synchronous run) rather than read from the older snapshot."""
    rl = config.rl
    version_of = functools.partial(
        async_lib.generation_version, start=start, max_staleness=rl.max_staleness, flush_every=config.checkpoint.every
    )
    selection = [state.selection]  # the selection state after the last collected batch

    def collect(snapshot, step: int, version: int) -> RolloutBatch:
        rollouts = collect_rollouts(config, setup, programs, snapshot.replace(selection=selection[0]), step,
                                    params_version=version)
        selection[0] = rollouts.selection
        return rollouts

    pipeline = async_lib.RolloutPipeline(collect, version_of, start, end, max_in_flight=rl.max_staleness + 1)
    pipeline.publish(state, start)
    return pipeline


def _update(config, programs: RLPrograms, state, minibatch, critic_minibatch, key, *, actor_frozen: bool):
    """One update on a minibatch: the actor (`learner_step`), or with a critic: the critic alone (warm-up),
    both in one step (shared trunk), or the critic then the actor (separate critic). -> (state, metrics)."""
    if critic_minibatch is None:
        return programs.learner_step(state, minibatch, key)
    if actor_frozen:
        return programs.critic_step(state, critic_minibatch)
    if config.critic.shared_trunk:
        return programs.shared_trunk_step(state, minibatch, critic_minibatch, key)
    state, critic_metrics = programs.critic_step(state, critic_minibatch)
    state, actor_metrics = programs.learner_step(state, minibatch, key)
    return state, {**actor_metrics, **critic_metrics}


def _after_actor_updates(config, programs: RLPrograms, state, step: int, metrics: dict, first: dict, current_kl):
    """Adaptive controllers and the periodic reference reset after a step's actor updates (adds to `metrics`)."""
    # The sampler/learner gap and the step's KL / entropy are measured before any update of this step.
    metrics["logp_gap_sampler_learner"] = first["logp_gap_sampler_learner"]
    # The learner carries adaptive coefficients through unchanged: these are the values this step used.
    coefs = {"kl_coef": state.kl_coef, "entropy_coef": state.entropy_coef}
    metrics.update({k: v for k, v in jax.device_get(coefs).items() if v is not None})
    state = update_controllers(
        config,
        state,
        current_kl=first.get("kl") if current_kl is None else current_kl,
        entropy=first["entropy"],
        num_sequences=config.rl.num_prompts * config.rl.num_generations,
    )
    state, reset = maybe_reset_reference(config, state, programs.optimizer, step + 1)
    if config.rl.ref_reset_every:
        metrics["ref_reset"] = float(reset)
    return state


def init_rl_state(config, init_params, optimizer, key, critic=None, prm=None) -> learner_lib.TrainState:
    """The RL stage's initial TrainState: reference copy when KL is on, adaptive coefficients when adapted,
    the critic's state (`critic_lib.init_critic_state`) / the implicit PRM's (`prime_lib.init_prm_state`)
    when the run trains one."""
    rl = config.rl
    return learner_lib.TrainState(
        params=init_params,
        opt_state=optimizer.init(lora.trainable(init_params)),
        # LoRA: the reference is the frozen base with adapters off (learner.reference_params), no copy.
        ref_params=jax.tree.map(jnp.copy, init_params) if rl.kl_coef > 0 and not lora.has_adapters(init_params) else None,
        key=jax.random.key_data(jax.random.fold_in(key, 1)),
        kl_coef=jnp.asarray(rl.kl_coef, jnp.float32) if rl.kl_target > 0 else None,
        entropy_coef=jnp.asarray(rl.entropy_coef, jnp.float32) if rl.entropy_target > 0 else None,
        critic=critic,
        prm=prm,
    )


def build_rl_programs(config, setup: Setup, optimizer, critic_optimizer=None, prm_optimizer=None, *,
                      state=None) -> RLPrograms:
    """Jitted learner step, (when needed) the rollout-policy forward pass, and the critic's programs. With a mesh
    (`setup.layout`), the learner step keeps the shardings of `state` (the RL stage's placed TrainState)."""
    lcfg = learner_config(config)
    behaviour_fn = None
    if needs_behaviour_pass(config):
        min_p = config.rl.proxy_min_p if "proxy_logp" in registry.policy_loss_inputs(config.rl.loss) else None
        behaviour_fn = jax.jit(
            functools.partial(
                logprobs_lib.completion_logprobs,
                setup.model_cfg,
                completion_len=config.sampling.max_new_tokens,
                temperature=lcfg.temperature,
                chunk_size=lcfg.logprob_chunk_size,
                vocab_chunk_size=lcfg.logprob_vocab_chunk_size or None,
                min_p=min_p,
            )
        )
    extra_programs = {}  # programs of the critic or the implicit PRM
    if critic_optimizer is not None:
        ccfg = critic_lib.critic_config(config)
        extra_programs = dict(
            values_fn=critic_lib.make_values_fn(setup.model_cfg, config.sampling.max_new_tokens),
            critic_step=critic_lib.make_critic_step(setup.model_cfg, ccfg, critic_optimizer),
            shared_trunk_step=(
                critic_lib.make_shared_trunk_step(setup.model_cfg, lcfg, ccfg, optimizer, critic_optimizer)
                if config.critic.shared_trunk
                else None
            ),
        )
    if prm_optimizer is not None:
        pcfg = prime_lib.prm_config(config)
        extra_programs = dict(
            prm_logprobs_fn=prime_lib.make_logprobs_fn(setup.model_cfg, pcfg, config.sampling.max_new_tokens),
            prm_step=prime_lib.make_prm_step(setup.model_cfg, pcfg, prm_optimizer),
        )
    return RLPrograms(
        optimizer=optimizer,
        learner_step=learner_lib.make_learner_step(setup.model_cfg, lcfg, optimizer, setup.layout, state),
        behaviour_fn=behaviour_fn,
        **extra_programs,
    )


def run_rl(config, setup: Setup, init_params, key, writer, workdir: str, *, stop_after_step=None,
           step_fn: Callable = None, evaluate_fn: Callable = None, init_state_fn: Callable = None):
    """RL stage; returns (final params, last eval metrics, steps done).

    `step_fn(config, setup, programs, state, step)` -> (state, metrics), `evaluate_fn(setup, params, key)` and
    `init_state_fn` (`init_rl_state`'s signature) default to `rl_step`, `_evaluate` and `init_rl_state`; the agent
    job (`train.agent_trainer`) passes its own.
    """
    step_fn, evaluate_fn = step_fn or rl_step, evaluate_fn or _evaluate
    init_state_fn = init_state_fn or init_rl_state
    rl = config.rl
    optimizer = learner_lib.make_optimizer(
        rl.learning_rate, rl.warmup_steps, rl.weight_decay, rl.grad_clip,
        schedule=rl.lr_schedule, total_steps=rl.steps * rl.ppo_epochs * rl.num_minibatches,
    )
    critic_optimizer, critic = None, None
    if critic_lib.uses_critic(config):
        critic_optimizer = critic_lib.make_critic_optimizer(config)
        critic = critic_lib.init_critic_state(config, setup.model_cfg, init_params, critic_optimizer)
    prm_optimizer, prm = None, None
    if prime_lib.uses_prm(config):
        prm_optimizer = prime_lib.make_prm_optimizer(config)
        prm = prime_lib.init_prm_state(init_params, prm_optimizer)
    state = _placed(setup, init_state_fn(config, init_params, optimizer, key, critic, prm))
    selection = setup.selector.init_state() if setup.selector is not None else None  # the agent job has none
    state = state.replace(selection=selection)  # per-prompt statistics, replay buffer (or None)
    ckpt = checkpointing.Checkpointer(
        os.path.join(workdir, "checkpoints", "rl"), max_to_keep=config.checkpoint.max_to_keep
    )
    restored = ckpt.restore_latest(state)
    start, last_eval = 0, None
    if restored is not None:
        state, start, last_eval = restored.state, restored.step, restored.meta.get("eval")
        if state.selection is not None:  # host-side again
            state = state.replace(selection=selection_lib.as_numpy(state.selection))
        print(f"resuming RL from step {start}", flush=True)
    programs = build_rl_programs(config, setup, optimizer, critic_optimizer, prm_optimizer,
                                 state=state.replace(selection=None))  # the jitted updates' state
    end = rl.steps if stop_after_step is None else min(rl.steps, stop_after_step)
    pipeline = None
    if rl.async_rollouts:  # batches generated in the background; any still in flight at the end are dropped
        if step_fn is not rl_step:
            raise ValueError("config.rl.async_rollouts=True: only the single-turn RL step runs asynchronously")
        pipeline = rollout_pipeline(config, setup, programs, state, start, end)
        step_fn = functools.partial(async_rl_step, pipeline)
    try:
        for step in range(start + 1, end + 1):
            state, step_metrics = step_fn(config, setup, programs, state, step - 1)
            if _should(config.eval.every, step, rl.steps):
                last_eval = evaluate_fn(setup, state.params, jax.random.fold_in(key, 2))
                step_metrics.update(last_eval)
            if _should(config.log_every, step, rl.steps) or step % config.eval.every == 0:
                writer.write("rl", step, step_metrics)
            if _should(config.checkpoint.every, step, rl.steps):
                ckpt.save(step, state, {"data_step": step, "eval": last_eval})
    finally:
        if pipeline is not None:
            pipeline.close()
    ckpt.close()
    return state.params, last_eval, end


# ------------------------------------------------------------------------------------ the job


def summary_table(summary: dict) -> str:
    """A short human table of warm-start vs after-RL evaluation."""
    keys = ["greedy_accuracy"] + [k.removeprefix("eval/") for k in summary["rl_eval"] if k.startswith("eval/pass@")]
    keys.append("response_length")
    header = f"{'':12s}" + "".join(f"{k:>18s}" for k in keys)
    rows = [header]
    for name, ev in (("warm start", summary["sft_eval"]), ("after RL", summary["rl_eval"])):
        rows.append(f"{name:12s}" + "".join(f"{ev['eval/' + k]:>18.3f}" for k in keys))
    return "\n".join(rows)


def run(config, workdir: str, *, stop_after_rl_step: int | None = None) -> dict:
    """Runs (or resumes) the whole job in `workdir`; returns the summary also written to summary.json.

    `stop_after_rl_step` ends the RL stage early (as an interruption would): used by tests.
    """
    config_validation.validate(config)
    t0 = time.time()
    os.makedirs(workdir, exist_ok=True)
    if distributed.is_main_process():
        with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
            f.write(config.to_json_best_effort(indent=2))
    with distributed.main_process_first("task tokenizer"):  # process 0 trains and caches it, the others load it
        setup = build_setup(config, workdir)
    setup = dataclasses.replace(setup, layout=layout_lib.layout_from_config(config, setup.model_cfg))
    key = jax.random.key(config.seed)
    writer = metrics_lib.MetricsWriter(workdir) if distributed.is_main_process() else metrics_lib.NullWriter()
    num_params = sum(
        x.size
        for x in jax.tree.leaves(
            jax.eval_shape(functools.partial(models.init_params, setup.model_cfg), jax.random.key(0))
        )
    )
    print(
        f"model {config.model.hf_checkpoint or config.model.preset}: {num_params / 1e6:.2f}M params, {setup.model_cfg}; " f"devices: {jax.devices()}",
        flush=True,
    )
    try:
        sft_params, sft_eval = run_sft(config, setup, key, writer, workdir)
        rl_params, rl_eval, rl_steps = run_rl(
            config, setup, sft_params, key, writer, workdir, stop_after_step=stop_after_rl_step
        )
        if config.model.export_hf:
            export_hf(config, setup, rl_params, os.path.join(workdir, "hf_export"))
    finally:
        setup.rewards.close()  # the scoring worker processes
    writer.close()
    rl_eval = rl_eval or sft_eval
    summary = {
        "sft_eval_accuracy": sft_eval["eval/greedy_accuracy"],
        "rl_eval_accuracy": rl_eval["eval/greedy_accuracy"],
        "rl_steps": rl_steps,
        "wall_seconds": time.time() - t0,
        "sft_eval": sft_eval,
        "rl_eval": rl_eval,
        "devices": f"{jax.devices()[0].platform} x{jax.device_count()}",
    }
    if distributed.is_main_process():
        with open(os.path.join(workdir, "summary.json"), "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2)
    print(
        f"done in {summary['wall_seconds']:.0f} s; summary in {workdir}/summary.json\n{summary_table(summary)}",
        flush=True,
    )
    return summary
