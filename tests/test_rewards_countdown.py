"""Countdown verifier (rl4llm.rewards.countdown): TinyZero's 1.0 / 0.1 / 0.0, exact safe evaluation."""

import json

import pytest

from rl4llm.data import countdown as countdown_task
from rl4llm.rewards import countdown

ANSWER = json.dumps({"numbers": [3, 7, 5], "target": 50})


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("<answer>(3+7)*5</answer>", 1.0),
        ("<answer> 5 * (7 + 3) </answer>", 1.0),
        ("<think>try 3*7</think><answer>(7+3)*5</answer>", 1.0),
        ("<answer>3*7</answer><answer>(3+7)*5</answer>", 1.0),  # the LAST answer tag counts
        ("<answer>(3+7)*5</answer><answer>3*7</answer>", 0.1),
        ("<answer>3+7+5</answer>", 0.1),  # well formed, wrong value
        ("<answer>(3+7)*5*1</answer>", 0.1),  # a number that was not given
        ("<answer>(3+3)*5</answer>", 0.1),  # a number reused, one missing
        ("<answer>(3+7)*5=50</answer>", 0.1),  # '=' is not allowed
        ("<answer>(3+7)**5</answer>", 0.1),  # power is not an allowed operator
        ("<answer>__import__('os')</answer>", 0.1),
        ("<answer>(3+7)*5)</answer>", 0.1),  # unbalanced
        ("<answer>5/(7-7)*3</answer>", 0.1),  # division by zero (and 7 reused)
        ("<answer></answer>", 0.1),
        ("(3+7)*5", 0.0),  # no tag
        ("<answer>(3+7)*5", 0.0),  # unclosed tag
        ("", 0.0),
    ],
)
def test_hand_cases(completion, expected):
    assert countdown.score(completion, ANSWER) == expected


def test_division_is_exact():
    answer = json.dumps({"numbers": [1, 3, 3], "target": 1})
    assert countdown.score("<answer>(1/3)*3</answer>", answer) == 1.0
    assert countdown.evaluate_equation("3.5") is None  # only integer literals
    assert countdown.evaluate_equation("7/2") * 2 == 7
    assert countdown.evaluate_equation("-3+5") == 2


def test_reference_solutions_of_the_task_score_one():
    cfg = countdown_task.CountdownConfig(min_numbers=2, max_numbers=5, max_number=20, max_target=200)
    for ex in countdown_task.source(cfg).train_examples(0, 200):
        assert countdown.score(ex.solution, ex.answer) == 1.0, ex
