"""Countdown (TinyZero-style): combine the given numbers, each exactly once, with ``+ - * /`` to reach the target.

A problem is ``n`` numbers in ``[1, max_number]`` and a target reachable from them::

    prompt   = "3 7 5 -> 50\\n"
    solution = "<answer>(3+7)*5</answer>"         # one reference equation (not the only correct one)
    answer   = '{"numbers":[3,7,5],"target":50}'   # what rl4llm.rewards.countdown checks against

Targets are made by folding a random permutation of the numbers with random operators from ``operators``
(left to right, parenthesised where needed), keeping draws whose target lies in ``[0, max_target]``. Difficulty
grows with ``num_numbers`` (the search space) and ``max_number``. Split and determinism: ``rl4llm.data.procedural``.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from rl4llm.data import procedural
from rl4llm.data.procedural import Example

ALPHABET = "0123456789 ->\n<answer>/()+*"
_STREAMS = (0xC0D1, 0xC0D7, 0xC0DC)  # train, test, corpus
_OPERATORS = "+-*"


@dataclasses.dataclass(frozen=True)
class CountdownConfig:
    """``num_numbers`` uniform in [min_numbers, max_numbers], numbers uniform in [1, max_number]."""

    min_numbers: int = 3
    max_numbers: int = 4
    max_number: int = 99
    max_target: int = 100
    operators: str = _OPERATORS
    test_fraction: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if not 2 <= self.min_numbers <= self.max_numbers:
            raise ValueError(
                f"CountdownConfig: need 2 <= min_numbers <= max_numbers, got {self.min_numbers}, {self.max_numbers}."
            )
        if self.max_number < 1 or self.max_target < 1:
            raise ValueError(
                f"CountdownConfig: max_number={self.max_number}, max_target={self.max_target}: both must be >= 1."
            )
        if not self.operators or set(self.operators) - set(_OPERATORS):
            raise ValueError(f"CountdownConfig.operators={self.operators!r}: a non-empty subset of {_OPERATORS!r}.")
        if not 0.0 <= self.test_fraction < 1.0:
            raise ValueError(f"CountdownConfig.test_fraction={self.test_fraction}: must be in [0, 1).")


def render(numbers: list[int], order: list[int], ops: list[str]) -> tuple[str, int]:
    """The equation folding ``numbers[order[0]] op numbers[order[1]] ...`` left to right, and its value."""
    expression, value, last_op = str(numbers[order[0]]), numbers[order[0]], None
    for op, index in zip(ops, order[1:]):
        operand = numbers[index]
        if op == "*" and last_op in ("+", "-"):
            expression = f"({expression})"
        expression += f"{op}{operand}"
        value = value + operand if op == "+" else value - operand if op == "-" else value * operand
        last_op = op
    return expression, value


def make_example(numbers: list[int], equation: str, target: int) -> Example:
    """The :class:`Example` of a problem and one reference equation."""
    prompt = " ".join(map(str, numbers)) + f" -> {target}\n"
    answer = json.dumps({"numbers": numbers, "target": target}, separators=(",", ":"))
    return Example(prompt=prompt, solution=f"<answer>{equation}</answer>", answer=answer)


def draw(rng: np.random.Generator, cfg: CountdownConfig, k: int) -> list[Example]:
    """``k`` problems (module docstring), with no split applied (also the problems of ``rl4llm.envs.countdown_calc``)."""
    out = []
    while len(out) < k:
        n = int(rng.integers(cfg.min_numbers, cfg.max_numbers + 1))
        numbers = rng.integers(1, cfg.max_number, size=n, endpoint=True).tolist()
        order = rng.permutation(n).tolist()
        ops = [cfg.operators[i] for i in rng.integers(0, len(cfg.operators), size=n - 1)]
        equation, target = render(numbers, order, ops)
        if 0 <= target <= cfg.max_target:
            out.append(make_example(numbers, equation, target))
    return out


def source(cfg: CountdownConfig) -> procedural.ProblemSource:
    """Train / held-out / corpus streams of the task (``rl4llm.data.procedural.ProblemSource``)."""
    return procedural.ProblemSource.of(
        cfg, draw, streams=_STREAMS, alphabet=ALPHABET, hint="enlarge max_number/max_numbers"
    )
