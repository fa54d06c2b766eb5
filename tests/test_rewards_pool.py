"""Batched scoring in a process pool (rl4llm.rewards.pool): timeouts, exceptions and dying workers score 0 and
are counted; the pool survives them. The misbehaving rewards below are module-level so spawned workers can
import them."""

import os
import time

import numpy as np
import pytest

from rl4llm.rewards import arithmetic
from rl4llm.rewards import pool as pool_lib


def misbehaving_reward(completion: str, answer: str) -> float:
    """Behaves as the completion says: hang, raise, die, return NaN, or score exactly."""
    if completion == "hang":
        time.sleep(60)
    if completion == "raise":
        raise RuntimeError("reward bug")
    if completion == "die":
        os._exit(1)
    if completion == "nan":
        return float("nan")
    return arithmetic.score(completion, answer)


@pytest.fixture(scope="module")
def scorer():
    with pool_lib.BatchScorer(misbehaving_reward, num_workers=2, timeout_s=1.0) as s:
        yield s


def test_pool_scores_like_inline(scorer):
    completions = ["#3", "#4", "1+2=3;#3", "", "#-1"]
    answers = ["3", "3", "3", "0", "-1"]
    scores, metrics = scorer.score(completions, answers)
    np.testing.assert_array_equal(scores, [1, 0, 1, 0, 1])
    assert scores.dtype == np.float32
    assert metrics == {"reward/timeouts": 0.0, "reward/errors": 0.0}
    inline, _ = pool_lib.BatchScorer(misbehaving_reward, num_workers=0).score(completions, answers)
    np.testing.assert_array_equal(scores, inline)


def test_timeouts_errors_and_dead_workers_score_zero_and_the_pool_survives(scorer):
    completions = ["#1", "hang", "raise", "die", "nan", "#2"]
    start = time.monotonic()
    scores, metrics = scorer.score(completions, ["1", "1", "1", "1", "1", "2"])
    assert time.monotonic() - start < 10
    np.testing.assert_array_equal(scores, [1, 0, 0, 0, 0, 1])
    assert metrics == {"reward/timeouts": 1.0, "reward/errors": 3.0}
    scores, metrics = scorer.score(["#5"] * 4, ["5"] * 4)  # the same pool keeps working
    np.testing.assert_array_equal(scores, [1, 1, 1, 1])


def test_inline_mode_counts_errors():
    scores, metrics = pool_lib.BatchScorer(misbehaving_reward, num_workers=0).score(["raise", "#1"], ["1", "1"])
    np.testing.assert_array_equal(scores, [0, 1])
    assert metrics["reward/errors"] == 1.0
    assert pool_lib.BatchScorer(misbehaving_reward, num_workers=0).score_one("raise", "1") == 0.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_workers"):
        pool_lib.BatchScorer(misbehaving_reward, num_workers=-1)
    with pytest.raises(ValueError, match="answers"):
        pool_lib.BatchScorer(misbehaving_reward, num_workers=0).score(["a"], [])


def test_reward_throughput_benchmark_workload_runs():
    from experiments import benchmark

    record = benchmark.reward_throughput(num_completions=6, num_workers=1, seed=0)
    assert record["scores_as_expected"] and record["reward/errors"] == record["reward/timeouts"] == 0
    assert record["completions"] == 6 and record["completions_per_min"] > 0
