"""Countdown verifier (TinyZero ``verl/utils/reward_score/countdown.py`` semantics, safe evaluation).

The reference answer is JSON ``{"numbers": [..], "target": t}``. The completion's equation is the content of its
LAST ``<answer>...</answer>``:

* no ``<answer>`` tag -> **0.0**;
* a well-formed equation (only digits, ``+ - * /``, parentheses and spaces; the integers in it are exactly the
  given numbers, each used once) whose value equals the target -> **1.0**;
* anything else inside the tags (wrong value, a number missing or reused, other characters, division by zero,
  unparsable) -> **0.1**, TinyZero's ``format_score``.

Unlike TinyZero (``eval`` with ``__builtins__=None`` and a 1e-5 float tolerance), the equation is parsed with
``ast`` and evaluated exactly over fractions with only ``+ - * /`` and unary minus, so nothing is ever executed
and ``(1/3)*3`` equals ``1`` exactly.
"""

from __future__ import annotations

import ast
import collections
import fractions
import json
import re

FORMAT_SCORE = 0.1
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ALLOWED = re.compile(r"[\d+\-*/().\s]+")
_MAX_EQUATION_CHARS = 200
_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


def extract_equation(completion: str) -> str | None:
    """Content of the last ``<answer>...</answer>`` of ``completion``, stripped, or None."""
    matches = _ANSWER.findall(completion)
    return matches[-1].strip() if matches else None


def _evaluate(node: ast.AST) -> fractions.Fraction:
    """Exact value of an ``ast`` expression of integer literals, ``+ - * /`` and unary minus; ValueError else."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return fractions.Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    raise ValueError(f"disallowed expression node {type(node).__name__}")


def evaluate_equation(equation: str) -> fractions.Fraction | None:
    """Exact value of a countdown equation, or None if it is not a well-formed one (or divides by zero)."""
    if len(equation) > _MAX_EQUATION_CHARS or not _ALLOWED.fullmatch(equation):
        return None
    try:
        return _evaluate(ast.parse(equation, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError, MemoryError):
        return None


def uses_numbers_exactly(equation: str, numbers: list[int]) -> bool:
    """Whether the integers written in ``equation`` are exactly ``numbers`` as a multiset."""
    written = re.findall(r"\d+", equation)
    if any(len(n) > 18 for n in written):  # no given number is that long; never int() a huge digit string
        return False
    return collections.Counter(map(int, written)) == collections.Counter(numbers)


def score(completion: str, answer: str) -> float:
    """1.0 / 0.1 / 0.0 as in the module docstring."""
    reference = json.loads(answer)
    equation = extract_equation(completion)
    if equation is None:
        return 0.0
    if not uses_numbers_exactly(equation, reference["numbers"]):
        return FORMAT_SCORE
    value = evaluate_equation(equation)
    return 1.0 if value is not None and value == reference["target"] else FORMAT_SCORE
