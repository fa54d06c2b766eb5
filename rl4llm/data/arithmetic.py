"""Multi-step integer arithmetic with a short worked answer: the main job's built-in task.

A problem is ``n`` operands in ``[0, max_value]`` joined by operators from ``cfg.operators``::

    prompt   = "37+48-19="
    solution = "37+48=85;85-19=66;#66"      # the completion the model must write (EOS added by the caller)
    answer   = "66"

Evaluation is strictly **left to right with no operator precedence**, also when ``*`` is enabled:
``"2+3*4="`` is ``(2+3)*4 = 20``, written ``"2+3=5;5*4=20;#20"``. Each step restates the running result,
so the model never has to look further back than the previous step. Negative running results are written
with a leading ``-`` (``"5-9=-4;-4+3=-1;#-1"``); operands themselves are never negative.

Train / test split: a prompt is held out iff ``sha256(prompt)`` maps below ``test_fraction``
(:func:`is_test_problem`, the shared rule of ``rl4llm.data.procedural``). The split depends only on the prompt
text and ``test_fraction`` (not on the seed or on any other config field), so the held-out problems are never
produced by :func:`train_examples` for any seed or step, and raising ``test_fraction`` only adds problems to the
held-out set.

Determinism: :func:`train_examples` draws from a numpy Generator seeded by ``(seed, step)`` alone, so any
step can be regenerated without replaying earlier ones and the data-iterator state is just the step number.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

import numpy as np

from rl4llm.data import procedural
from rl4llm.data.procedural import Example

SUPPORTED_OPERATORS = "+-*"
# Every character any arithmetic config can emit (prompt, solution, answer). The tokenizer is trained on all
# of it, so one vocabulary serves every config (e.g. a curriculum that enables '*' later).
ALPHABET = "0123456789+-*=;#"

# Distinct SeedSequence entropy prefixes keep the train, test and corpus random streams independent.
_TRAIN_STREAM = 0x7A1
_TEST_STREAM = 0x7E5
_CORPUS_STREAM = 0xC08


@dataclasses.dataclass(frozen=True)
class ArithmeticConfig:
    """Problem distribution: operand count uniform in [min_operands, max_operands], operands uniform in
    [0, max_value], each operator uniform over ``operators``; ``test_fraction`` of the problem space is held out."""

    min_operands: int = 3
    max_operands: int = 3
    max_value: int = 99
    operators: str = "+-"
    test_fraction: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.min_operands < 2:
            raise ValueError(f"ArithmeticConfig.min_operands={self.min_operands}: must be >= 2.")
        if self.max_operands < self.min_operands:
            raise ValueError(
                f"ArithmeticConfig.max_operands={self.max_operands} < min_operands={self.min_operands}: "
                "set max_operands >= min_operands."
            )
        if self.max_value < 1:
            raise ValueError(f"ArithmeticConfig.max_value={self.max_value}: must be >= 1.")
        if not self.operators or set(self.operators) - set(SUPPORTED_OPERATORS) or len(set(self.operators)) != len(
            self.operators
        ):
            raise ValueError(
                f"ArithmeticConfig.operators={self.operators!r}: must be a non-empty string of distinct "
                f"characters from {SUPPORTED_OPERATORS!r}."
            )
        if not 0.0 <= self.test_fraction < 1.0:
            raise ValueError(f"ArithmeticConfig.test_fraction={self.test_fraction}: must be in [0, 1).")
        if self.seed < 0:
            raise ValueError(f"ArithmeticConfig.seed={self.seed}: must be >= 0.")


def apply_operation(lhs: int, op: str, rhs: int) -> int:
    """One binary operation."""
    if op == "+":
        return lhs + rhs
    if op == "-":
        return lhs - rhs
    if op == "*":
        return lhs * rhs
    raise ValueError(f"unsupported operator {op!r}; expected one of {SUPPORTED_OPERATORS!r}")


def render_problem(operands: Sequence[int], ops: Sequence[str]) -> Example:
    """Renders operands ``[a0, a1, ...]`` and operators ``[o1, ...]`` (one fewer) as an :class:`Example`,
    evaluating left to right."""
    if len(operands) < 2 or len(ops) != len(operands) - 1:
        raise ValueError(f"need >= 2 operands and len(ops) == len(operands) - 1; got {operands!r}, {ops!r}")
    values = [int(v) for v in operands]
    if any(v < 0 for v in values):
        raise ValueError(f"operands must be non-negative; got {values!r}")
    prompt = str(values[0]) + "".join(op + str(v) for op, v in zip(ops, values[1:])) + "="
    running = values[0]
    steps = []
    for op, v in zip(ops, values[1:]):
        result = apply_operation(running, op, v)
        steps.append(f"{running}{op}{v}={result};")
        running = result
    return Example(prompt=prompt, solution="".join(steps) + f"#{running}", answer=str(running))


_STEP = re.compile(r"^(-?\d+)([+\-*])(\d+)=(-?\d+)$")


CORRUPTIONS = ("step_or_final", "final_answer")


def wrong_solution(solution: str, rng: np.random.Generator, corruption: str = "step_or_final") -> str:
    """A worked solution (``render_problem``'s) with a wrong final answer, for reward-model preference pairs:
    ``"step_or_final"``: either only the final ``#answer`` is off by d (the steps stay right), or the result of one
    step is off by d and the later steps carry the error on consistently, the choice uniform over the steps and the
    final answer; ``"final_answer"``: always the former (a check of the answer against the last step, learnable
    without knowing the sums). d is uniform in {-3, ..., 3} without 0.
    ``"3+7=10;#10"`` -> ``"3+7=10;#12"`` or ``"3+7=9;#9"``."""
    if corruption not in CORRUPTIONS:
        raise ValueError(f"corruption={corruption!r}: must be one of {CORRUPTIONS}")
    *steps, final = solution.split(";")
    parsed = [_STEP.match(step).groups() for step in steps]
    delta = int(rng.choice([-3, -2, -1, 1, 2, 3]))
    wrong = len(parsed) if corruption == "final_answer" else int(rng.integers(0, len(parsed) + 1))
    if wrong == len(parsed):
        return ";".join(steps) + f";#{int(final[1:]) + delta}"
    out, running = list(steps[:wrong]), None
    for k in range(wrong, len(parsed)):
        lhs, op, rhs, result = parsed[k]
        lhs = int(lhs) if running is None else running
        running = int(result) + delta if running is None else apply_operation(lhs, op, int(rhs))
        out.append(f"{lhs}{op}{rhs}={running}")
    return ";".join(out) + f";#{running}"


def is_test_problem(prompt: str, cfg: ArithmeticConfig) -> bool:
    """True iff ``prompt`` belongs to the held-out split: the first 8 bytes of sha256(prompt), read as a
    fraction of 2**64, fall below ``cfg.test_fraction``. Depends on nothing else (not the seed)."""
    return procedural.is_held_out(prompt, cfg.test_fraction)


def problem_space_size(cfg: ArithmeticConfig) -> int:
    """Number of distinct prompts the config can produce: sum over n of (max_value+1)**n * |ops|**(n-1)."""
    values, ops = cfg.max_value + 1, len(cfg.operators)
    return sum(values**n * ops ** (n - 1) for n in range(cfg.min_operands, cfg.max_operands + 1))


def _draw(rng: np.random.Generator, cfg: ArithmeticConfig, k: int) -> list[Example]:
    """Draws ``k`` problems from the config's distribution (train and test alike)."""
    counts = rng.integers(cfg.min_operands, cfg.max_operands + 1, size=k)
    operands = rng.integers(0, cfg.max_value, size=(k, cfg.max_operands), endpoint=True)
    op_idx = rng.integers(0, len(cfg.operators), size=(k, cfg.max_operands - 1))
    return [
        render_problem(operands[i, :n].tolist(), [cfg.operators[j] for j in op_idx[i, : n - 1]])
        for i, n in enumerate(counts.tolist())
    ]


def source(cfg: ArithmeticConfig) -> procedural.ProblemSource:
    """Train / held-out / corpus streams of the task (``rl4llm.data.procedural.ProblemSource``)."""
    return procedural.ProblemSource.of(
        cfg,
        _draw,
        streams=(_TRAIN_STREAM, _TEST_STREAM, _CORPUS_STREAM),
        alphabet=ALPHABET,
        hint="enlarge max_value/max_operands",
    )


def train_examples(cfg: ArithmeticConfig, step: int, batch_size: int) -> list[Example]:
    """The ``batch_size`` training problems of ``step``: a pure function of (cfg, step, batch_size), never a
    held-out problem. Problems may repeat within and across steps; a smaller batch is a prefix of a larger one."""
    return source(cfg).train_examples(step, batch_size)


def test_examples(cfg: ArithmeticConfig, n: int) -> list[Example]:
    """The fixed held-out set: ``n`` distinct problems, all with :func:`is_test_problem`. Independent of
    ``cfg.seed`` (runs with different seeds are evaluated on the same problems); ``test_examples(cfg, m)``
    is a prefix of ``test_examples(cfg, n)`` for m <= n."""
    return source(cfg).test_examples(n)


def corpus(cfg: ArithmeticConfig, n: int) -> list[str]:
    """Tokenizer-training text: one line with every character of :data:`ALPHABET` (so the vocabulary covers
    every config, e.g. '*' even when disabled here), then ``n`` training ``prompt + solution`` lines."""
    return source(cfg).corpus(n)
