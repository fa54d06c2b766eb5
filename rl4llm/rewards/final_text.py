"""Exact final-text verifier: the text after the LAST ``#`` of the completion, stripped, must equal the reference.

For built-in tasks whose answer is not a single integer (``rl4llm.data.sorting``: ``"#1 3 5 9"``). Inner
whitespace runs are collapsed to one space on both sides; nothing else is normalised.
"""

from __future__ import annotations


def _canonical(text: str) -> str:
    return " ".join(text.split())


def extract_answer(completion: str) -> str | None:
    """The whitespace-normalised text after the last ``#``, or None if there is no ``#`` or nothing after it."""
    pos = completion.rfind("#")
    if pos < 0:
        return None
    return _canonical(completion[pos + 1 :]) or None


def score(completion: str, answer: str) -> float:
    """1.0 iff :func:`extract_answer` equals the whitespace-normalised ``answer``."""
    return 1.0 if extract_answer(completion) == _canonical(answer) else 0.0
