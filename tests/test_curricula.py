"""Curricula and group filters (rl4llm.train.curricula): StarPO-S's variance filter on hand-made tables, against a
numpy transcription of RAGEN's code, in the config checks and in a nano run."""

import re

import numpy as np
import pytest

from configs import starpo_s as starpo_s_recipe
from rl4llm import config as config_lib
from rl4llm import rewards
from rl4llm.data import selection
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
