"""D³S's down-sampling (rl4llm.rl.downsampling, rl4llm.train.downsampling): the max-variance subset against brute
force, its balance on 0/1 rewards, the |A|·H token selection and the schedule by hand, and a run that uses both."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm import config as config_lib
from rl4llm.rl import downsampling
from rl4llm.train import job
from rl4llm.train import metrics as metrics_lib
from tests.test_multi_turn import agent_config
from tests.test_train import tiny_config


def _brute_force_variance(values: np.ndarray, keep: int) -> float:
    return max(np.var(values[list(s)]) for s in itertools.combinations(range(len(values)), keep))


@pytest.mark.parametrize("seed", range(6))
def test_max_variance_subset_equals_brute_force_in_every_group(seed):
    rng = np.random.default_rng(seed)
    sizes = [6, 5, 2, 7]
    values = np.concatenate([np.round(rng.normal(size=n), 1) for n in sizes])  # rounded: ties occur
    group_ids = np.repeat(np.arange(len(sizes)), sizes)
    keep = 3
    chosen = np.asarray(downsampling.max_variance_subset(jnp.asarray(values), jnp.asarray(group_ids),
                                                         num_groups=len(sizes), keep=keep))
    for g, n in enumerate(sizes):
        rows = chosen[group_ids == g]
        if n <= keep:
            assert rows.tolist() == [1.0] * n  # small groups are kept whole
            continue
        assert rows.sum() == keep
        kept = values[group_ids == g][rows == 1]
        assert np.var(kept) == pytest.approx(_brute_force_variance(values[group_ids == g], keep), abs=1e-6)


def test_binary_rewards_keep_a_balanced_subset():
    # advantages of a 0/1 group with 2 right of 8: the max-variance 4 hold both right ones and 2 wrong ones
    rewards = np.asarray([0, 1, 0, 0, 0, 1, 0, 0], np.float32)
    adv = rewards - rewards.mean()
    chosen = np.asarray(downsampling.max_variance_subset(jnp.asarray(adv), jnp.zeros(8, jnp.int32), num_groups=1,
                                                         keep=4))
    assert chosen.sum() == 4 and chosen[rewards == 1].sum() == 2
    # 5 right of 8, keep 6: 3 right and 3 wrong (balanced as far as the 3 wrong ones allow)
    rewards = np.asarray([1, 1, 0, 1, 0, 1, 1, 0], np.float32)
    chosen = np.asarray(downsampling.max_variance_subset(jnp.asarray(rewards - rewards.mean()),
                                                         jnp.zeros(8, jnp.int32), num_groups=1, keep=6))
    assert chosen.sum() == 6 and chosen[rewards == 0].sum() == 3


def test_advantage_entropy_tokens_by_hand():
    adv = jnp.asarray([1.0, -2.0])  # per row
    entropy = jnp.asarray([[0.1, 0.5, 0.2, 9.0], [0.1, 0.3, 0.05, 0.4]])
    mask = jnp.asarray([[1, 1, 1, 0], [1, 1, 1, 1]], jnp.float32)
    # |A|·H on valid tokens: row 0: .1 .5 .2 (the 9.0 is padding); row 1: .2 .6 .1 .8 -> top half of 7 tokens
    # (linear quantile 0.5 of the 7 scores = 0.2): scores >= 0.2 are kept, ties included
    kept = downsampling.advantage_entropy_token_mask(adv, entropy, mask, keep_frac=0.5)
    np.testing.assert_array_equal(kept, [[0, 1, 1, 0], [1, 1, 0, 1]])
    everything = downsampling.advantage_entropy_token_mask(adv, entropy, mask, keep_frac=1.0)
    np.testing.assert_array_equal(everything, mask)


def test_schedule_by_hand():
    fractions = [downsampling.keep_fraction(s, start=0.25, anneal_steps=3) for s in (1, 2, 3, 4, 5)]
    np.testing.assert_allclose(fractions, [0.25, 0.5, 0.75, 1.0, 1.0])
    assert downsampling.keep_fraction(9, start=0.3, anneal_steps=0) == 0.3  # no schedule: constant
    assert downsampling.rows_kept(0.5, 16) == 8 and downsampling.rows_kept(0.01, 16) == 2  # a variance needs two
    assert downsampling.rows_kept(1.0, 16) == 16 and downsampling.rows_kept(0.34, 16) == 6


def test_a_run_drops_rollouts_and_tokens_and_relaxes_on_schedule(tmp_path, monkeypatch):
    from rl4llm import rewards
    from tests.test_recipes import _parity_reward  # groups with spread rewards: non-zero advantages to select by

    monkeypatch.setitem(rewards.REWARDS, "parity", _parity_reward)
    config = tiny_config()
    config.task.reward = "parity"
    config.rl.steps = 3
    config.eval.every = 1000
    config.rl.rollout_selection = "max_variance"
    config.rl.rollout_selection_frac = 0.5
    config.rl.token_selection = "advantage_entropy"
    config.rl.token_selection_rho = 0.5
    config.rl.downsample_anneal_steps = 2  # shares 0.5, 0.75, 1.0 at steps 1, 2, 3
    job.run(config, str(tmp_path))
    records = {r["step"]: r for r in metrics_lib.read_metrics(str(tmp_path), "rl")}
    # 16 rollouts, across the batch: 8 kept at step 1, 12 at step 2, all at step 3
    assert [records[s]["downsample/rollouts_dropped_frac"] for s in (1, 2, 3)] == [0.5, 0.25, 0.0]
    for step in (1, 2, 3):
        record = records[step]
        assert record["downsample/adv_std_kept"] >= record["downsample/adv_std_all"] - 1e-6
        assert np.isfinite(record["loss/pg"])
    assert records[1]["token_selection_frac"] < 1.0 and records[3]["token_selection_frac"] == 1.0


def test_configs_down_sampling_cannot_run_in_fail_validation():
    gae = tiny_config()
    gae.rl.advantage = "gae"
    gae.rl.rollout_selection = "max_variance"
    with pytest.raises(ValueError, match=r"config.rl.rollout_selection='max_variance': with a critic"):
        config_lib.parse(gae)
    agent = agent_config()
    agent.rl.token_selection = "advantage_entropy"
    with pytest.raises(ValueError, match=r"config.rl.token_selection='advantage_entropy': selects among single-turn"):
        config_lib.parse(agent)
