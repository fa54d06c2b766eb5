"""Hinted rollouts for the prompts the policy fails: a prefix of the reference solution appended to the prompt
(`rl4llm.data.curriculum`), under `config.selection.hints`, in one of three schedules:

* ``staged`` (GHPO, Liu et al. 2025): a group whose G rollouts all fail is regenerated at growing prefix fractions
  (`selection.hint_fractions`) and replaced by the first hinted group with a correct rollout (`staged_groups`);
* ``irt`` (SEELE, Li et al. 2025): every problem's G rollouts are drawn in `selection.hint_rounds` rounds, each after
  the first at the problem's hint rate fitted for accuracy `selection.target` (`round_groups`,
  `curriculum.irt_rate`);
* ``adhint`` (ADHint, Zhang et al. 2025): the same rounds, each after the first at the hint rate
  h_max·(1 − acc) of the problem's unhinted first round (`round_groups`, `curriculum.adhint_rate`);
* ``hindsight`` (HeRL, Zhang et al. 2026): an all-fail group's best failed rollout and the rubric items it failed
  are the guidance, not a reference solution; the best guided response replaces the group's worst rollout, as an
  off-policy row, and the failed rollout gets the improvement bonus (`hindsight_groups`).

and trained with the hint in one of two places (`selection.hint_placement`, `placement`):

* ``prompt`` (GHPO, SEELE): the hint stays in the trained prompt, so the loss trains only the policy's own
  continuation, on-policy for the hinted prompt;
* ``completion`` (Guide, Nath et al. 2025): the hinted rollout is trained as a response to the unhinted prompt,
  the hint's tokens first and off-policy (`hint_in_completion`).

`Rows.hint_chars` records each row's hint. Every schedule takes the trainer's `generate`
(`prompt_selection.GenerateFn`) and a `PlaceFn`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Sequence

import jax
import numpy as np

from rl4llm.data import curriculum
from rl4llm.rewards import process as process_lib
from rl4llm.train import rows as rows_lib
from rl4llm.train.rows import Rows, concat, take

# Stream of fold_in(step_key, ·) for hint levels (staged) and hint rounds after the first (irt).
HINT_STREAM = 3000

# place(rows, prompts [b], hints [b]) -> (rows, overflow): the rows of a hinted generation (rows // b of each prompt,
# sampled after prompts[i] + hints[i]) as they are trained, and how many lost their trained tokens.
PlaceFn = Callable[[Rows, list, list], tuple[Rows, int]]


def placement(sel, encode, tokenize, pad_id: int) -> PlaceFn:
    """The run's `PlaceFn` under `sel.hint_placement`: the rows as sampled (``prompt``) or `hint_in_completion`
    with the trainer's prompt encoding `encode` and text tokenizer `tokenize` (``completion``)."""
    if sel.hint_placement == "prompt":
        return lambda rows, prompts, hint_texts: (rows, 0)
    return functools.partial(hint_in_completion, encode=encode, tokenize=tokenize, pad_id=pad_id)


def hint_in_completion(rows: Rows, prompts: list, hint_texts: list, *, encode, tokenize, pad_id: int
                       ) -> tuple[Rows, int]:
    """Guide's off-policy hinted rollouts (Nath et al. 2025, "Adaptive Guidance Accelerates Reinforcement Learning
    of Reasoning Models"): `rows` holds n / b rows of each `prompts[i]`, sampled after prompts[i] + hint_texts[i];
    each becomes a response to the unhinted prompt,

        prompts[i] -> tokenize(hint_texts[i]) + the row's sampled tokens,

    with `Rows.hint_tokens` = the hint's token count. The sampled tokens keep their behaviour log-probs, so their
    ratio is Guide's π_θ(o_t | x, h, o_<t) / π_old(o_t | x ⊕ h, o_<t): the same token context as sampled (up to how
    the tokenizer splits the prompt-hint boundary). The hint's tokens get behaviour log-prob 0 (π_b := 1, LUFFY's
    convention for tokens the policy did not sample) and are off-policy in the loss (`rows.off_policy_tokens`).
    Departure from Guide, whose hints are natural-language guidance kept out of the response: ours are prefixes
    of the reference solution (GHPO's), and a prefix is part of the solution, so it is trained, as off-policy
    tokens, for the prompt without it; Guide's loss is PPO's clip on every token, ours the run's off-policy loss.
    A row whose hint + sampled tokens exceed the completion budget T keeps no trained token (an empty mask; its
    reward still counts in its group). -> (rows, such rows)."""
    n, t = rows.completion_tokens.shape
    per = n // len(prompts)
    prompt_tokens, prompt_mask = encode(list(prompts))
    tokens = np.full((n, t), pad_id, np.int32)
    mask = np.zeros((n, t), bool)
    logprobs = np.zeros((n, t), np.float32)
    hint_tokens = np.zeros(n, np.int32)
    hint_ids = [tokenize(h) for h in hint_texts]
    overflow = 0
    for r in range(n):
        hint, length = hint_ids[r // per], int(rows.completion_mask[r].sum())
        if len(hint) + length > t:
            overflow += 1
            continue
        k = len(hint)
        tokens[r, :k], tokens[r, k:k + length] = hint, rows.completion_tokens[r, :length]
        mask[r, :k + length] = True
        logprobs[r, k:k + length] = rows.logprobs[r, :length]
        hint_tokens[r] = k
    return dataclasses.replace(
        rows, prompt_tokens=np.repeat(prompt_tokens, per, axis=0), prompt_mask=np.repeat(prompt_mask, per, axis=0),
        completion_tokens=tokens, completion_mask=mask, logprobs=logprobs, hint_tokens=hint_tokens), overflow


def staged_groups(sel, g: int, pad_id: int, examples, rows: Rows, key, generate, place: PlaceFn
                  ) -> tuple[Rows, dict]:
    """GHPO: `rows` (G per example) with each all-fail group regenerated at the prefix fractions
    `sel.hint_fractions` in turn and replaced by the first hinted generation with a correct rollout, placed by
    `place`. Metrics: selection/hint_candidates, hint_solved, hint_rollouts (the extra rollouts), hint_overflow
    (hinted rows `place` left without trained tokens)."""
    failing = np.flatnonzero(rows.main.reshape(-1, g).max(axis=1) <= 0)
    metrics = {"selection/hint_candidates": float(failing.size), "selection/hint_solved": 0.0,
               "selection/hint_overflow": 0.0}
    for level, fraction in enumerate(sel.hint_fractions):
        if failing.size == 0:
            break
        slots = 1 << int(np.ceil(np.log2(failing.size)))  # power-of-two groups: few compiled shapes
        padded = np.resize(failing, slots)
        chars = [curriculum.hint_chars(examples[i].solution, examples[i].answer, fraction) for i in padded]
        prompts = [curriculum.hinted_prompt(examples[i].prompt, examples[i].solution, c) for i, c in zip(padded, chars)]
        prefixes = [examples[i].solution[:c] for i, c in zip(padded, chars)]
        hinted, _ = generate(prompts, [examples[i].answer for i in padded], np.full(slots, g),
                             jax.random.fold_in(key, HINT_STREAM + level), prefixes,
                             solutions=[examples[i].solution for i in padded])
        hinted.hint_chars = np.repeat(np.asarray(chars, np.int32), g)
        hinted, overflow = place(hinted, [examples[i].prompt for i in padded], prefixes)
        metrics["selection/hint_overflow"] += float(overflow)
        metrics["selection/hint_rollouts"] = metrics.get("selection/hint_rollouts", 0.0) + float(slots * g)
        solved = hinted.main.reshape(-1, g)[: failing.size].max(axis=1) > 0
        if solved.any():
            rows = rows_lib.replace_groups(rows, hinted, failing[solved], np.flatnonzero(solved), g, pad_id)
        metrics["selection/hint_solved"] += float(solved.sum())
        failing = failing[~solved]
    return rows, metrics


def round_groups(sel, g: int, pad_id: int, examples, key, generate, place: PlaceFn) -> tuple[Rows, dict]:
    """SEELE's and ADHint's rounds: each example's G rollouts in `sel.hint_rounds` rounds of G / rounds, the first
    without a hint, each later one at the example's own hint rate `curriculum.ROUND_RATES[sel.hint_schedule]` of
    the earlier rounds. The group holds every round's rollouts, each with its hint (placed by `place`). Metrics: the
    rounds' mean reward metrics, selection/hint_overflow (as `staged_groups`), selection/hint_rate (mean h of rounds
    2..R), selection/hinted_frac (given a non-empty hint), selection/unhinted_accuracy (round 1),
    selection/hinted_accuracy (rounds 2..R: what SEELE's fit aims at the target)."""
    n, rounds = len(examples), sel.hint_rounds
    per = g // rounds
    rate_of = curriculum.ROUND_RATES[sel.hint_schedule]
    rates, given, successes, parts, round_metrics, overflow = [], [], [], [], [], 0
    for r in range(rounds):
        rate = np.zeros(n) if r == 0 else rate_of(sel, rates, successes, per)
        chars = [curriculum.hint_chars(e.solution, e.answer, h) for e, h in zip(examples, rate)]
        rows, metrics = generate(
            [curriculum.hinted_prompt(e.prompt, e.solution, ch) for e, ch in zip(examples, chars)],
            [e.answer for e in examples], np.full(n, per),
            key if r == 0 else jax.random.fold_in(key, HINT_STREAM + r),
            [e.solution[:ch] for e, ch in zip(examples, chars)], solutions=[e.solution for e in examples])
        rows.hint_chars = np.repeat(np.asarray(chars, np.int32), per)
        rows, round_overflow = place(rows, [e.prompt for e in examples],
                                     [e.solution[:ch] for e, ch in zip(examples, chars)])
        overflow += round_overflow
        rates.append(rate)
        given.append(np.asarray(chars) > 0)
        successes.append((rows.main.reshape(n, per) > 0).sum(axis=1))
        parts.append(rows)
        round_metrics.append(metrics)
    # round-major rows [rounds, n, per] -> each example's rounds contiguous: its group
    order = np.arange(rounds * n * per).reshape(rounds, n, per).transpose(1, 0, 2).reshape(-1)
    rows = take(concat(parts, pad_id), order)
    accuracy = np.stack(successes, 1) / per  # [n, rounds]
    metrics = {name: float(np.mean([m[name] for m in round_metrics])) for name in round_metrics[0]}
    metrics.update({
        "selection/hint_rate": float(np.mean(rates[1:])),
        "selection/hinted_frac": float(np.mean(given[1:])),
        "selection/unhinted_accuracy": float(accuracy[:, 0].mean()),
        "selection/hinted_accuracy": float(accuracy[:, 1:].mean()),
        "selection/hint_overflow": float(overflow),
    })
    return rows, metrics


def hindsight_guidance(attempt: str, items: Sequence[str], met: Sequence[bool]) -> str:
    """HeRL's hindsight guidance (the rewrite prompt of the official code, `_build_self_rewrite_prompt`: the failed
    draft, then the rubric items it did not meet), in the task's alphabet, appended to the prompt:

        guidance = attempt + "=" + ";".join(items k with met[k] False) + "="

    ``"37+48=85;85-19=60;#60"``, items ``["+48", "-19", "#"]``, met [True, False, False] -> ``"37+48=85;85-19=60;#60
    =-19;#="``. Departure: the official prompt is prose ("Keep all already satisfied constraints intact and fix the
    unmet ones ...") and lists the met items too; our tiny models read no prose and their tokenizer has only the
    task's characters, so the template is the attempt and the unmet items, delimited by the prompt's own ``=``."""
    return f"{attempt}={';'.join(item for item, ok in zip(items, met) if not ok)}="


def improvement_bonus(guided, original, weight: float):
    """HeRL's bonus on a failed rollout whose hindsight guidance was given, r ← r + λ·(r_guided − r) (official code:
    `reward_shaping_alpha`, λ = 0.05 in Qwen3_herl.sh): a response the guidance improves more has the larger potential
    and is favoured. -> λ·(guided − original), elementwise; signed, as the official code's (a guidance that made it
    worse lowers the reward)."""
    return weight * (np.asarray(guided, np.float32) - np.asarray(original, np.float32))


def ranked(scores: np.ndarray, met: np.ndarray) -> np.ndarray:
    """Indices of a group's rollouts from best to worst: by reward `scores` [G], then by rubric items met `met` [G],
    then by index (the first of equals ranks higher): the official code's candidate order."""
    return np.lexsort((np.arange(scores.size), -met, -scores))


def group_guidance(example, texts: Sequence[str], scores: np.ndarray, rubric: process_lib.Rubric
                   ) -> tuple[int, int, str, int]:
    """One all-fail group's hindsight guidance: its rollouts' `texts` [G] with rewards `scores` [G], judged by
    `rubric` against `example`. -> (its best failed rollout and its worst, by `ranked`; the guided prompt: the
    example's prompt ⊕ `hindsight_guidance` of the best; how many items the best failed)."""
    rubric_items, rubric_scores = rubric
    met = [rubric_scores(example.prompt, text, example.answer) for text in texts]
    order = ranked(scores, np.array([sum(m) for m in met]))
    best = met[order[0]]
    guidance = hindsight_guidance(texts[order[0]], rubric_items(example.prompt), best)
    return int(order[0]), int(order[-1]), example.prompt + guidance, len(best) - sum(best)


def hindsight_groups(sel, g: int, pad_id: int, examples, rows: Rows, key, generate, place: PlaceFn, decode,
                     rubric: process_lib.Rubric) -> tuple[Rows, dict]:
    """HeRL (Zhang et al. 2026, "Experience is the Best Teacher: Motivating Effective Exploration in Reinforcement
    Learning for LLMs"; official code sikelifei/HeRL `ray_trainer._augment_with_rewrite_he`): for each group of
    `rows` (G per example) without a correct rollout (the official `threshold=1.0`: no rollout of full score),

    1. its best failed rollout c (`ranked`: reward, then rubric items met) and the items it failed
       (`rubric` = `process.RUBRICS[task]`) are the guidance g = `hindsight_guidance`;
    2. `sel.hindsight_samples` responses are sampled after prompt ⊕ g in the same step, scored against the answer,
       placed by `place` with an empty hint (``completion``: trained as responses to the original prompt, their
       behaviour log-probs those under the guidance; ``prompt``: trained in the guided context, the official code's
       `train_use_rewrite_prompt=True`), off-policy (`Rows.off_policy`: `rl.off_policy.herl` weights f(π_θ/π_b));
    3. the best guided response (reward, first on ties) replaces the group's worst rollout (the last of `ranked`)
       when its reward is at least the group's best (official `replace_top_n=1`);
    4. c's reward gets `improvement_bonus`(best guided reward, c's reward, `sel.hindsight_bonus`).

    Departures (configs/herl.py): one failed rollout per group is rewritten, `hindsight_samples` times (official:
    every best-scoring one, once); the worst row is replaced, not a random one (c and its bonus stay), no fallback.
    Metrics: selection/hint_candidates (all-fail groups), hint_rollouts (guided rollouts sampled), hint_solved
    (groups with a correct guided response), hint_overflow (as `staged_groups`), hindsight_replaced (rows replaced),
    hindsight_guided_reward (mean reward of the guided responses), hindsight_bonus (mean bonus),
    hindsight_unmet_items (mean items failed by c)."""
    failing = np.flatnonzero(rows.main.reshape(-1, g).max(axis=1) <= 0)
    metrics = {"selection/hint_candidates": float(failing.size), "selection/hint_rollouts": 0.0,
               "selection/hint_solved": 0.0, "selection/hint_overflow": 0.0, "selection/hindsight_replaced": 0.0}
    if failing.size == 0:
        return rows, metrics
    texts = decode(rows.completion_tokens, rows.completion_mask)
    scores = rows.scores.reshape(-1, g)
    best_failed, worst, guided_prompts, unmet = zip(*(
        group_guidance(examples[i], texts[i * g: (i + 1) * g], scores[i], rubric) for i in failing))
    chosen, worst = failing * g + np.asarray(best_failed), failing * g + np.asarray(worst)
    slots = 1 << int(np.ceil(np.log2(failing.size)))  # power-of-two groups: few compiled shapes
    padded = np.resize(np.arange(failing.size), slots)
    m = sel.hindsight_samples
    guided, _ = generate([guided_prompts[k] for k in padded], [examples[failing[k]].answer for k in padded],
                         np.full(slots, m), jax.random.fold_in(key, HINT_STREAM), [""] * slots,
                         solutions=[examples[failing[k]].solution for k in padded])
    guided, overflow = place(guided, [examples[failing[k]].prompt for k in padded], [""] * slots)
    guided.off_policy = np.ones(guided.scores.size, bool)
    guided_scores = guided.scores.reshape(slots, m)[: failing.size]
    best = np.arange(failing.size) * m + guided_scores.argmax(axis=1)
    bonus = improvement_bonus(guided_scores.max(axis=1), rows.scores[chosen], sel.hindsight_bonus)
    replace = guided_scores.max(axis=1) >= scores[failing].max(axis=1)
    rows = dataclasses.replace(rows, scores=rows.scores.copy())
    rows.scores[chosen] += bonus
    if replace.any():
        order = np.arange(rows.scores.size)
        order[worst[replace]] = rows.scores.size + best[replace]
        rows = take(concat([rows, guided], pad_id), order)
    metrics.update({
        "selection/hint_rollouts": float(slots * m),
        "selection/hint_solved": float((guided.main.reshape(slots, m)[: failing.size].max(axis=1) > 0).sum()),
        "selection/hint_overflow": float(overflow),
        "selection/hindsight_replaced": float(replace.sum()),
        "selection/hindsight_guided_reward": float(guided_scores.mean()),
        "selection/hindsight_bonus": float(bonus.mean()),
        "selection/hindsight_unmet_items": float(np.mean(unmet)),
    })
    return rows, metrics
