"""Guidance for hard prompts: GHPO-style solution-prefix hints, and a difficulty curriculum for arithmetic.

Hints (Liu et al. 2025, "GHPO: Adaptive Guidance for Stable and Efficient LLM RL"; digest §8.1): a group whose G
rollouts all fail is regenerated with the first ``round(f·len(solution))`` characters of the reference solution
appended to its prompt, for f = 0.25, 0.5, 0.75 in turn, stopping at the first level with a correct rollout. The
hint is part of the prompt, so its tokens are outside the completion mask: the loss covers only the model's
continuation. The hint never reveals the final answer: it stops where the answer's last occurrence in the
solution begins. For the built-in char tasks the prompt is continued directly (``prompt + hint``), and the scored
text is ``hint + completion`` (the model finishes the worked solution the hint began).

Curriculum: the arithmetic task's operand count and operand range grow linearly from a start value to the
configured ``config.task`` values over ``steps`` RL steps (:func:`arithmetic_at_step`).
"""

from __future__ import annotations

import dataclasses

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
