"""Single-turn rollouts: the RL step's prompts (`config.selection`), G sampled completions each, scored on the host by
the reward pipeline in one call and, with `config.reward_model.checkpoint`, by the outcome reward model in one jitted
call on the device (`rollout_and_score`); ReMax's greedy baseline rollout (`greedy_baseline_scores`)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from rl4llm import sampling
from rl4llm.rewards import combine as combine_lib
from rl4llm.train import batches
from rl4llm.train import prompt_selection
from rl4llm.train.setup import Setup

def generate(setup: Setup, params, prompt_tokens, prompt_mask, key, sampling_cfg) -> sampling.Rollout:
    """`sampling.generate`, on the sampler mesh when the run has a mesh (`Layout.generate`)."""
    if setup.layout is None:
        return sampling.generate(setup.model_cfg, params, prompt_tokens, prompt_mask, key, sampling_cfg)
    return setup.layout.generate(params, prompt_tokens, prompt_mask, key, sampling_cfg)


def step_prompts(config, setup: Setup, step: int):
    """The RL step's uniform examples (the task's stream, or the curriculum's stage) and their left-padded prompt
    tokens / mask [B, P] (a pure function of step)."""
    examples = setup.selector.stream_examples(step, config.rl.num_prompts)
    prompt_tokens, prompt_mask = batches.encode_prompts(
        setup.tokenizer, [e.prompt for e in examples], config.sampling.prompt_bucket
    )
    return examples, prompt_tokens, prompt_mask


def score(config, setup: Setup, rollout, answers, group_ids: np.ndarray, prefixes=None):
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
    if setup.reward_model is not None:
        scores = with_reward_model(config, setup, rollout, scores, main, metrics)
    return scores, main, components, completion_mask, finished, metrics


def with_reward_model(config, setup: Setup, rollout, rewards, main, metrics: dict) -> np.ndarray:
    """The pipeline's `rewards` [N] with the outcome RM's scores of the rollout's `[prompt | completion]` sequences
    (`reward_model.Scorer`: one jitted call for the batch, one transfer of [N] scores), combined by
    `config.reward_model.mode` / `weight` (`rewards.combine.with_model_score`). `main` (correctness) is left as it
    is. Adds `reward_model/score_mean`, `reward_model/score_std` and the rule reward's mean to `metrics`."""
    tokens, mask = batches.join_sequences(rollout.prompt_tokens, rollout.prompt_mask, rollout.completion_tokens,
                                          rollout.completion_mask)
    model_scores = setup.reward_model(tokens, mask)
    metrics["reward_model/score_mean"] = float(model_scores.mean())
    metrics["reward_model/score_std"] = float(model_scores.std())
    metrics[f"reward/{config.task.reward}"] = float(np.mean(main))
    r = config.reward_model
    return combine_lib.with_model_score(rewards, model_scores, weight=r.weight, mode=r.mode)


def greedy_baseline_scores(config, setup: Setup, params, step: int, key) -> np.ndarray:
    """ReMax baseline (Li et al. 2024): reward of the greedy completion of each prompt, repeated over its group [N].

    One extra greedy rollout of the step's B prompts (verl: `do_sample=False` generation in the trainer).
    """
    examples, prompt_tokens, prompt_mask = step_prompts(config, setup, step)
    rollout = generate(setup, params, prompt_tokens, prompt_mask, key, setup.eval_spec.greedy)
    scores = score(config, setup, rollout, [e.answer for e in examples], np.arange(len(examples)))[0]
    return np.repeat(scores, config.rl.num_generations)


def generate_rows(config, setup: Setup, params, prompts, answers, counts, key, prefixes):
    """`counts[i]` completions of each prompt `prompts[i]` (in order), scored against `answers[i]` with
    `prefixes[i]` scored before each completion. -> (`prompt_selection.Rows` [sum(counts)], reward metrics)."""
    counts = np.asarray(counts)
    prompt_tokens, prompt_mask = batches.encode_prompts(setup.tokenizer, prompts, config.sampling.prompt_bucket)
    prompt_tokens = np.repeat(prompt_tokens, counts, axis=0)
    prompt_mask = np.repeat(prompt_mask, counts, axis=0)
    rollout = generate(setup, params, prompt_tokens, prompt_mask, key, setup.rollout_cfg)
    group_ids = np.repeat(np.arange(len(prompts)), counts)
    scores, main, components, completion_mask, finished, reward_metrics = score(
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
