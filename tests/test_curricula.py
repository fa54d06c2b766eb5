"""Curricula and group filters (rl4llm.train.curricula): StarPO-S's variance filter, SCALER's difficulty controller
and SELF's greedy-probe curation on hand-made tables, against transcriptions of the official code, in the config
checks and in nano runs."""

import math
import os
import re

import numpy as np
import orbax.checkpoint as ocp
import pytest

from configs import scaler as scaler_recipe
from configs import starpo_s as starpo_s_recipe
from rl4llm import config as config_lib
from rl4llm import rewards
from rl4llm.data import difficulty
from rl4llm.data import selection
from rl4llm.train import checkpointing
from rl4llm.train import job
from rl4llm.train import metrics as metrics_lib
from tests.test_train import tiny_config


# ------------------------------------------------------------------------------------------- StarPO-S


def test_top_std_groups_by_hand():
    scores = np.array([[0, 0, 0, 0],  # std 0
                       [1, 0, 1, 0],  # sqrt(1/3) = 0.577
                       [1, 1, 1, 0],  # 0.5
                       [0, 0, 0, 1],  # 0.5
                       [2, 0, 2, 0]])  # 1.155
    assert selection.top_std_groups(scores, 1).tolist() == [4]
    assert selection.top_std_groups(scores, 2).tolist() == [1, 4]  # kept in batch order, not by std
    assert selection.top_std_groups(scores, 3).tolist() == [1, 2, 4]  # tie 2 / 3 at the cut: the lower index
    assert selection.top_std_groups(scores, 5).tolist() == [0, 1, 2, 3, 4]
    assert selection.top_std_groups(scores, 0).tolist() == []


def test_top_std_groups_ties_and_bounds():
    equal = np.tile(np.array([[0.0, 1.0]]), (6, 1))
    assert selection.top_std_groups(equal, 3).tolist() == [0, 1, 2]
    # the std is shift-invariant: a constant added to one group does not move it
    shifted = np.array([[0.0, 1.0], [5.0, 6.0], [0.0, 0.5]])
    assert selection.top_std_groups(shifted, 2).tolist() == [0, 1]
    with pytest.raises(ValueError, match="cannot keep k=4 of 3 groups"):
        selection.top_std_groups(shifted, 4)


def _ragen_filter_rollout(rm_scores_flat, num_groups, group_size, ratio):
    """numpy transcription of RAGEN's `_filter_rollout` (ragen/trainer/agent_trainer.py, rollout_filter_type="std"):
    returns the row mask it applies to the batch."""
    rm_scores = rm_scores_flat.reshape(num_groups, group_size)
    in_group_std = rm_scores.std(axis=-1, ddof=1)  # torch.Tensor.std: unbiased
    if ratio == 1:
        return np.ones(num_groups * group_size, bool)
    k = int(ratio * num_groups)
    top_groups = np.argpartition(-in_group_std, k - 1)[:k]  # in_group_std.topk(k).indices
    mask = np.zeros(num_groups, bool)
    mask[top_groups] = True
    return np.repeat(mask, group_size)  # mask.unsqueeze(1).expand(-1, group_size).flatten()


@pytest.mark.parametrize("num_groups, group_size, ratio", [(8, 16, 0.25), (16, 4, 0.5), (12, 8, 0.75), (5, 3, 1.0)])
def test_top_std_groups_matches_ragens_filter(num_groups, group_size, ratio):
    rng = np.random.default_rng(num_groups)
    for _ in range(50):
        rewards = rng.normal(size=(num_groups, group_size))  # continuous: no ties, the kept set is unique
        kept = selection.top_std_groups(rewards, int(ratio * num_groups))
        mask = np.zeros(num_groups, bool)
        mask[kept] = True
        np.testing.assert_array_equal(np.repeat(mask, group_size),
                                      _ragen_filter_rollout(rewards.reshape(-1), num_groups, group_size, ratio))


@pytest.mark.parametrize(
    "updates, message",
    [
        ({"selection.std_filter_ratio": 0.3},
         "config.selection.std_filter_ratio=0.3: config.rl.num_prompts=16 / ratio = 53.3333 groups to roll out"),
        ({"rl.num_generations": 1}, "config.selection.method='std_filter': config.rl.num_generations=1: a group's"),
        ({"selection.std_filter_ratio": 0.0}, "config.selection.std_filter_ratio=0.0: must lie in (0.0, 1.0]"),
    ],
)
def test_std_filter_config_errors_name_the_field(updates, message):
    config = starpo_s_recipe.get_config()
    config_lib.parse(config)
    config.update_from_flattened_dict(updates)
    with pytest.raises(config_lib.ConfigError, match=re.escape(message)):
        config_lib.parse(config)


def _length_is_even(completion: str, answer: str) -> float:
    """A reward the barely warm-started nano model earns about half the time: groups with unequal rewards."""
    del answer
    return float(len(completion) % 2 == 0)


def test_std_filter_in_a_nano_run(tmp_path, monkeypatch):
    """Two steps: each rolls out 4x the groups it trains on, and the kept groups' mean reward std is at least the
    mean over all rolled-out groups (above it at some step)."""
    monkeypatch.setitem(rewards.REWARDS, "length_is_even", _length_is_even)
    config = tiny_config(steps=2)
    config.task.reward = "length_is_even"
    config.selection.update(method="std_filter", std_filter_ratio=0.25)
    config.eval.every = 2
    job.run(config, str(tmp_path))
    records = {r["step"]: r for r in metrics_lib.read_metrics(str(tmp_path), "rl")}
    for record in records.values():
        assert record["selection/kept_frac"] == 0.25 and record["selection/dropped_groups"] == 12.0
        assert record["selection/generated_rollouts"] == 4 * 4 * 4  # 16 groups x G = 4
        assert record["selection/chosen_in_group_std"] >= record["selection/in_group_std"]
        assert np.isfinite(record["loss/pg"])
    assert any(r["selection/chosen_in_group_std"] > r["selection/in_group_std"] for r in records.values())


# -------------------------------------------------------------------------------------------- SCALER


def test_scaler_levels_by_hand():
    rng = np.random.default_rng(0)
    assert np.bincount(difficulty.scaler_levels(2.25, 8, rng), minlength=4).tolist() == [0, 0, 6, 2]
    assert np.bincount(difficulty.scaler_levels(2.5, 5, rng), minlength=4).tolist() == [0, 0, 3, 2]  # round(2.5) = 2
    assert difficulty.scaler_levels(3.0, 4, rng).tolist() == [3, 3, 3, 3]
    assert difficulty.scaler_levels(0.0, 3, rng).dtype == np.int32


def test_scaler_update_by_hand():
    def move(d, correct, **kw):
        kw = {"target": 0.5, "gain": 2.0, "step_cap": 1.0, "max_level": 4, **kw}
        state, metrics = difficulty.scaler_update(difficulty.init_scaler_state(d), np.asarray(correct), **kw)
        return float(state.level), metrics

    assert move(1.0, [1, 1, 1, 0])[0] == 1.5  # acc 0.75: +2 x 0.25
    assert move(1.0, [1, 0])[0] == 1.0  # on target: stays
    assert move(1.0, [1, 1])[0] == 2.0  # acc 1: +1, at the cap
    assert move(0.25, [0, 0])[0] == 0.0  # never below 0
    assert move(3.8, [1, 1])[0] == 4.0  # never above max_level
    assert move(1.0, [1, 1], step_cap=0.25)[0] == 1.25
    assert move(1.0, [1, 1, 1, 0], gain=1.0)[0] == 1.25
    level, metrics = move(2.0, [1, 0, 0, 0])
    assert level == 1.5 and metrics == {"selection/difficulty_level": 1.5, "selection/difficulty_step": -0.5,
                                        "selection/batch_accuracy": 0.25}


class _OfficialDifficultyControl:
    """numpy/Python transcription of SCALER's `DifficultyControl` (recipe/environment/difficulty_control.py) with
    the settings SCALER/set_max_difficulty_and_process_train_data.py writes (activate_function="base", fixed k)."""

    def __init__(self, target=0.5, k=2, dmin=0.0, dmax=50.0, step_cap=1):
        self.target, self.k, self.dmin, self.dmax, self.step_cap = target, k, int(dmin), int(dmax), step_cap
        self.d = 0.0

    def propose_distances(self, batch_size):
        lo, hi = math.floor(self.d), math.ceil(self.d)
        num_hi = round(batch_size * (self.d - lo))
        return [hi] * num_hi + [lo] * (batch_size - num_hi)  # (then random.shuffle)

    def update(self, distance_correct_avg_len_dict):
        batch_avg_correct, batch_len = 0.0, 0
        for _, (correct_avg, leng) in distance_correct_avg_len_dict.items():
            batch_avg_correct += correct_avg * leng
            batch_len += leng
        batch_avg_correct = batch_avg_correct / batch_len if batch_len > 0 else 0.0
        delta = self.k * (batch_avg_correct - self.target)
        delta = max(-self.step_cap, min(self.step_cap, delta))
        self.d = max(self.dmin, min(self.dmax, self.d + delta))


def test_scaler_matches_the_official_controller_on_random_runs():
    rng = np.random.default_rng(1)
    for _ in range(20):
        official, state = _OfficialDifficultyControl(dmax=6), difficulty.init_scaler_state(0)
        for _ in range(30):
            n, g = int(rng.integers(1, 9)), 4
            levels = difficulty.scaler_levels(official.d, n, rng)  # the official float64 d: the same rounding
            assert sorted(levels.tolist()) == sorted(official.propose_distances(n))
            correct = (rng.random((n, g)) < rng.random()).astype(np.float64)  # any accuracy
            by_level = {int(d): (correct[levels == d].mean(), int((levels == d).sum()) * g) for d in np.unique(levels)}
            official.update(by_level)
            state, _ = difficulty.scaler_update(state, correct.reshape(-1), target=0.5, gain=2.0, step_cap=1.0,
                                                max_level=6)
            assert float(state.level) == pytest.approx(official.d, abs=1e-5)


def test_scaler_config_errors_name_the_field():
    config = scaler_recipe.get_config()
    config_lib.parse(config)
    config.task.name = "modular"
    config.selection.difficulty_initial = 5
    with pytest.raises(config_lib.ConfigError) as error:
        config_lib.parse(config)
    assert "config.selection.method='scaler': task 'modular' has no difficulty ladder" in str(error.value)
    assert "config.selection.difficulty_initial=5: must be <= config.selection.difficulty_max=4" in str(error.value)
    config = scaler_recipe.get_config()
    config.selection.scaler_gain = 0.0
    with pytest.raises(config_lib.ConfigError, match=re.escape("config.selection.scaler_gain=0.0: must lie in")):
        config_lib.parse(config)


def _always_right(completion: str, answer: str) -> float:
    del completion, answer
    return 1.0


def test_scaler_moves_in_a_nano_run_and_is_checkpointed(tmp_path, monkeypatch):
    """Every sample right: d rises by the cap (1) per step, the prompts' levels follow, and d is the checkpoint's
    selection item."""
    monkeypatch.setitem(rewards.REWARDS, "always_right", _always_right)
    config = tiny_config(steps=2)
    config.task.reward = "always_right"
    config.selection.update(method="scaler", difficulty_max=4)
    config.eval.every = 2
    job.run(config, str(tmp_path))
    records = {r["step"]: r for r in metrics_lib.read_metrics(str(tmp_path), "rl")}
    assert [records[s]["selection/difficulty_level"] for s in (1, 2)] == [1.0, 2.0]
    assert [records[s]["selection/difficulty_mean"] for s in (1, 2)] == [0.0, 1.0]  # d = 0, then 1: one level
    assert [records[s]["selection/batch_accuracy"] for s in (1, 2)] == [1.0, 1.0]
    ckpt = checkpointing.Checkpointer(os.path.join(str(tmp_path), "checkpoints", "rl"))
    saved = os.path.join(str(tmp_path), "checkpoints", "rl", "2", "state")
    restored = ckpt.restore_latest(ocp.StandardCheckpointer().restore(saved), difficulty.init_scaler_state())
    ckpt.close()
    assert isinstance(restored.selection, difficulty.ScalerState) and float(restored.selection.level) == 2.0


# ---------------------------------------------------------------------------------------------- SELF


def test_keep_greedy_failures_by_hand():
    kept = selection.keep_greedy_failures(np.array([1.0, 0.0, 0.5, 1.0, -1.0]))
    assert kept.tolist() == [False, True, True, False, True]  # the official `reward != 1.0`


def _right_iff_even_answer(completion: str, answer: str) -> float:
    """Correctness that depends on the problem only: the greedy probe solves exactly the even answers."""
    del completion
    return float(int(answer) % 2 == 0)


def test_low_likelihood_trains_on_greedy_failures_in_a_nano_run(tmp_path, monkeypatch):
    """The probe solves the even-answer prompts, so the kept prompts are the odd ones and every rollout of a kept
    group is wrong; greedy-solved prompts only complete the batch (all right), so the step's reward over the rows is
    (num_prompts - kept) / num_prompts exactly."""
    monkeypatch.setitem(rewards.REWARDS, "right_iff_even_answer", _right_iff_even_answer)
    config = tiny_config(steps=2)
    config.task.reward = "right_iff_even_answer"
    config.selection.update(method="low_likelihood", max_gen_rounds=2)
    config.eval.every = 2
    job.run(config, str(tmp_path))
    records = {r["step"]: r for r in metrics_lib.read_metrics(str(tmp_path), "rl")}
    for record in records.values():
        kept = record["selection/kept_groups"]
        assert 0 < kept <= 4 and record["selection/filled_with_dropped"] == 4 - kept
        assert record["reward"] == pytest.approx((4 - kept) / 4)
        assert 0.0 < record["selection/greedy_solved_frac"] < 1.0
        assert record["selection/probe_rounds"] in (1.0, 2.0)
        assert np.isfinite(record["loss/pg"])
