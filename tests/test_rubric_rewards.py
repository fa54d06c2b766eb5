"""Rubric rewards (`rl4llm.rewards.rubric`, arXiv 2508.12790): the weighted mean of the items' scores and the veto,
on hand-computed cases; rule checkers from `rl4llm.rewards` and judge items asked to the generative verifier (a
random nano decoder written by the test) in one call."""

from __future__ import annotations

import numpy as np
import pytest

from rl4llm import rewards
from rl4llm.rewards import rubric
from tests.test_generative_verifier import make_verifier, tokenizer, verifier_dir  # noqa: F401 (fixtures)

Item = rubric.RubricItem


def test_weighted_mean_hand_cases():
    scores = np.array([[1.0, 0.5, 0.0], [1.0, 1.0, 1.0], [0.2, 0.9, 0.0]])
    weights = np.array([[2.0, 1.0, 1.0], [1.0, 0.0, 3.0], [1.0, 3.0, 5.0]])
    valid = np.array([[True, True, True], [True, True, True], [True, True, False]])  # row 2: two items
    reward, vetoed = rubric.rubric_reward(scores, weights, np.zeros((3, 3), bool), valid)
    # (2*1 + 1*0.5 + 1*0)/4, (1 + 0 + 3)/4, (1*0.2 + 3*0.9)/4 (the padded item's weight 5 is not counted)
    np.testing.assert_allclose(reward, [0.625, 1.0, 0.725], rtol=1e-6)
    assert not np.asarray(vetoed).any()


def test_a_failed_veto_zeroes_the_reward_and_a_passed_one_counts_as_an_item():
    scores = np.array([[0.4, 1.0], [0.5, 1.0], [0.0, 1.0], [0.0, 1.0]])
    weights = np.array([[1.0, 1.0], [1.0, 1.0], [0.0, 2.0], [1.0, 1.0]])
    veto = np.array([[True, False], [True, False], [True, False], [True, False]])
    valid = np.array([[True, True], [True, True], [True, True], [False, True]])  # row 3's veto is padding
    reward, vetoed = rubric.rubric_reward(scores, weights, veto, valid, veto_threshold=0.5)
    # 0.4 < 0.5 fails; 0.5 passes: (0.5 + 1)/2; a weight-0 gate that fails; a padded veto item is no item
    np.testing.assert_allclose(reward, [0.0, 0.75, 0.0, 1.0], rtol=1e-6)
    np.testing.assert_array_equal(vetoed, [True, False, True, False])


def test_no_weight_gives_zero_not_nan():
    reward, _ = rubric.rubric_reward(np.zeros((2, 1)), np.zeros((2, 1)), np.zeros((2, 1), bool),
                                     np.array([[True], [False]]))
    np.testing.assert_array_equal(reward, [0.0, 0.0])


def test_reward_is_a_convex_combination_of_the_scores():
    rng = np.random.default_rng(0)
    scores, weights = rng.uniform(size=(64, 5)), rng.uniform(0.1, 3.0, size=(64, 5))
    valid = rng.uniform(size=(64, 5)) < 0.8
    valid[:, 0] = True
    reward, _ = rubric.rubric_reward(scores, weights, np.zeros((64, 5), bool), valid)
    lo = np.where(valid, scores, np.inf).min(-1)
    hi = np.where(valid, scores, -np.inf).max(-1)
    assert np.all(np.asarray(reward) >= lo - 1e-6) and np.all(np.asarray(reward) <= hi + 1e-6)
    np.testing.assert_allclose(reward, (weights * scores * valid).sum(-1) / (weights * valid).sum(-1), rtol=1e-5)


def test_rule_checkers_from_the_reward_registry():
    completions = ["3+4=7;#7", "3+4=8;#8", "3+4=7#7"]  # right and well-formed, wrong, right but badly formed
    refs, questions = ["7"] * 3, ["3+4="] * 3
    gated = [Item("exact_answer", 1.0, veto=True), Item("format_arithmetic", 0.5)]
    reward, vetoed, scores = rubric.score_rubrics([gated] * 3, completions, refs, questions, rewards.REWARDS)
    np.testing.assert_array_equal(scores, [[1, 1], [0, 1], [1, 0]])
    np.testing.assert_allclose(reward, [1.0, 0.0, 1 / 1.5], rtol=1e-6)  # (1 + 0.5)/1.5, vetoed, 1/1.5
    assert vetoed.tolist() == [False, True, False]
    # per-prompt rubrics of different lengths
    rubrics = [[Item("exact_answer")], [Item("exact_answer"), Item("format_arithmetic", 3.0)], []]
    reward, _, _ = rubric.score_rubrics(rubrics, completions, refs, questions, rewards.REWARDS)
    np.testing.assert_allclose(reward, [1.0, 0.75, 0.0], rtol=1e-6)


def test_judge_items_ask_the_generative_verifier_once(verifier_dir, tokenizer):  # noqa: F811
    judge = make_verifier(verifier_dir, tokenizer).for_rubric("{question}{completion};{criterion}#")
    calls = []

    def counted(*args):
        calls.append(len(args[0]))
        return judge(*args)

    completions, refs, questions = ["3+4=7;#7", "3+4=8;#8"], ["7", "7"], ["3+4=", "3+4="]
    rubrics = [[Item("judge:7", 2.0), Item("exact_answer", 1.0), Item("judge:77", 1.0)], [Item("judge:7", 1.0)]]
    reward, _, scores = rubric.score_rubrics(rubrics, completions, refs, questions, rewards.REWARDS, counted)
    assert calls == [3]  # every judge item of the batch in one verifier call
    p = judge(["3+4=", "3+4=", "3+4="], ["7"] * 3, ["3+4=7;#7", "3+4=7;#7", "3+4=8;#8"], ["7", "77", "7"])[0]
    np.testing.assert_allclose(scores, [[p[0], 1.0, p[1]], [p[2], 0.0, 0.0]], rtol=1e-5)
    np.testing.assert_allclose(reward, [(2 * p[0] + 1 + p[1]) / 4, p[2]], rtol=1e-5)


def test_bad_rubrics_are_refused_naming_the_item():
    with pytest.raises(ValueError, match="'no_such_checker'"):
        rubric.score_rubrics([[Item("no_such_checker")]], ["x"], ["1"], ["q"], rewards.REWARDS)
    with pytest.raises(ValueError, match="generative verifier"):
        rubric.score_rubrics([[Item("judge:is it right")]], ["x"], ["1"], ["q"], rewards.REWARDS)
    with pytest.raises(ValueError, match="weight must be >= 0"):
        rubric.pad_rubrics([[Item("exact_answer", -1.0)]])
