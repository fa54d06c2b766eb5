"""RLVE's adaptive difficulty controller (rl4llm.data.difficulty): hand cases, the official update loop transcribed,
the ladders, and a run whose controller moves and resumes exactly."""

import collections
import os
import re

import numpy as np
import orbax.checkpoint as ocp
import pytest

from configs import rlve as rlve_recipe
from rl4llm import config as config_lib
from rl4llm.data import arithmetic
from rl4llm.data import countdown
from rl4llm.data import difficulty
from rl4llm.data import sorting
from rl4llm.train import checkpointing
from rl4llm.train import job
from rl4llm.train import metrics as metrics_lib
from tests.test_train import tiny_config

RAISED, ACCURACY = "selection/difficulty_raised", "selection/frontier_accuracy"
RLVE = dict(min_samples=8 * 16, threshold=0.9, max_level=100)  # RLVE's defaults: 8 prompts x 16 samples, 0.9


def _state(upper, correct=0.0, samples=0):
    return difficulty.DifficultyState(np.asarray(upper, np.int32), np.asarray(correct, np.float32),
                                      np.asarray(samples, np.int32))


def _as_tuple(state):
    return int(state.upper), float(state.frontier_correct), int(state.frontier_samples)


# ------------------------------------------------------------------------------------------ the controller


def test_eight_correct_groups_at_the_frontier_raise_it_by_one():
    """The digest's test: 8 x 16 correct samples at d = h -> h + 1, counters reset."""
    state, metrics = difficulty.update(_state(3), np.full(128, 3), np.ones(128), **RLVE)
    assert _as_tuple(state) == (4, 0.0, 0)
    assert metrics == {RAISED: 1.0, ACCURACY: 1.0}


def test_samples_below_the_frontier_never_count():
    state, metrics = difficulty.update(_state(3), np.full(1000, 2), np.ones(1000), **RLVE)
    assert _as_tuple(state) == (3, 0.0, 0) and metrics == {RAISED: 0.0}
    levels = np.array([0, 1, 2, 3, 3, 2])
    state, _ = difficulty.update(_state(3), levels, np.array([1, 1, 1, 1, 0, 1]), **RLVE)
    assert _as_tuple(state) == (3, 1.0, 2)  # only the two samples at level 3: one right


def test_counts_accumulate_across_batches_until_the_check():
    state = _state(0)
    for _ in range(7):  # 7 groups of 16 at the frontier, all correct: no check yet
        state, metrics = difficulty.update(state, np.zeros(16), np.ones(16), **RLVE)
        assert metrics == {RAISED: 0.0}
    assert _as_tuple(state) == (0, 112.0, 112)
    state, metrics = difficulty.update(state, np.zeros(16), np.ones(16), **RLVE)
    assert _as_tuple(state) == (1, 0.0, 0) and metrics[RAISED] == 1.0


def test_a_failed_check_resets_the_counters_and_keeps_the_level():
    """Accuracy 115/128 = 0.898 < 0.9: h stays, the counters restart (as the official code does)."""
    correct = np.r_[np.ones(115), np.zeros(13)]
    state, metrics = difficulty.update(_state(2), np.full(128, 2), correct, **RLVE)
    assert _as_tuple(state) == (2, 0.0, 0)
    assert metrics[RAISED] == 0.0 and metrics[ACCURACY] == pytest.approx(115 / 128)
    state, metrics = difficulty.update(_state(2), np.full(128, 2), np.r_[np.ones(116), np.zeros(12)], **RLVE)
    assert int(state.upper) == 3  # 116/128 = 0.906 >= 0.9


def test_the_threshold_is_inclusive_and_the_level_stops_at_max():
    state, _ = difficulty.update(_state(1), np.ones(10), np.r_[np.ones(9), 0.0], min_samples=10, threshold=0.9,
                                 max_level=5)
    assert int(state.upper) == 2
    state, metrics = difficulty.update(_state(5), np.full(10, 5), np.ones(10), min_samples=10, threshold=0.9,
                                       max_level=5)
    assert _as_tuple(state) == (5, 0.0, 0) and metrics == {RAISED: 0.0, ACCURACY: 1.0}


def test_a_sample_above_the_frontier_is_an_error():
    with pytest.raises(ValueError, match="level 4 is above the controller's upper level 3"):
        difficulty.update(_state(3), np.array([3, 4]), np.ones(2), **RLVE)


def _official_update(difficulty_h, accuracy, samples, min_samples, threshold):
    """A transcription of RLVEManager.update (tinker_cookbook/recipes/rlve/procgen_env.py) for one environment,
    sample by sample, with its dict of counters. -> (h, accuracy_sum, num_samples)."""
    acc = dict(accuracy=accuracy, num_samples=samples[0])
    for problem_difficulty, correct in samples[1]:
        assert problem_difficulty <= difficulty_h
        if problem_difficulty < difficulty_h:
            continue
        acc["num_samples"] += 1
        acc["accuracy"] += correct
    if acc["num_samples"] >= min_samples:
        if acc["accuracy"] / acc["num_samples"] >= threshold:
            difficulty_h += 1
        acc = dict(accuracy=0, num_samples=0)
    return difficulty_h, acc["accuracy"], acc["num_samples"]


def test_matches_the_official_update_loop_on_random_batches():
    rng = np.random.default_rng(0)
    state = difficulty.init_state()
    h, acc, n = 0, 0.0, 0
    raised = 0
    for _ in range(300):
        levels = difficulty.draw_levels(state, 6, 4, rng).repeat(4)
        correct = (rng.random(levels.size) < 0.85 + 0.1 * (levels < int(state.upper))).astype(np.float64)
        state, metrics = difficulty.update(state, levels, correct, min_samples=32, threshold=0.85, max_level=10**6)
        h, acc, n = _official_update(h, acc, (n, zip(levels.tolist(), correct.tolist())), 32, 0.85)
        raised += metrics[RAISED]
        assert _as_tuple(state) == (h, pytest.approx(acc), n)
    assert raised >= 3 and h == raised  # the controller moved, and only by +1 steps


def test_levels_are_uniform_over_the_window():
    assert difficulty.window(0, 4).tolist() == [0]
    assert difficulty.window(2, 4).tolist() == [0, 1, 2]
    assert difficulty.window(6, 4).tolist() == [3, 4, 5, 6]
    assert difficulty.window(6, 1).tolist() == [6]
    levels = difficulty.draw_levels(_state(6), 40000, 4, np.random.default_rng(1))
    counts = collections.Counter(levels.tolist())
    assert sorted(counts) == [3, 4, 5, 6] and levels.dtype == np.int32
    for level in counts:  # 10000 expected each; 5 sigma = 433
        assert abs(counts[level] - 10000) < 450


# ------------------------------------------------------------------------------------------------ ladders


def _operands(prompt: str) -> int:
    return len(re.findall(r"\d+", prompt))


def test_ladders_put_two_plus_level_items_in_each_problem():
    base = arithmetic.ArithmeticConfig(min_operands=4, max_operands=4, max_value=9)
    levels = np.array([0, 3, 1, 3, 0, 2])
    examples = difficulty.examples_at_levels("arithmetic", base, levels, 7)
    assert [_operands(e.prompt) for e in examples] == [2, 5, 3, 5, 2, 4]
    assert examples == difficulty.examples_at_levels("arithmetic", base, levels, 7)  # a pure function of the step
    assert examples != difficulty.examples_at_levels("arithmetic", base, levels, 8)
    for e in examples:  # every problem is a valid one of the task: its solution ends with its answer
        assert e.solution.endswith("#" + e.answer)
    sort = difficulty.LADDERS["sorting"]
    assert sort.at_level(sorting.SortingConfig(), 3).min_length == sort.at_level(sorting.SortingConfig(), 3).max_length == 5
    count = difficulty.LADDERS["countdown"]
    assert count.at_level(countdown.CountdownConfig(max_number=50), 1) == countdown.CountdownConfig(
        min_numbers=3, max_numbers=3, max_number=50)
    for name, cfg in (("sorting", sorting.SortingConfig()), ("countdown", countdown.CountdownConfig())):
        assert len(difficulty.examples_at_levels(name, cfg, np.array([0, 1, 2]), 0)) == 3


def test_config_checks_name_the_field():
    config = rlve_recipe.get_config()
    config_lib.parse(config)
    config.task.name = "modular"
    config.selection.difficulty_initial = 5
    with pytest.raises(config_lib.ConfigError) as error:
        config_lib.parse(config)
    assert "config.selection.method='adaptive_difficulty': task 'modular' has no difficulty ladder" in str(error.value)
    assert "config.selection.difficulty_initial=5: must be <= config.selection.difficulty_max=4" in str(error.value)
    config = rlve_recipe.get_config()
    config.selection.curriculum_steps = 10
    with pytest.raises(config_lib.ConfigError, match=r"curriculum_steps=10: method 'adaptive_difficulty' chooses"):
        config_lib.parse(config)


# ------------------------------------------------------------------------------------------ in the trainer


def test_the_controller_moves_in_a_run_and_is_checkpointed(tmp_path):
    """A nano run whose controller checks after every group at a 0 threshold: h rises by one per step up to
    difficulty_max, the prompts' levels follow, and the controller's state is the checkpoint's selection item,
    restored exactly onto a fresh state (the resume path; a whole interrupted run is tested with DOTS in
    tests/test_selection.py)."""
    config = tiny_config(steps=3)
    config.selection.update(method="adaptive_difficulty", difficulty_min_prompts=1, difficulty_threshold=0.0,
                            difficulty_max=2, difficulty_window=2)
    config.eval.every = 3
    job.run(config, str(tmp_path))
    records = {r["step"]: r for r in metrics_lib.read_metrics(str(tmp_path), "rl")}
    assert [records[s]["selection/difficulty_upper"] for s in (1, 2, 3)] == [1.0, 2.0, 2.0]
    assert records[1]["selection/difficulty_mean"] == 0.0  # h = 0 at step 1: every prompt at level 0
    assert 0.0 < records[3]["selection/difficulty_mean"] <= 2.0  # window {1, 2} at step 3
    assert [records[s]["selection/difficulty_raised"] for s in (1, 2, 3)] == [1.0, 1.0, 0.0]
    assert all(0.0 <= records[s]["selection/frontier_accuracy"] <= 1.0 for s in (1, 2))  # the checks that raised h
    ckpt = checkpointing.Checkpointer(os.path.join(str(tmp_path), "checkpoints", "rl"))
    template = {"state": ocp.StandardCheckpointer().restore(os.path.join(str(tmp_path), "checkpoints", "rl", "3",
                                                                        "state"))}
    restored = ckpt.restore_latest(template["state"], difficulty.init_state())
    ckpt.close()
    assert restored.step == 3 and isinstance(restored.selection, difficulty.DifficultyState)
    assert _as_tuple(restored.selection) == (2, 0.0, 0)
    assert restored.selection.upper.dtype == np.int32 and restored.selection.frontier_correct.dtype == np.float32
