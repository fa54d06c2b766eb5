"""Held-out evaluation: greedy accuracy and unbiased pass@k from sampled completions."""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import jax
import numpy as np

from rl4llm import sampling
from rl4llm.train import batches


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021, "Evaluating LLMs trained on code").

    pass@k = 1 − C(n−c, k) / C(n, k), computed as 1 − Π_{i=n−c+1}^{n} (1 − k/i) for stability.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """What to evaluate: `batch_size` rows per sampler call (one compiled shape)."""

    greedy: sampling.SamplingConfig
    sampled: sampling.SamplingConfig
    pass_n: int
    pass_k: tuple[int, ...]
    prompt_bucket: int
    batch_size: int


def _generate_scored(
    model_cfg, params, tokenizer, prompts, answers, key, sampling_cfg, spec, score_fn
) -> tuple[np.ndarray, np.ndarray]:
    """Rewards [len(prompts)] and completion lengths, generated `spec.batch_size` rows at a time."""
    rewards, lengths = [], []
    for start in range(0, len(prompts), spec.batch_size):
        chunk = list(prompts[start : start + spec.batch_size])
        real = len(chunk)
        chunk += [chunk[-1]] * (spec.batch_size - real)  # pad to the compiled batch size
        tokens, mask = batches.encode_prompts(tokenizer, chunk, spec.prompt_bucket)
        rollout = sampling.generate(model_cfg, params, tokens, mask, jax.random.fold_in(key, start), sampling_cfg)
        completion_tokens, completion_mask = jax.device_get((rollout.completion_tokens, rollout.completion_mask))
        texts = batches.decode_completions(tokenizer, completion_tokens[:real], completion_mask[:real])
        rewards += [score_fn(t, a) for t, a in zip(texts, answers[start : start + real])]
        lengths += completion_mask[:real].sum(-1).tolist()
    return np.asarray(rewards, np.float64), np.asarray(lengths, np.float64)


def evaluate(
    model_cfg,
    params,
    tokenizer,
    examples: Sequence,
    key: jax.Array,
    spec: EvalSpec,
    score_fn: Callable[[str, str], float],
) -> dict[str, float]:
    """Greedy accuracy, mean greedy response length and pass@k (k in spec.pass_k) on `examples`."""
    prompts = [ex.prompt for ex in examples]
    answers = [ex.answer for ex in examples]
    greedy, greedy_len = _generate_scored(
        model_cfg, params, tokenizer, prompts, answers, key, spec.greedy, spec, score_fn
    )
    metrics = {
        "eval/greedy_accuracy": float(np.mean(greedy == 1.0)),
        "eval/response_length": float(np.mean(greedy_len)),
    }
    repeated_prompts = [p for p in prompts for _ in range(spec.pass_n)]
    repeated_answers = [a for a in answers for _ in range(spec.pass_n)]
    sampled, _ = _generate_scored(
        model_cfg,
        params,
        tokenizer,
        repeated_prompts,
        repeated_answers,
        jax.random.fold_in(key, 1),
        spec.sampled,
        spec,
        score_fn,
    )
    correct = (sampled == 1.0).reshape(len(prompts), spec.pass_n).sum(-1)
    for k in spec.pass_k:
        metrics[f"eval/pass@{k}"] = float(np.mean([pass_at_k(spec.pass_n, int(c), k) for c in correct]))
    return metrics
