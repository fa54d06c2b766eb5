"""Every registered reward on hostile completions: random unicode, huge strings, unbalanced braces, deeply
nested LaTeX, near-miss answer syntax. Each must return a finite float in its range, never raise, and finish
within the hypothesis deadline (bounded time; the math verifier's symbolic step has its own 5 s limit, the code
sandbox its 10 s wall clock; the deadline leaves room for a loaded test machine)."""

import datetime
import json
import math

import hypothesis
from hypothesis import strategies as st

from rl4llm import rewards

# A valid reference answer per reward (the task's format), and the range of its scores.
REFERENCES = {
    "exact_answer": ("42", (0.0, 1.0)),
    "final_text": ("1 2 3", (0.0, 1.0)),
    "math": (r"\frac{3}{4}", (0.0, 1.0)),
    "math_strict": ("x^2+1", (0.0, 1.0)),
    "countdown": (json.dumps({"numbers": [3, 7, 5], "target": 50}), (0.0, 1.0)),
    "code": (json.dumps({"tests": [{"input": "", "output": "1"}]}), (0.0, 1.0)),
    "code_all_pass": (json.dumps({"tests": [{"assert": "assert f() == 1"}]}), (0.0, 1.0)),
    "format_think_answer": ("", (0.0, 1.0)),
    "format_answer_tag": ("", (0.0, 1.0)),
    "format_tool_call": ("", (0.0, 1.0)),
    "format_arithmetic": ("", (0.0, 1.0)),
}
SANDBOXED = {"code", "code_all_pass"}  # one subprocess per example: fewer examples

_SYNTAX = list("{}[]()\\$#^_=+-*/.,:;<>!? \n\t0123456789x") + [
    r"\boxed{", r"\fbox", r"\frac", r"\dfrac", r"\sqrt", r"\text{", r"\left(", r"\right)", r"\pi", r"\infty",
    "####", "Answer:", "<answer>", "</answer>", "<think>", "</think>", "<tool_call>", "</tool_call>", "```python\n",
    "```", "**", "e9", "1e999999", "9" * 50, "\u0666", "²", "\x00", "\ud7ff", "__import__('os')",
]
_NESTING = ["\\boxed{", "\\frac{", "{", "(", "\\sqrt{", "<answer>", "\\text{", "["]

completions = st.one_of(
    st.text(max_size=300),  # random unicode
    st.lists(st.sampled_from(_SYNTAX), max_size=80).map("".join),  # unbalanced braces, near-miss syntax
    st.tuples(st.sampled_from(_NESTING), st.integers(1, 3000), st.booleans()).map(
        lambda t: t[0] * t[1] + "1" + ("}" * t[1] if t[2] else "")  # deeply nested LaTeX, closed or not
    ),
    st.tuples(st.text(max_size=8), st.integers(1, 200_000)).map(lambda t: t[0] * t[1]),  # huge strings
    st.tuples(st.sampled_from(["#", "\\boxed{", "Answer: ", "<answer>"]), st.integers(1, 100_000)).map(
        lambda t: t[0] + "9" * t[1] + ("}" if t[0] == "\\boxed{" else "")  # huge numbers in answer position
    ),
)
_SETTINGS = dict(deadline=datetime.timedelta(seconds=30), suppress_health_check=list(hypothesis.HealthCheck))


def _check(name: str, completion: str) -> None:
    reference, (low, high) = REFERENCES[name]
    value = rewards.get_reward(name)(completion, reference)
    assert isinstance(value, float) and math.isfinite(value) and low <= value <= high, (name, value)


def test_every_reward_is_fuzzed():
    assert set(REFERENCES) == set(rewards.REWARDS)


@hypothesis.settings(max_examples=150, **_SETTINGS)
@hypothesis.given(completion=completions, name=st.sampled_from(sorted(set(REFERENCES) - SANDBOXED)))
def test_pure_rewards_never_raise_and_stay_in_range(completion, name):
    _check(name, completion)


@hypothesis.settings(max_examples=15, **_SETTINGS)
@hypothesis.given(completion=completions, name=st.sampled_from(sorted(SANDBOXED)))
def test_sandboxed_rewards_never_raise_and_stay_in_range(completion, name):
    _check(name, completion)


@hypothesis.settings(max_examples=100, **_SETTINGS)
@hypothesis.given(gold=completions, pred=completions, lenient=st.booleans())
def test_math_equivalence_never_raises_on_any_pair(gold, pred, lenient):
    from rl4llm.rewards import math as math_reward

    assert math_reward.is_equivalent(gold, pred, lenient=lenient) in (True, False)
    assert rewards.EXTRACTORS["math"](pred) is None or isinstance(rewards.EXTRACTORS["math"](pred), str)
