"""Held-out evaluation: greedy accuracy, unbiased pass@k, avg@k, maj@k, response-length and answer-entropy
statistics of completions drawn through the compiled sampler.

Generation (`generate_scored`) is kept apart from the metrics, which are pure functions of per-sample arrays.
For each of P held-out prompts, `evaluate` draws one greedy completion and n = `spec.pass_n` samples at the
rollout sampling settings, `spec.batch_size` rows per sampler call (the last call padded: one compiled shape
per prompt bucket). A completion is *correct* iff its main reward equals 1. The metrics (keys under `eval/`):

  greedy_accuracy                                 fraction of prompts whose greedy completion is correct
  response_length, response_length_p50/_p90,      greedy completions' length statistics (`length_stats`)
  truncated_frac
  pass@k, avg@k, maj@k  (k in spec.pass_k)        from the n samples (`mean_pass_at_k`, `avg_at_k`, `maj_at_k`)
  sampled_response_length, ..._p50/_p90,          the n samples' length statistics
  sampled_truncated_frac
  answer_entropy                                  entropy of each prompt's extracted answers (`answer_entropy`)
  flawed_positive_frac, sound_accuracy,           with a process judge (`spec.flaw_judge`, config.task.flaw_judge):
  flawed_frac, sampled_<each of these>            the greedy and the sampled completions' flawed positives
                                                  (`rewards.process.flaw_metrics`)

maj@k and answer_entropy need the reward's answer extractor (`rl4llm.rewards.EXTRACTORS`, passed as
`spec.extract_answer`); for a reward without one (countdown, code, format rewards) they are left out.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Callable, Sequence

import jax
import numpy as np

from rl4llm import sampling
from rl4llm.rewards import combine as combine_lib
from rl4llm.rewards import process as process_lib
from rl4llm.train import batches
from rl4llm.train import progress


# ----------------------------------------------------------------------------------------- metrics


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021, "Evaluating LLMs trained on code").

    pass@k = 1 − C(n−c, k) / C(n, k), computed as 1 − Π_{i=n−c+1}^{n} (1 − k/i) for stability.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def mean_pass_at_k(correct: np.ndarray, k: int) -> float:
    """pass@k = (1/P) Σ_p [1 − C(n−c_p, k) / C(n, k)], c_p = Σ_j correct[p, j], of `correct` [P, n] (bool)."""
    n = correct.shape[1]
    return float(np.mean([pass_at_k(n, int(c), k) for c in correct.sum(-1)]))


def avg_at_k(correct: np.ndarray, k: int) -> float:
    """avg@k = (1/P) Σ_p (1/k) Σ_{j<k} correct[p, j] of `correct` [P, n] (bool): the mean accuracy of k samples
    per prompt, taken as the first k of the n (i.i.d. draws, so E[avg@k] = pass@1 for every k)."""
    _check_k(correct.shape[1], k)
    return float(np.mean(correct[:, :k]))


def majority_index(answers: Sequence[str | None]) -> int | None:
    """Index of the sample that casts the majority vote among `answers` (one prompt's extracted answers):
    the first sample giving the most frequent answer. Ties go to the answer that appears first; samples with
    no answer (None) do not vote; None if no sample has an answer (`rewards.combine.majority_vote`'s rule)."""
    label = combine_lib.majority_vote(list(answers), [0] * len(answers))[0] if answers else None
    return None if label is None else list(answers).index(label)


def maj_at_k(answers: Sequence[Sequence[str | None]], correct: np.ndarray, k: int) -> float:
    """maj@k = (1/P) Σ_p correct[p, m_p], m_p = `majority_index(answers[p][:k])`: majority voting over the
    extracted answers of the first k samples of each prompt (`answers` [P][n], `correct` [P, n] bool).

    The voted answer is judged by the reward of a sample that gave it, so the reward's own equivalence (e.g.
    symbolic math) decides, not string equality with the reference. A prompt none of whose k samples has an
    answer counts as wrong.
    """
    _check_k(correct.shape[1], k)
    votes = [majority_index(row[:k]) for row in answers]
    return float(np.mean([m is not None and bool(correct[p, m]) for p, m in enumerate(votes)]))


def answer_entropy(answers: Sequence[Sequence[str | None]]) -> float:
    """(1/P) Σ_p H(p̂_p), H(p̂) = −Σ_a p̂(a) log p̂(a) (nats), p̂_p the empirical distribution of prompt p's
    extracted answers, "no answer" (None) counted as one more outcome: 0 when the samples agree, log n when
    all n differ. Answer-level entropy ("The Invisible Leash", Wu et al. 2025): it can fall while token
    entropy rises."""

    def entropy(row: Sequence[str | None]) -> float:
        counts = np.array(list(collections.Counter(row).values()), np.float64)  # None is one outcome
        p = counts / counts.sum()
        return float(-(p * np.log(p)).sum())

    return float(np.mean([entropy(row) for row in answers]))


def length_stats(lengths: np.ndarray, finished: np.ndarray) -> dict[str, float]:
    """Completion lengths [M] (tokens) and finished flags [M] -> mean, p50, p90 (numpy's linear interpolation)
    and truncated_frac = the fraction cut at max_new_tokens without a stop token."""
    return {
        "mean": float(np.mean(lengths)),
        "p50": float(np.percentile(lengths, 50)),
        "p90": float(np.percentile(lengths, 90)),
        "truncated_frac": float(np.mean(~finished.astype(bool))),
    }


def _check_k(n: int, k: int) -> None:
    if not 1 <= k <= n:
        raise ValueError(f"k={k} needs 1 <= k <= n={n} samples per prompt")


# -------------------------------------------------------------------------------------- generation


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """What to evaluate: `batch_size` rows per sampler call (one compiled shape); `extract_answer` is the
    reward's final-answer extractor (`rl4llm.rewards.EXTRACTORS`), None when it has none (no maj@k); `flaw_judge` a
    process judge (`rl4llm.rewards.process.JUDGES`), or None."""

    greedy: sampling.SamplingConfig
    sampled: sampling.SamplingConfig
    pass_n: int
    pass_k: tuple[int, ...]
    prompt_bucket: int
    batch_size: int
    extract_answer: Callable[[str], str | None] | None = None
    flaw_judge: Callable[[str, str], list[bool]] | None = None


@dataclasses.dataclass(frozen=True)
class Completions:
    """Scored completions of a list of prompts, in prompt order."""

    texts: tuple[str, ...]  # [M]
    rewards: np.ndarray  # [M] float64, main reward
    lengths: np.ndarray  # [M] int, completion tokens
    finished: np.ndarray  # [M] bool, stopped on a stop token (False: cut at max_new_tokens)


def generate_scored(
    model_cfg, params, tokenizer, prompts: Sequence[str], answers: Sequence[str], key: jax.Array,
    sampling_cfg: sampling.SamplingConfig, spec: EvalSpec, score_fn: Callable[[str, str], float],
) -> Completions:
    """Completions of `prompts`, generated `spec.batch_size` rows per sampler call (the last call padded by
    repeating its last prompt) with key `fold_in(key, start row)`, each scored by `score_fn(text, answer)`."""
    texts, lengths, finished = [], [], []
    starts = range(0, len(prompts), spec.batch_size)
    for start in progress.over_batches(starts, len(starts), "eval"):
        chunk = list(prompts[start : start + spec.batch_size])
        real = len(chunk)
        chunk += [chunk[-1]] * (spec.batch_size - real)  # pad to the compiled batch size
        tokens, mask = batches.encode_prompts(tokenizer, chunk, spec.prompt_bucket)
        rollout = sampling.generate(model_cfg, params, tokens, mask, jax.random.fold_in(key, start), sampling_cfg)
        completion_tokens, completion_mask, done = jax.device_get(
            (rollout.completion_tokens, rollout.completion_mask, rollout.finished)
        )
        texts += batches.decode_completions(tokenizer, completion_tokens[:real], completion_mask[:real])
        lengths += completion_mask[:real].sum(-1).tolist()
        finished += done[:real].tolist()
    rewards = [score_fn(t, a) for t, a in zip(texts, answers)]
    return Completions(
        tuple(texts), np.asarray(rewards, np.float64), np.asarray(lengths, np.int64), np.asarray(finished, bool)
    )


def evaluate(
    model_cfg,
    params,
    tokenizer,
    examples: Sequence,
    key: jax.Array,
    spec: EvalSpec,
    score_fn: Callable[[str, str], float],
) -> dict[str, float]:
    """The metrics of the module docstring on `examples` (objects with `.prompt` and `.answer`)."""
    prompts = [ex.prompt for ex in examples]
    answers = [ex.answer for ex in examples]
    greedy = generate_scored(model_cfg, params, tokenizer, prompts, answers, key, spec.greedy, spec, score_fn)
    greedy_lengths = length_stats(greedy.lengths, greedy.finished)
    metrics = {
        "eval/greedy_accuracy": float(np.mean(greedy.rewards == 1.0)),
        "eval/response_length": greedy_lengths["mean"],
        "eval/response_length_p50": greedy_lengths["p50"],
        "eval/response_length_p90": greedy_lengths["p90"],
        "eval/truncated_frac": greedy_lengths["truncated_frac"],
    }
    n = spec.pass_n
    repeated = [p for p in prompts for _ in range(n)]
    sampled = generate_scored(
        model_cfg, params, tokenizer, repeated, [a for a in answers for _ in range(n)],
        jax.random.fold_in(key, 1), spec.sampled, spec, score_fn,
    )
    if spec.flaw_judge is not None:
        for prefix, texts, completions in (("eval/", prompts, greedy), ("eval/sampled_", repeated, sampled)):
            flawed = process_lib.first_flaws([spec.flaw_judge(p, c) for p, c in zip(texts, completions.texts)]) >= 0
            metrics.update(process_lib.flaw_metrics(completions.rewards == 1.0, flawed, prefix))
    correct = (sampled.rewards == 1.0).reshape(len(prompts), n)  # [P, n]
    extracted = None
    if spec.extract_answer is not None:
        flat = [spec.extract_answer(t) for t in sampled.texts]
        extracted = [flat[p * n : (p + 1) * n] for p in range(len(prompts))]  # [P][n]
    for k in spec.pass_k:
        metrics[f"eval/pass@{k}"] = mean_pass_at_k(correct, k)
        metrics[f"eval/avg@{k}"] = avg_at_k(correct, k)
        if extracted is not None:
            metrics[f"eval/maj@{k}"] = maj_at_k(extracted, correct, k)
    sampled_lengths = length_stats(sampled.lengths, sampled.finished)
    metrics["eval/sampled_response_length"] = sampled_lengths["mean"]
    metrics["eval/sampled_response_length_p50"] = sampled_lengths["p50"]
    metrics["eval/sampled_response_length_p90"] = sampled_lengths["p90"]
    metrics["eval/sampled_truncated_frac"] = sampled_lengths["truncated_frac"]
    if extracted is not None:
        metrics["eval/answer_entropy"] = answer_entropy(extracted)
    return metrics
