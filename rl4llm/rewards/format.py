"""Format rewards: 1.0 when the completion has the required shape, else 0.0 (the reference answer is ignored).

* :func:`think_answer`: ``<think>...</think>`` then ``<answer>...</answer>`` and nothing else around them but
  whitespace (DeepSeek-R1 / TinyZero template; verl ``geo3k`` uses the same idea with ``\\boxed``).
* :func:`answer_tag`: exactly one ``<answer>...</answer>`` pair anywhere.
* :func:`tool_call`: at least one ``<tool_call>...</tool_call>`` block, and every one holds a JSON object with a
  string ``"name"`` and an object ``"arguments"`` (Hermes / Qwen tool-call syntax).

Combine them with a correctness reward through ``config.task.extra_rewards`` (``rl4llm.rewards.combine``),
preferably conditioned on correctness (GDPO's advice: an easy reward alone dominates the hard one).
"""

from __future__ import annotations

import json
import re

_THINK_ANSWER = re.compile(
    r"\s*<think>(?:(?!</?think>).)*</think>\s*<answer>(?:(?!</?answer>).)*</answer>\s*", re.DOTALL
)
_ANSWER = re.compile(r"<answer>.*?</answer>", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_MAX_TOOL_CALL_CHARS = 100_000


def think_answer(completion: str, answer: str) -> float:
    """1.0 iff the completion is ``<think>..</think>`` then ``<answer>..</answer>`` (whitespace around only)."""
    del answer
    return 1.0 if _THINK_ANSWER.fullmatch(completion) else 0.0


def answer_tag(completion: str, answer: str) -> float:
    """1.0 iff the completion holds exactly one ``<answer>...</answer>`` pair and no other answer tag."""
    del answer
    pairs = len(_ANSWER.findall(completion))
    return 1.0 if pairs == 1 and completion.count("<answer>") == completion.count("</answer>") == 1 else 0.0


def _is_tool_call(body: str) -> bool:
    if len(body) > _MAX_TOOL_CALL_CHARS:
        return False
    try:
        call = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict)


def tool_call(completion: str, answer: str) -> float:
    """1.0 iff there is at least one ``<tool_call>`` block and each holds ``{"name": str, "arguments": {...}}``."""
    del answer
    bodies = _TOOL_CALL.findall(completion)
    return 1.0 if bodies and all(_is_tool_call(b) for b in bodies) else 0.0
