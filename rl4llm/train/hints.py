"""Hinted rollouts for the prompts the policy fails: a prefix of the reference solution appended to the prompt
(`rl4llm.data.curriculum`), under `config.selection.hints`, in one of two schedules:

* ``staged`` (GHPO, Liu et al. 2025): a group whose G rollouts all fail is regenerated at growing prefix fractions
  (`selection.hint_fractions`) and replaced by the first hinted group with a correct rollout (`staged_groups`);
* ``irt`` (SEELE, Li et al. 2025): every problem's G rollouts are drawn in `selection.hint_rounds` rounds, each after
  the first at the problem's hint rate fitted for accuracy `selection.target` (`irt_groups`).

The hint is part of the prompt, so the loss trains only the policy's own continuation; `Rows.hint_chars` records
each row's hint. Both take the trainer's `generate` (`prompt_selection.GenerateFn`).
"""

from __future__ import annotations

import jax
import numpy as np

from rl4llm.data import curriculum
from rl4llm.train import rows as rows_lib
from rl4llm.train.rows import Rows, concat, take

# Stream of fold_in(step_key, ·) for hint levels (staged) and hint rounds after the first (irt).
HINT_STREAM = 3000


def staged_groups(sel, g: int, pad_id: int, examples, rows: Rows, key, generate) -> tuple[Rows, dict]:
    """GHPO: `rows` (G per example) with each all-fail group regenerated at the prefix fractions
    `sel.hint_fractions` in turn and replaced by the first hinted generation with a correct rollout.
    Metrics: selection/hint_candidates, hint_solved, hint_rollouts (the extra rollouts)."""
    failing = np.flatnonzero(rows.main.reshape(-1, g).max(axis=1) <= 0)
    metrics = {"selection/hint_candidates": float(failing.size), "selection/hint_solved": 0.0}
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
        metrics["selection/hint_rollouts"] = metrics.get("selection/hint_rollouts", 0.0) + float(slots * g)
        solved = hinted.main.reshape(-1, g)[: failing.size].max(axis=1) > 0
        if solved.any():
            rows = rows_lib.replace_groups(rows, hinted, failing[solved], np.flatnonzero(solved), g, pad_id)
        metrics["selection/hint_solved"] += float(solved.sum())
        failing = failing[~solved]
    return rows, metrics


def irt_groups(sel, g: int, pad_id: int, examples, key, generate) -> tuple[Rows, dict]:
    """SEELE: each example's G rollouts in `sel.hint_rounds` rounds of G / rounds, the first without a hint, each
    later one at the example's own hint rate h* = `curriculum.irt_hint(curriculum.irt_difficulty(earlier rounds))`
    (accuracy `sel.target` on the fitted curve). The group holds every round's rollouts, each with its hint in its
    prompt. Metrics: the rounds' mean reward metrics, selection/hint_rate (mean h* of rounds 2..R),
    selection/hinted_frac (given a non-empty hint), selection/unhinted_accuracy (round 1), selection/hinted_accuracy
    (rounds 2..R: what the fit aims at the target)."""
    n, rounds = len(examples), sel.hint_rounds
    per = g // rounds
    k, c = sel.irt_discrimination, sel.irt_guess
    rates, given, successes, parts, round_metrics = [], [], [], [], []
    for r in range(rounds):
        if r == 0:
            rate = np.zeros(n)
        else:
            b = curriculum.irt_difficulty(np.stack(rates, 1), np.stack(successes, 1), np.full((n, r), per), k, c)
            rate = curriculum.irt_hint(b, k, c, sel.target)
        chars = [curriculum.hint_chars(e.solution, e.answer, h) for e, h in zip(examples, rate)]
        rows, metrics = generate(
            [curriculum.hinted_prompt(e.prompt, e.solution, ch) for e, ch in zip(examples, chars)],
            [e.answer for e in examples], np.full(n, per),
            key if r == 0 else jax.random.fold_in(key, HINT_STREAM + r),
            [e.solution[:ch] for e, ch in zip(examples, chars)], solutions=[e.solution for e in examples])
        rows.hint_chars = np.repeat(np.asarray(chars, np.int32), per)
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
    })
    return rows, metrics
