"""Guidance for hard prompts: GHPO-style solution-prefix hints, and a difficulty curriculum for arithmetic.

Hints (Liu et al. 2025, "GHPO: Adaptive Guidance for Stable and Efficient LLM RL"; digest §8.1): a group whose G
rollouts all fail is regenerated with the first ``round(f·len(solution))`` characters of the reference solution
appended to its prompt, for f = 0.25, 0.5, 0.75 in turn, stopping at the first level with a correct rollout. The
hint is part of the prompt, so its tokens are outside the completion mask: the loss covers only the model's
continuation. The hint never reveals the final answer: it stops where the answer's last occurrence in the
solution begins. For the built-in char tasks the prompt is continued directly (``prompt + hint``), and the scored
text is ``hint + completion`` (the model finishes the worked solution the hint began).

Capability-adaptive hints (Li et al. 2025, "Staying in the Sweet Spot", SEELE; digest §8.2): the hint rate h (the
fraction of the solution given) is chosen per problem so that the rollout accuracy lands at a target (0.5, where
a(1 − a), the bound on RLVR's loss descent, peaks). Accuracy against h follows a three-parameter logistic item
response curve a(h) = c + (1 − c)·σ(k·(h − b)) (:func:`irt_accuracy`); after each round of rollouts the problem's
difficulty b is fitted to the (h, successes, rollouts) it has seen (:func:`irt_difficulty`) and the next round
uses h* = b + logit((target − c)/(1 − c))/k, clipped to [0, 1] (:func:`irt_hint`).

Hints with a sample difficulty prior (Zhang et al. 2025, "ADHint"; digest §8.3, reconstructed): the problem's
accuracy without a hint sets its hint rate, h = h_max·(1 − acc) (:func:`adhint_hint`). Both are rates of the hint
rounds after the first (`ROUND_RATES`, `rl4llm.train.hints.round_groups`).

Curriculum: the arithmetic task's operand count and operand range grow linearly from a start value to the
configured ``config.task`` values over ``steps`` RL steps (:func:`arithmetic_at_step`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rl4llm.data import arithmetic


def hint_chars(solution: str, answer: str, fraction: float) -> int:
    """Characters of ``solution`` revealed at hint ``fraction``: ``round(fraction·len)``, cut before the last
    occurrence of ``answer`` in the solution (the final answer is never given away)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"hint fraction {fraction}: must lie in [0, 1]")
    n = int(round(fraction * len(solution)))
    answer_at = solution.rfind(answer) if answer else -1
    return min(n, answer_at) if answer_at >= 0 else n


def hinted_prompt(prompt: str, solution: str, chars: int) -> str:
    """The prompt with the first ``chars`` characters of the reference solution appended."""
    return prompt + solution[:chars]


def irt_accuracy(h, b, k: float, c: float):
    """SEELE's item response curve: the accuracy at hint rate ``h`` of a problem of difficulty ``b``,
    ``a(h) = c + (1 − c)·σ(k·(h − b))`` (discrimination ``k`` > 0, guessing floor ``c`` in [0, 1))."""
    return c + (1.0 - c) / (1.0 + np.exp(-k * (np.asarray(h, np.float64) - b)))


# The difficulties irt_difficulty searches: a grid wide enough that the clipped hint of irt_hint reaches 0 and 1
# for k >= 1 and targets in [0.12, 0.88] (|logit| <= 2), fine enough (1e-3) that the fitted hint is exact to a character of a 1,000-character
# solution.
_DIFFICULTY_GRID = np.linspace(-2.0, 3.0, 5001)


def irt_difficulty(hints: np.ndarray, successes: np.ndarray, counts: np.ndarray, k: float, c: float) -> np.ndarray:
    """The maximum-likelihood difficulty b of each problem given its rounds so far (hints, successes, counts: [P, R];
    round r of problem p drew counts[p, r] rollouts at hint rate hints[p, r], successes[p, r] of them correct), under
    binomial observations of :func:`irt_accuracy` with ``k`` and ``c`` fixed:
    ``b̂ = argmax_b Σ_r s·log a(h_r; b) + (n − s)·log(1 − a(h_r; b))``, searched on a grid of step 1e-3 over
    [-2, 3].
    A problem never solved gets b = 3 (harder than any hint), one always solved b = -2.

    Departure from SEELE, which fits all three parameters per problem: with the few rounds of a step a three-parameter
    fit is not identified (one round's all-fail gives no slope), so the discrimination k and the floor c are
    hyperparameters and only b is fitted; with k fixed the likelihood has an interior maximum as soon as a problem
    has both a success and a failure, whatever the hints."""
    hints, successes, counts = (np.asarray(x, np.float64)[..., None] for x in (hints, successes, counts))
    a = irt_accuracy(hints, _DIFFICULTY_GRID, k, c)  # [P, R, grid]
    # log 0 where the grid's curve is exactly 0 or 1: only ever multiplied by a zero count, which np.where drops
    with np.errstate(divide="ignore", invalid="ignore"):
        log_lik = np.where(successes > 0, successes * np.log(a), 0.0) + np.where(
            counts > successes, (counts - successes) * np.log1p(-a), 0.0)
    return _DIFFICULTY_GRID[np.argmax(log_lik.sum(axis=1), axis=-1)]


def irt_hint(b: np.ndarray, k: float, c: float, target: float) -> np.ndarray:
    """The hint rate at which :func:`irt_accuracy` equals ``target`` (> c):
    ``h* = b + logit((target − c)/(1 − c))/k``, clipped to [0, 1] (no hint for a problem easier than the target, the
    whole solution but its answer for one harder than the target at h = 1)."""
    q = (target - c) / (1.0 - c)
    return np.clip(np.asarray(b, np.float64) + np.log(q / (1.0 - q)) / k, 0.0, 1.0)


def adhint_hint(accuracy: np.ndarray, h_max: float) -> np.ndarray:
    """ADHint's hint rate from the sample difficulty prior (a reconstruction: the paper's code is not released):
    ``h = h_max·(1 − acc)``, ``acc`` the problem's accuracy in its unhinted rollouts -- the whole ``h_max`` for a
    problem never solved, no hint for one always solved."""
    return h_max * (1.0 - np.asarray(accuracy, np.float64))


def irt_rate(sel, rates: list, successes: list, per: int) -> np.ndarray:
    """SEELE's round hint rate (config.selection `sel`): each example's h* = `irt_hint(irt_difficulty(earlier rounds))`
    (accuracy `sel.target` on the fitted curve); `rates` and `successes` ([n] each) of the earlier rounds."""
    k, c = sel.irt_discrimination, sel.irt_guess
    n, r = len(rates[0]), len(rates)
    b = irt_difficulty(np.stack(rates, 1), np.stack(successes, 1), np.full((n, r), per), k, c)
    return irt_hint(b, k, c, sel.target)


def adhint_rate(sel, rates: list, successes: list, per: int) -> np.ndarray:
    """ADHint's round hint rate, the sample difficulty prior: each example's `adhint_hint` = h_max·(1 − acc) of its
    unhinted first round (`sel.hint_max`; every later round at that rate)."""
    del rates
    return adhint_hint(successes[0] / per, sel.hint_max)


# selection.hint_schedule -> the hint rate of a round after the first (`rl4llm.train.hints.round_groups`)
ROUND_RATES = {"irt": irt_rate, "adhint": adhint_rate}


def linear_schedule(step: int, start: int, end: int, steps: int) -> int:
    """``round(start + (end - start)·min(1, step/steps))``: ``start`` at step 0, ``end`` from step ``steps`` on."""
    if steps <= 0:
        return end
    return int(round(start + (end - start) * min(1.0, step / steps)))


def arithmetic_at_step(
    cfg: arithmetic.ArithmeticConfig, step: int, *, start_operands: int, start_max_value: int, steps: int
) -> arithmetic.ArithmeticConfig:
    """The arithmetic problem distribution of RL step ``step``: ``max_operands`` and ``max_value`` grow linearly
    from the start values to ``cfg``'s over ``steps`` steps (``min_operands`` follows, never above max)."""
    max_operands = linear_schedule(step, start_operands, cfg.max_operands, steps)
    return dataclasses.replace(
        cfg,
        min_operands=min(cfg.min_operands, max_operands),
        max_operands=max_operands,
        max_value=linear_schedule(step, start_max_value, cfg.max_value, steps),
    )
