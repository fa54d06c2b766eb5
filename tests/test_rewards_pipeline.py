"""The per-step reward pipeline (rl4llm.rewards.pipeline): plain = main reward, extras and shaping on top,
majority-vote pseudo-labels, pooled scoring."""

import json

import numpy as np
import pytest

from rl4llm.rewards import arithmetic
from rl4llm.rewards import pipeline


def _score(spec, texts, answers, lengths=None, groups=None, max_length=16):
    n = len(texts)
    lengths = np.full(n, 4) if lengths is None else np.asarray(lengths)
    groups = np.zeros(n, int) if groups is None else np.asarray(groups)
    with pipeline.RewardPipeline(spec) as p:
        return p.score(texts, answers, lengths, groups, max_length=max_length)


def test_plain_pipeline_is_the_main_reward():
    texts, answers = ["#3", "#4", "1+2=3;#3", ""], ["3", "3", "3", "0"]
    scores, main, _, metrics = _score(pipeline.RewardSpec("exact_answer"), texts, answers)
    expected = np.asarray([arithmetic.score(t, a) for t, a in zip(texts, answers)], np.float32)
    np.testing.assert_array_equal(scores, expected)
    np.testing.assert_array_equal(main, expected)
    assert metrics == {"reward/timeouts": 0.0, "reward/errors": 0.0}


def test_extras_conditional_and_length_shaping():
    answer = json.dumps({"numbers": [1, 2], "target": 3})
    spec = pipeline.RewardSpec(
        "countdown", extra_weights=(("format_think_answer", 0.5),), extra_mode="if_correct",
        length_shaping="dler_truncation", length_kwargs=(("limit", 10),),
    )
    texts = ["<think>x</think><answer>1+2</answer>", "<think>x</think><answer>1*2</answer>", "<answer>2+1</answer>"]
    scores, main, _, metrics = _score(spec, texts, [answer] * 3, lengths=[5, 5, 12])
    np.testing.assert_allclose(main, [1.0, 0.1, 1.0])
    # correct + format bonus 0.5 | wrong: no bonus (if_correct) | correct but longer than the DLER limit: 0
    np.testing.assert_allclose(scores, [1.5, 0.1, 0.0])
    assert metrics["reward/format_think_answer"] == pytest.approx(2 / 3)
    assert metrics["reward/countdown"] == pytest.approx(0.7)


def test_majority_vote_pseudo_labels():
    texts = ["#4", "#4", "#5", "x", "x", "#7"]
    groups = [0, 0, 0, 1, 1, 1]
    spec = pipeline.RewardSpec("exact_answer", pseudo_labels="majority_vote")
    scores, main, _, metrics = _score(spec, texts, ["unused"] * 6, groups=groups)
    np.testing.assert_array_equal(scores, [1, 1, 0, 0, 0, 1])  # group 1's only vote is its label
    assert metrics["pseudo_label/labelled_frac"] == 1.0
    assert metrics["pseudo_label/agreement"] == pytest.approx(3 / 4)
    scores, _, _, metrics = _score(spec, ["x", "y"], ["1", "1"], groups=[0, 0])
    np.testing.assert_array_equal(scores, [0, 0])
    assert metrics["pseudo_label/labelled_frac"] == 0.0


def test_math_majority_vote_uses_normalised_answers():
    spec = pipeline.RewardSpec("math", pseudo_labels="majority_vote")
    texts = [r"\boxed{\frac12}", r"\boxed{0.5}", r"\boxed{\dfrac{1}{2}}", r"\boxed{3}"]
    scores, _, _, _ = _score(spec, texts, [""] * 4)
    # All three halves vote for one label (1/2). The brace-less \frac12 votes but scores 0 against it: math-verify,
    # configured as TRL's accuracy_reward, does not parse it (tests/test_rewards_math.py says why).
    np.testing.assert_array_equal(scores, [0, 1, 1, 0])
    scores, _, _, _ = _score(spec, texts[1:], [""] * 3)  # 0.5 and \dfrac{1}{2}: one key, two votes
    np.testing.assert_array_equal(scores, [1, 1, 0])


def test_pooled_pipeline_matches_inline():
    texts, answers = ["#3", "#4", "#-1", "#0"] * 4, ["3", "3", "-1", "1"] * 4
    inline, _, _, _ = _score(pipeline.RewardSpec("exact_answer"), texts, answers)
    pooled, _, _, metrics = _score(pipeline.RewardSpec("exact_answer", num_workers=2, timeout_s=10), texts, answers)
    np.testing.assert_array_equal(inline, pooled)
    assert metrics["reward/errors"] == 0


def test_bad_specs():
    with pytest.raises(ValueError, match="pseudo_labels"):
        pipeline.RewardPipeline(pipeline.RewardSpec("math", pseudo_labels="oracle"))
    with pytest.raises(ValueError, match="extractor"):
        pipeline.RewardPipeline(pipeline.RewardSpec("countdown", pseudo_labels="majority_vote"))
    with pytest.raises(ValueError, match="length_shaping"):
        pipeline.RewardPipeline(pipeline.RewardSpec("math", length_shaping="shorter_is_better"))
