"""Setup stage of a single-turn job: task, tokenizer (trained once, cached in the workdir), model config, sampler
and evaluation settings, the reward pipeline and the prompt selector, built once from the config (`build_setup`);
the warm-start params (`initial_params`) and the final export (`export_hf`)."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable

import jax

from rl4llm import models
from rl4llm import process_reward_model as process_reward_model_lib
from rl4llm import reward_model as reward_model_lib
from rl4llm import rewards as rewards_lib
from rl4llm import sampling
from rl4llm.data import tasks as tasks_lib
from rl4llm.models import lora
from rl4llm.parallel import layout as layout_lib
from rl4llm.rewards import combine as combine_lib
from rl4llm.rewards import pipeline as pipeline_lib
from rl4llm.rewards import process as process_lib
from rl4llm.tokenizers import sentencepiece_tokenizer
from rl4llm.train import batches
from rl4llm.train import evaluate as evaluate_lib
from rl4llm.train import prompt_selection
from rl4llm.verifiers import critique as critique_lib
from rl4llm.verifiers import generative as generative_lib

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
    reward_model: reward_model_lib.Scorer | None = None  # an outcome RM scoring rollouts (config.reward_model)
    # a learned PRM scoring the rollouts' steps (config.task.step_reward_model)
    step_reward_model: process_reward_model_lib.Scorer | None = None
    # a generative verifier scoring rollouts (generative_verifier: P(Yes), or sampled critiques with kind="critique")
    verifier: generative_lib.Verifier | critique_lib.CritiqueVerifier | None = None
    teacher: Any = None  # a `train.teacher.Teacher` sampling the off-policy traces (config.teacher; training runs)
    file_traces: dict | None = None  # {prompt key: traces} of config.teacher.traces_path (`teacher.load_file_traces`)
    search_replay: dict | None = None  # {prompt key: cached solutions} of config.deepsearch.replay_path (the same)


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
        min_p=config.sampling.min_p,
        temperature_tau=config.sampling.temperature_tau,
        stop_token_ids=tokenizer.stop_token_ids,
        pad_id=tokenizer.pad_id,
    )
    eval_spec = evaluate_lib.EvalSpec(
        greedy=dataclasses.replace(rollout_cfg, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, temperature_tau=0.0),
        sampled=dataclasses.replace(rollout_cfg, temperature_tau=0.0),  # HAPO evaluates at the base temperature
        pass_n=config.eval.pass_n,
        pass_k=tuple(config.eval.pass_k),
        prompt_bucket=config.sampling.prompt_bucket,
        batch_size=config.rl.num_prompts * config.rl.num_generations,
        extract_answer=rewards_lib.EXTRACTORS.get(config.task.reward),
        flaw_judge=process_lib.JUDGES.get(config.task.flaw_judge),
    )
    eval_examples = tuple(task.source.test_examples(config.eval.num_examples))
    reward_pipeline = pipeline_lib.RewardPipeline(reward_spec(config))
    selector = prompt_selection.Selector(
        config, task, data_offset=RL_DATA_OFFSET, pad_id=tokenizer.pad_id,
        encode=lambda prompts: batches.encode_prompts(tokenizer, prompts, config.sampling.prompt_bucket),
        tokenize=tokenizer.encode,
        decode=lambda tokens, mask: batches.decode_completions(tokenizer, tokens, mask),
    )
    scorer = (reward_model_lib.Scorer.from_checkpoint(config.reward_model.checkpoint, tokenizer,
                                                      task.source.corpus(0)[0])
              if config.reward_model.checkpoint else None)
    step_scorer = (process_reward_model_lib.Scorer.from_checkpoint(config.task.step_reward_model, tokenizer,
                                                                   task.source.corpus(0)[0])
                   if config.task.step_reward_model else None)
    v = config.generative_verifier
    judge = critique_lib.CritiqueVerifier if v.kind == critique_lib.KIND else generative_lib.Verifier
    verifier = (judge.from_config(v, tokenizer, task.source.corpus(0)[0], dtype=config.model.dtype,
                                  param_dtype=config.model.param_dtype)
                if v.checkpoint or v.hf_checkpoint else None)
    return Setup(
        task, tokenizer, model_cfg, rollout_cfg, eval_examples, eval_spec, reward_pipeline.score_one, reward_pipeline,
        selector, reward_model=scorer, verifier=verifier, step_reward_model=step_scorer,
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


def param_bytes(model_cfg: models.ModelConfig) -> int:
    """Bytes of the policy's params, LoRA adapters included (shapes only: nothing is initialised or read)."""

    def init(key):
        params = models.init_params(lora.base_config(model_cfg), key)
        return lora.add_adapters(model_cfg, params, key) if model_cfg.lora_rank else params

    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(jax.eval_shape(init, jax.random.key(0))))


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

    t0 = time.monotonic()
    cfg, merged = lora.merge(setup.model_cfg, params)
    source = config.model.hf_checkpoint or None
    hf_checkpoint.save_hf_checkpoint(
        cfg, merged, out_dir,
        base_config=hf_checkpoint.read_hf_config(source) if source else None,
        copy_files_from=source,
    )
    print(f"exported the policy (Hugging Face format) to {out_dir} in {time.monotonic() - t0:.1f} s", flush=True)


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
        length_kwargs=tuple(sorted(task.length_shaping_kwargs.items())),
        pseudo_labels=task.pseudo_labels,
        flaw_judge=task.flaw_judge,
        flaw_penalty=task.flaw_penalty,
        num_workers=task.reward_workers,
        timeout_s=task.reward_timeout_s,
    )


def with_layout(setup: Setup, layout: layout_lib.Layout | None) -> Setup:
    """`setup` on the meshes of `layout`: every judge model (outcome RM, PRM, generative verifier of either kind) with
    its params sharded on the judges' mesh (`Layout.judges`, `config.mesh.judges`) and scoring there; unchanged
    judges without a layout (one device)."""
    if layout is None:
        return setup
    judges = layout.judges
    return dataclasses.replace(
        setup, layout=layout, verifier=setup.verifier.placed(judges) if setup.verifier else None,
        reward_model=setup.reward_model.placed(judges) if setup.reward_model else None,
        step_reward_model=setup.step_reward_model.placed(judges) if setup.step_reward_model else None)


def placed(setup: Setup, state):
    """A learner state on the learner mesh (`Layout.shard_state`), or without a mesh committed to the one device.

    Committed, every leaf has the sharding the programs' outputs (and a restored checkpoint) have, so each jitted
    program compiles once: jit keys its cache on the arguments' shardings, and a fresh state's uncommitted leaves
    (`jnp.zeros` of the optimizer's counters) would make the first update compile a program of its own."""
    return setup.layout.shard_state(state) if setup.layout else jax.device_put(state, jax.devices()[0])
