"""Tests for the exact arithmetic verifier (rl4llm.rewards.arithmetic)."""

import hypothesis
import pytest
from hypothesis import strategies as st

from rl4llm.data import arithmetic
from rl4llm.rewards.arithmetic import extract_answer, score


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("37+48=85;85-19=66;#66", "66"),
        ("#-1", "-1"),
        ("#66 \n\t", "66"),
        ("#066", "66"),  # compared as integers
        ("#-0", "0"),
        ("#00", "0"),
        ("#1;#2", "2"),  # the LAST '#' counts
        ("#12#", None),
        ("#66;", None),
        ("#66x", None),
        ("# 66", None),
        ("#+66", None),
        ("#6.0", None),
        ("#--6", None),
        ("#-", None),
        ("#", None),
        ("66", None),
        ("", None),
        ("#\u0666\u0666", None),  # Arabic-Indic digits are not ASCII digits
        ("#²", None),
    ],
)
def test_extract_answer_hand_cases(completion, expected):
    assert extract_answer(completion) == expected


def test_score_hand_cases():
    assert score("37+48=85;85-19=66;#66", "66") == 1.0
    assert score("#066", "66") == 1.0
    assert score("#-0", "0") == 1.0
    assert score("#-66", "66") == 0.0
    assert score("#67", "66") == 0.0
    assert score("#66;#67", "66") == 0.0
    assert score("", "0") == 0.0


def test_score_on_huge_integers_does_not_raise():
    big = "9" * 100_000  # int() of this raises in Python >= 3.11; the verifier must not
    assert score("#" + big, big) == 1.0
    assert score("#" + big + "8", big) == 0.0
    assert score("x" * 1_000_000, "1") == 0.0


def test_reference_solutions_score_one():
    cfg = arithmetic.ArithmeticConfig(min_operands=2, max_operands=5, operators="+-*")
    for ex in arithmetic.train_examples(cfg, 0, 200):
        assert score(ex.solution, ex.answer) == 1.0
        assert score(ex.solution + ";", ex.answer) == 0.0


def test_bad_reference_answer_raises():
    with pytest.raises(ValueError):
        score("#1", "one")


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(completion=st.text(), answer=st.integers())
def test_score_never_raises_and_is_binary(completion, answer):
    result = score(completion, str(answer))
    assert result in (0.0, 1.0)
    assert score(completion + "#" + str(answer), str(answer)) == 1.0


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(
    prefix=st.text(), answer=st.integers(), zeros=st.integers(0, 3), suffix=st.sampled_from(["", " ", "\n"])
)
def test_score_matches_integer_equality(prefix, answer, zeros, suffix):
    sign, digits = ("-", str(-answer)) if answer < 0 else ("", str(answer))
    completion = f"{prefix}#{sign}{'0' * zeros}{digits}{suffix}"
    assert score(completion, str(answer)) == 1.0
    assert score(completion, str(answer + 1)) == 0.0
