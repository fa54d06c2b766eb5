"""Exact verifier for the arithmetic task (``rl4llm.data.arithmetic``).

The final answer is the integer after the LAST ``#`` of the completion, matched strictly: an optional
``-``, then one or more ASCII digits, then nothing but whitespace to the end. Anything else
(``"#66;"``, ``"# 66"``, ``"#6.0"``, ``"#٦٦"`` with non-ASCII digits, no ``#`` at all) has no answer.

Answers are compared as integers: ``"#066"`` and ``"#-0"`` match ``"66"`` and ``"0"``. The comparison is
done on canonical strings (leading zeros stripped, ``-0`` -> ``0``), which equals integer equality without
ever calling ``int()`` on model output (Python refuses ``int()`` of strings over 4300 digits).

:func:`format_score` (reward ``format_arithmetic``) is the task's format reward: 1 iff the completion is the worked
form and nothing else, right or wrong (a constraint or bonus beside the correctness, ``config.reward_weighting``).
"""

from __future__ import annotations

import re

_INTEGER = re.compile(r"(-?)([0-9]+)\s*")
_WORKED = re.compile(r"(?:-?[0-9]+[-+*]-?[0-9]+=-?[0-9]+;)*#-?[0-9]+\s*")


def _canonical(sign: str, digits: str) -> str:
    """Canonical decimal form of ``sign + digits``: no leading zeros, no negative zero."""
    magnitude = digits.lstrip("0")
    return f"{sign}{magnitude}" if magnitude else "0"


def extract_answer(completion: str) -> str | None:
    """The canonical integer after the last ``#`` of ``completion``, or None if there is none. Never raises
    on any ``str``."""
    hash_pos = completion.rfind("#")
    if hash_pos < 0:
        return None
    match = _INTEGER.fullmatch(completion, hash_pos + 1)
    return _canonical(match.group(1), match.group(2)) if match else None


def score(completion: str, answer: str) -> float:
    """1.0 iff the completion's final answer equals ``answer`` as an integer, else 0.0. Never raises on any
    ``completion``; raises ValueError if ``answer`` itself is not an integer string (a task bug)."""
    match = _INTEGER.fullmatch(answer)
    if match is None:
        raise ValueError(f"reference answer {answer!r} is not an integer string")
    return 1.0 if extract_answer(completion) == _canonical(match.group(1), match.group(2)) else 0.0


def format_score(completion: str, answer: str) -> float:
    """1.0 iff the completion has the worked form of ``rl4llm.data.arithmetic`` and nothing else: steps
    ``a<op>b=c;`` then ``#n`` (trailing whitespace allowed), whatever the numbers; the reference answer is ignored
    (a format reward: a constraint or bonus beside ``score``)."""
    del answer
    return 1.0 if _WORKED.fullmatch(completion) else 0.0
