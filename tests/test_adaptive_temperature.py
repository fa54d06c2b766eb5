"""HAPO's adaptive sampling temperature in the RL loop (`train.companions.adaptive_temperature`): the statistics
of a step's token entropies (`rl.entropy.normalized_entropy_stats`) give the learner's scores ĥ and the sampler's
temperatures; the first step samples at the base temperature, later ones spread around it; the statistics are
checkpointed (a resumed run samples as the uninterrupted one); the configs it cannot run in fail validation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm import config as config_lib
from rl4llm.rl import entropy as entropy_lib
from rl4llm.sampling.sampler import entropy_temperature
from rl4llm.train import job
from rl4llm.train import metrics as metrics_lib
from rl4llm.train.companions import adaptive_temperature
from tests.test_multi_turn import agent_config
from tests.test_train import tiny_config


def test_stats_hand_case():
    # log-entropies e = log H of 5 valid tokens (the 6th is masked out): [-2, -1, 0, 1, 3]
    entropy = jnp.exp(jnp.asarray([[-2.0, -1.0, 0.0, 1.0, 3.0, 9.0]]))
    mask = jnp.asarray([[1, 1, 1, 1, 1, 0]], jnp.float32)
    stats = entropy_lib.normalized_entropy_stats(entropy, mask, pivot=0.5)  # nearest quantile 0.5 of 5: e = 0
    spread = np.sqrt((4 + 1 + 0 + 1 + 9) / 5)
    np.testing.assert_allclose(stats, [0.0, spread, spread / 3.0, spread / 2.0], rtol=1e-6)
    scores = entropy_lib.normalized_entropy_scores(entropy, mask, pivot=0.5)
    np.testing.assert_allclose(scores, [[-1.0, -0.5, 0.0, 1 / 3, 1.0, 0.0]], rtol=1e-6, atol=1e-7)


def test_scores_are_the_stats_applied_and_the_sampler_reads_the_same_scores():
    """ĥ of the learner (normalized_entropy_scores) is z·scale with the stats; the sampler's temperature from the same
    stats is T(1 + τ·ĥ) for logits with those entropies (up to the sampler's eps of 1e-6 in the std; as in the
    official code the sampler floors H at 1e-6 and the statistics at 1e-8, so the logits here keep H > 1e-6)."""
    logits = jax.random.normal(jax.random.key(0), (40, 12)) * jnp.linspace(0.2, 3.0, 40)[:, None]
    entropy = entropy_lib.from_logits(logits)[None]  # [1, 40]: one row of 40 tokens
    assert float(entropy.min()) > 1e-4
    mask = jnp.ones_like(entropy).at[0, ::7].set(0.0)  # some tokens are not in the statistics
    stats = entropy_lib.normalized_entropy_stats(entropy, mask, pivot=0.8)
    scores = entropy_lib.normalized_entropy_scores(entropy, mask, pivot=0.8)
    assert float(scores.min()) == pytest.approx(-1.0) and float(scores.max()) == pytest.approx(1.0)
    valid = np.asarray(mask[0]) > 0
    temperature = entropy_temperature(logits, 0.9, stats, 0.1)
    np.testing.assert_allclose(np.asarray(temperature)[valid], 0.9 * (1 + 0.1 * np.asarray(scores[0]))[valid],
                               rtol=1e-5)


def test_initial_stats_sample_every_token_at_the_base_temperature():
    logits = jax.random.normal(jax.random.key(1), (16, 12)) * 4.0
    np.testing.assert_array_equal(entropy_temperature(logits, 0.7, adaptive_temperature.initial_stats(), 0.3),
                                  np.full(16, 0.7, np.float32))


def _config(**overrides):
    config = tiny_config(num_minibatches=2)  # several updates: old log-probs from the base-temperature behaviour pass
    config.sampling.temperature_tau = 0.3
    config.rl.steps = 3
    config.eval.every = 1000
    config.update_from_flattened_dict(overrides)
    return config


def test_first_step_at_the_base_temperature_then_spread_and_resumes_exactly(tmp_path):
    config = _config()
    full = str(tmp_path / "full")
    job.run(config, full)
    records = {r["step"]: r for r in metrics_lib.read_metrics(full, "rl")}
    first, later = records[1], records[2]
    assert first["temperature/std"] == 0.0 and first["temperature/mean"] == pytest.approx(1.0)
    assert later["temperature/std"] > 0.01
    assert 0.7 - 1e-6 <= later["temperature/min"] < later["temperature/max"] <= 1.3 + 1e-6
    for record in records.values():  # each step's statistics of its own tokens, for the next step's sampler
        assert record["temperature/entropy_spread"] > 0 and record["temperature/entropy_scale_pos"] > 0
    resumed = str(tmp_path / "resumed")
    job.run(config, resumed, stop_after_rl_step=2)  # checkpoint at step 2 holds step 2's statistics
    job.run(config, resumed)
    again = {r["step"]: r for r in metrics_lib.read_metrics(resumed, "rl")}
    for key in ("temperature/mean", "temperature/std", "temperature/entropy_centre", "loss/pg"):
        assert again[3][key] == records[3][key], key


def test_configs_the_adaptive_temperature_cannot_run_in_fail_validation():
    tree = _config(**{"tree.enabled": True, "tree.initial_paths": 2, "tree.branch_points": 1, "tree.branches": 1,
                      "tree.iterations": 1, "rl.advantage": "treerl"})
    with pytest.raises(ValueError, match=r"config.sampling.temperature_tau=0.3: tree rollouts"):
        config_lib.parse(tree)
    agent = agent_config()
    agent.sampling.temperature_tau = 0.05
    with pytest.raises(ValueError, match=r"config.sampling.temperature_tau=0.05: agent runs"):
        config_lib.parse(agent)
