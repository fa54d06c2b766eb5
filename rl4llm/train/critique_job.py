"""The critique judge's training in the reward-model job (`config.reward_model.objective="critique"`,
`rl4llm.verifiers.critique`): the decoder alone (no head) learns to write the critique of a judge text.

Rejective fine-tuning (DeepSeek-GRM, arXiv 2504.02495): the paper samples critiques from the GRM and keeps those
whose scores agree with the ground truth, then fine-tunes on them. Here the kept critiques are built directly: each
training example's judge text (`config.generative_verifier.template`) of its reference solution and of a
`wrong_solution` (`config.reward_model.corruption`; the pairs of the "judge" objective) gets its procedural critique
(`critique.critique_text`: the principle, the exact step judge's verdicts, the score), which is by construction a
critique whose verdict agrees with the ground truth. The loss is SFT's (`train.sft.sft_loss`: the token-mean NLL of
the critique and its stop token given the judge text).

Held-out (`evaluate`): the judge's greedy critique (one sample) of each held-out judge text, parsed strictly:
`eval/verdict_accuracy` (the score's verdict, S >= 6, equals the ground truth: reference right, corrupted wrong),
`eval/pairwise_accuracy` (S(reference) > S(wrong), strict: the pairs' metric of the other objectives),
`eval/score_exact` (the parsed score equals the procedural one), `eval/parse_fail_frac` and `eval/loss`.
"""

from __future__ import annotations

import functools

import flax
import jax
import numpy as np

from rl4llm import config as config_lib
from rl4llm import reward_model as rm
from rl4llm import sampling
from rl4llm.data import arithmetic
from rl4llm.rewards import arithmetic as arithmetic_rewards
from rl4llm.train import batches
from rl4llm.train import sft
from rl4llm.verifiers import critique as critique_lib
from rl4llm.verifiers import generative
from rl4llm.verifiers import templates

OBJECTIVE = critique_lib.KIND
_CHUNK = 128  # critique positions projected to the vocabulary at once (sft_loss)


class CritiqueBatch(flax.struct.PyTreeNode):
    """Judge texts with their critiques: tokens / attention_mask [N, W + T] (the judge text left-padded to W, the
    critique and its stop token right-padded to T = max_critique_length), completion_mask [N, T] (the critique's
    tokens), labels [N] (1: the completion's answer is right: the task's exact reward) and scores [N] (the procedural
    critique's)."""

    tokens: np.ndarray
    attention_mask: np.ndarray
    completion_mask: np.ndarray
    labels: np.ndarray
    scores: np.ndarray


def critique_batch(config, tokenizer, examples, rng: np.random.Generator) -> CritiqueBatch:
    """Each example's judge text with its reference solution, then with a `wrong_solution` (rows P..2P-1), each
    followed by its procedural critique (`critique.critique_text`), cut to max_critique_length tokens with its stop
    token (a longer one loses its end: none of the task's solutions comes near the default 48)."""
    v = config.generative_verifier
    completions = [e.solution for e in examples] + [arithmetic.wrong_solution(e.solution, rng, config.reward_model
                                                                              .corruption) for e in examples]
    prompts, references = [e.prompt for e in examples] * 2, [e.answer for e in examples] * 2
    judge, judge_mask, _ = generative.encode_judge_texts(tokenizer, templates.template_pieces(v.template), prompts,
                                                         references, completions, v.max_length)
    critiques = [critique_lib.critique_text(p, c, r) for p, c, r in zip(prompts, completions, references)]
    tokens, mask = batches.encode_completions(tokenizer, [text for text, _ in critiques], v.max_critique_length,
                                              truncate=True)
    joined, attention = batches.join_sequences(judge, judge_mask, tokens, mask)
    labels = np.array([arithmetic_rewards.score(c, r) for c, r in zip(completions, references)], np.float32)
    return CritiqueBatch(tokens=np.asarray(joined), attention_mask=np.asarray(attention), completion_mask=mask,
                         labels=labels, scores=np.array([s for _, s in critiques], np.int32))


def critique_objective(cfg, params, batch: CritiqueBatch) -> tuple[jax.Array, dict]:
    """SFT on the critiques: L = −mean over critique tokens of log π(token | judge text, critique so far)
    (`sft.sft_loss`). Metrics `loss`."""
    loss = sft.sft_loss(cfg, _CHUNK, params, batch.tokens, batch.attention_mask, batch.completion_mask)
    return loss, {"loss": loss}


def make_train_step(cfg, optimizer):
    """Jitted `reward_model.train_step(state, batch)` of `critique_objective`, state donated."""
    objective = functools.partial(critique_objective, cfg)
    return jax.jit(functools.partial(rm.train_step, objective, optimizer), donate_argnums=0)


def evaluate(cfg, tokenizer, max_critique_length: int, params, batch: CritiqueBatch) -> dict:
    """Held-out metrics of the judge's greedy critiques of `batch`'s judge texts (module docstring)."""
    width = batch.tokens.shape[1] - batch.completion_mask.shape[1]
    greedy = sampling.SamplingConfig(max_new_tokens=max_critique_length, temperature=0.0,
                                     stop_token_ids=tuple(tokenizer.stop_token_ids), pad_id=tokenizer.pad_id)
    prompt_mask = batch.attention_mask[:, :width]
    texts, finished, lengths = critique_lib.sample_critiques(cfg, params, tokenizer, batch.tokens[:, :width],
                                                             prompt_mask, 1, greedy, jax.random.key(0))
    n = len(batch.labels)
    critiques = critique_lib.read_critiques(texts, finished, lengths, prompt_mask.any(-1), np.zeros(n, bool), 1)
    chosen, rejected = np.split(critiques.votes, 2)
    loss, _ = jax.device_get(jax.jit(critique_objective, static_argnums=0)(cfg, params, batch))
    return {"eval/verdict_accuracy": float(np.mean(critique_lib.vote_verdict(critiques.votes, 1)
                                                   == (batch.labels > 0.5))),
            "eval/pairwise_accuracy": float(np.mean(chosen > rejected)),
            "eval/score_exact": float(np.mean(critiques.parsed[:, 0] & (critiques.scores[:, 0] == batch.scores))),
            "eval/parse_fail_frac": float(np.mean(~critiques.parsed)), "eval/loss": float(loss)}


def objective(config, model_cfg, tokenizer, optimizer, trunk, held_out_examples, rng: np.random.Generator):
    """(initial params: the bare decoder `trunk`, jitted update, held-out `critique_batch` of `held_out_examples`,
    `(params, batch) -> held-out metrics`) for `reward_model_job`."""
    if not tokenizer.stop_token_ids:
        raise config_lib.ConfigError("config.reward_model.objective='critique': the tokenizer has no stop token to end "
                                     "a critique with")
    held_out = critique_batch(config, tokenizer, held_out_examples, rng)
    return (trunk, make_train_step(model_cfg, optimizer), held_out,
            functools.partial(evaluate, model_cfg, tokenizer, config.generative_verifier.max_critique_length))
