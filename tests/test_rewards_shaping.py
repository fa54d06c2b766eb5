"""Format rewards, length shaping, reward combination and majority-vote pseudo-labels: hand-computed cases."""

import numpy as np
import pytest

from rl4llm.rewards import combine
from rl4llm.rewards import final_text
from rl4llm.rewards import format as fmt
from rl4llm.rewards import length


@pytest.mark.parametrize(
    "completion, think_answer, answer_tag",
    [
        ("<think>a</think><answer>b</answer>", 1, 1),
        ("  <think>\na\n</think>\n<answer>b</answer>\n", 1, 1),
        ("<think>a</think>x<answer>b</answer>", 0, 1),  # text between the blocks
        ("<answer>b</answer>", 0, 1),
        ("<think>a</think><answer>b</answer><answer>c</answer>", 0, 0),
        ("<think><think>a</think></think><answer>b</answer>", 0, 1),
        ("<think>a</think><answer>b", 0, 0),
        ("", 0, 0),
    ],
)
def test_think_answer_and_answer_tag(completion, think_answer, answer_tag):
    assert fmt.think_answer(completion, "") == think_answer
    assert fmt.answer_tag(completion, "") == answer_tag


@pytest.mark.parametrize(
    "completion, expected",
    [
        ('<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>', 1),
        ('<tool_call>{"name": "a", "arguments": {}}</tool_call> <tool_call>{"name": "b", "arguments": {}}</tool_call>', 1),
        ('<tool_call>{"name": "a", "arguments": {}}</tool_call> <tool_call>{"name": "b"}</tool_call>', 0),
        ('<tool_call>{"name": 3, "arguments": {}}</tool_call>', 0),
        ('<tool_call>{"name": "a", "arguments": [1]}</tool_call>', 0),
        ("<tool_call>not json</tool_call>", 0),
        ('{"name": "a", "arguments": {}}', 0),
    ],
)
def test_tool_call(completion, expected):
    assert fmt.tool_call(completion, "") == expected


def test_final_text():
    assert final_text.score("3|5;#3  5", "3 5") == 1.0
    assert final_text.score("#3 5 ", "3 5") == 1.0
    assert final_text.score("#3 5 9", "3 5") == 0.0
    assert final_text.score("3 5", "3 5") == 0.0
    assert final_text.extract_answer("#") is None


def test_dapo_overlong_hand_values():
    # L_max = 20, L_buf = 4: 0 up to 16, then -(L - 16) / 4, down to -1 at 20.
    lengths = np.array([10, 16, 17, 18, 20])
    out = length.dapo_overlong(np.ones(5), lengths, None, max_length=20, buffer=4)
    np.testing.assert_allclose(out, [1, 1, 0.75, 0.5, 0])
    out = length.dapo_overlong(np.zeros(5), lengths, None, max_length=20, buffer=4, factor=2.0)
    np.testing.assert_allclose(out, [0, 0, -0.5, -1, -2])


def test_dler_truncation():
    out = length.dler_truncation(np.array([1.0, 1.0, 0.0]), np.array([5, 9, 3]), None, max_length=20, limit=8)
    np.testing.assert_array_equal(out, [1, 0, 0])
    # Default limit = max_length: only responses at the limit... are kept, longer ones (impossible) would go.
    np.testing.assert_array_equal(length.dler_truncation(np.ones(2), np.array([20, 21]), None, max_length=20), [1, 0])


def test_kimi_length_penalty_hand_values():
    # One group, lengths 10, 20, 30: λ = 0.5, 0, -0.5. Correct get λ, wrong get min(0, λ); weight 0.4.
    scores = np.array([1.0, 1.0, 0.0, 0.0])
    lengths = np.array([10, 30, 10, 20])
    out = length.kimi_length_penalty(scores, lengths, np.zeros(4, int), max_length=64)
    np.testing.assert_allclose(out, [1 + 0.4 * 0.5, 1 - 0.4 * 0.5, 0.0, 0.0])
    # Equal lengths in a group: λ = 0.
    np.testing.assert_allclose(length.kimi_length_penalty(scores, np.full(4, 7), np.zeros(4, int), max_length=9), scores)
    # Groups are separate: group 1's lengths do not move group 0's λ.
    out = length.kimi_length_penalty(np.ones(4), np.array([10, 20, 100, 300]), np.array([0, 0, 1, 1]), max_length=1)
    np.testing.assert_allclose(out, [1.2, 0.8, 1.2, 0.8])


def test_laser_and_laser_d():
    scores, lengths = np.array([1.0, 1.0, 0.0]), np.array([4, 9, 4])
    np.testing.assert_allclose(length.laser(scores, lengths, None, max_length=16, target=8), [1.5, 1.0, 0.0])
    # Group 0 (3/3 correct, easy): target 4; group 1 (1/3 correct, medium): target 8; group 2 (0/3, hard): 16.
    scores = np.array([1, 1, 1, 1, 0, 0, 0, 0, 0], float)
    lengths = np.array([4, 5, 3, 6, 6, 6, 1, 1, 1])
    groups = np.repeat([0, 1, 2], 3)
    np.testing.assert_array_equal(length.difficulty_levels(scores, groups), [0, 0, 0, 1, 1, 1, 2, 2, 2])
    out = length.laser_d(scores, lengths, groups, max_length=16, target_easy=4, target_medium=8, target_hard=16)
    np.testing.assert_allclose(out, [1.5, 1.0, 1.5, 1.5, 0, 0, 0, 0, 0])


def test_combine_sum_and_conditional():
    main = np.array([1.0, 0.0, 1.0])
    extras = {"fmt": np.array([1.0, 1.0, 0.0]), "len": np.array([0.5, 0.5, 0.5])}
    weights = {"fmt": 0.2, "len": -1.0}
    np.testing.assert_allclose(combine.combine(main, extras, weights), [0.7, -0.3, 0.5])
    np.testing.assert_allclose(combine.combine(main, extras, weights, mode="if_correct"), [0.7, 0.0, 0.5])
    with pytest.raises(ValueError, match="mode"):
        combine.combine(main, extras, weights, mode="max")
    with pytest.raises(ValueError, match="match"):
        combine.combine(main, extras, {"fmt": 1.0})


def test_parse_weights():
    assert combine.parse_weights("") == {}
    assert combine.parse_weights("a:0.5, b") == {"a": 0.5, "b": 1.0}
    with pytest.raises(ValueError, match="name:weight"):
        combine.parse_weights("a:x")


def test_majority_vote():
    answers = ["4", "5", "4", None, None, None, "7", "8", "8", "7"]
    groups = [0, 0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert combine.majority_vote(answers, groups) == ["4"] * 4 + [None] * 2 + ["7"] * 4  # tie: first seen wins
    with pytest.raises(ValueError):
        combine.majority_vote(["1"], [0, 1])
