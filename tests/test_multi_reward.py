"""Multi-reward advantages from the config: the reward pipeline's components [N, K], their validation, and
rl.advantage=gdpo / bnpo (decomposition) on them in the main loop."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from configs import default
from rl4llm import rewards
from rl4llm.rewards import pipeline
from rl4llm.rl import advantages
from rl4llm import config as config_lib
from rl4llm.config import validation
from rl4llm.train import inputs as inputs_lib
from tests.test_recipes import _run_from_sft, sft_workdir, shrink  # noqa: F401  (module-scoped SFT fixture)

TEXTS = ["<answer>1+2</answer> #3", "#3", "<answer>#4</answer>", "#4 <answer></answer><answer></answer>"]
ANSWERS = ["3", "3", "3", "3"]
EXTRAS = (("format_answer_tag", 0.5), ("final_text", 0.25))


def _score(spec, lengths=(4, 4, 4, 4)):
    with pipeline.RewardPipeline(spec) as p:
        return p.score(TEXTS, ANSWERS, np.asarray(lengths), np.zeros(4, int), max_length=16)


def test_components_are_the_reward_functions_main_first_in_config_order():
    scores, main, components, _ = _score(pipeline.RewardSpec("exact_answer", extra_weights=EXTRAS))
    expected = np.asarray(
        [[rewards.get_reward(name)(t, a) for name in ("exact_answer", "format_answer_tag", "final_text")]
         for t, a in zip(TEXTS, ANSWERS)], np.float32,
    )
    # exact_answer: the integer after the last '#'; answer_tag: exactly one pair; final_text: the text after '#'
    np.testing.assert_array_equal(expected, [[1, 1, 1], [1, 0, 1], [0, 1, 0], [0, 0, 0]])
    assert components.dtype == np.float32 and components.shape == (4, 3)
    np.testing.assert_array_equal(components, expected)
    np.testing.assert_array_equal(main, components[:, 0])
    np.testing.assert_allclose(scores, components @ [1.0, 0.5, 0.25])  # [1.75, 1.25, 0.5, 0]


def test_components_conditional_mode_and_no_length_shaping():
    spec = pipeline.RewardSpec(
        "exact_answer", extra_weights=EXTRAS, extra_mode="if_correct",
        length_shaping="dler_truncation", length_kwargs=(("limit", 10),),
    )
    scores, _, components, _ = _score(spec, lengths=(4, 12, 4, 4))
    # if_correct: the extras count only where the answer is right (rows 0, 1), so row 2 loses its format reward
    np.testing.assert_array_equal(components, [[1, 1, 1], [1, 0, 1], [0, 0, 0], [0, 0, 0]])
    # DLER truncation zeroes row 1 (12 > 10 tokens) in the combined reward only
    np.testing.assert_allclose(scores, [1.75, 0.0, 0.0, 0.0])


def test_single_reward_has_one_component():
    scores, main, components, _ = _score(pipeline.RewardSpec("exact_answer"))
    np.testing.assert_array_equal(components, main[:, None])
    np.testing.assert_array_equal(scores, main)


def _config(advantage, extra_rewards="", **task):
    config = default.get_config()
    config.rl.advantage = advantage
    config.task.extra_rewards = extra_rewards
    config.task.update(task)
    return config


def test_validation_of_reward_component_estimators():
    with pytest.raises(config_lib.ConfigError, match=r"config\.task\.extra_rewards=''"):
        config_lib.parse(_config("gdpo"))
    config_lib.parse(_config("gdpo", "format_answer_tag:0.5"))
    config_lib.parse(_config("bnpo", length_shaping="dler_truncation"))  # no extras: the combined reward
    with pytest.raises(config_lib.ConfigError, match=r"config\.task\.length_shaping='dler_truncation'"):
        config_lib.parse(_config("bnpo", "format_answer_tag:0.5", length_shaping="dler_truncation"))
    config = _config("gdpo", "format_answer_tag:0.5")
    config.rl.kl_in_reward = True
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.kl_in_reward"):
        config_lib.parse(config)


def test_bnpo_rejects_rewards_that_leave_its_range_unless_the_range_is_set():
    """bnpo scales rewards by [r_min, r_max] = [0, 1]: a group mean of -0.0025 (a penalty on one of four zero
    rewards) already gives NaN advantages, so shapers that add bonuses or penalties, and KL in the reward, are
    config errors unless advantage_kwargs states the range."""
    scores = jnp.array([-0.01, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    assert jnp.isnan(advantages.bnpo(scores, jnp.array([0, 0, 0, 0, 1, 1, 1, 1]), num_groups=2)).any()
    for shaper in ("dapo_overlong", "kimi_length_penalty", "laser", "laser_d"):
        with pytest.raises(config_lib.ConfigError, match=rf"config\.task\.length_shaping='{shaper}' adds"):
            config_lib.parse(_config("bnpo", length_shaping=shaper))
    config = _config("bnpo", length_shaping="dapo_overlong")
    config.rl.advantage_kwargs.r_min = -1.0
    config_lib.parse(config)
    config = _config("bnpo")
    config.rl.kl_in_reward = True
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.kl_in_reward=True subtracts"):
        config_lib.parse(config)


def test_which_runs_get_components_and_gdpo_weights():
    assert not validation.uses_reward_components(config_lib.parse(default.get_config()))
    assert not validation.uses_reward_components(config_lib.parse(_config("grpo", "format_answer_tag:0.5")))
    assert not validation.uses_reward_components(config_lib.parse(_config("bnpo")))
    assert validation.uses_reward_components(config_lib.parse(_config("bnpo", "format_answer_tag:0.5")))
    assert "weights" not in inputs_lib.advantage_kwargs(config_lib.parse(_config("bnpo", "format_answer_tag:0.5")))
    gdpo = inputs_lib.advantage_kwargs(config_lib.parse(_config("gdpo", "format_answer_tag:0.5,final_text:0.25")))
    assert gdpo == {"weights": (1.0, 0.5, 0.25)}


def test_bnpo_on_components_differs_from_bnpo_on_the_combined_reward():
    """One group of 4, alpha = beta = 3/2, so the weight is 1/BetaPDF(p) = pi / (8 sqrt(p (1 - p))).

    components c1 = [1, 1, 1, 0] (p = 3/4), c2 = [1, 0, 0, 0] (p = 1/4): both weights pi / (8 sqrt(3/16)) = 0.9069;
    A = ((c1 - 3/4) + (c2 - 1/4)) / 2 * 0.9069 = [0.5, 0, 0, -0.5] * 0.9069.
    combined (c1 + c2) / 2 = [1, .5, .5, 0] (p = 1/2, weight pi / 4): A = [0.5, 0, 0, -0.5] * 0.7854.
    """
    components = jnp.asarray([[1, 1], [1, 0], [1, 0], [0, 0]], jnp.float32)
    mask, group_ids = jnp.ones((4, 2)), jnp.zeros(4, jnp.int32)
    kwargs = (("alpha", 1.5), ("beta", 1.5))
    combined = jnp.mean(components, -1)
    per_component, _ = inputs_lib.advantages(
        combined, group_ids, mask, name="bnpo", num_groups=1, kwargs=kwargs, reward_components=components
    )
    on_combined, _ = inputs_lib.advantages(combined, group_ids, mask, name="bnpo", num_groups=1, kwargs=kwargs)
    scale = math.pi / (8 * math.sqrt(3 / 16))
    np.testing.assert_allclose(per_component[:, 0], np.array([0.5, 0, 0, -0.5]) * scale, atol=1e-6)
    np.testing.assert_allclose(on_combined[:, 0], np.array([0.5, 0, 0, -0.5]) * math.pi / 4, atol=1e-6)


def test_gdpo_with_a_format_reward_runs_without_nans(sft_workdir, tmp_path):  # noqa: F811
    config = shrink(default.get_config())
    config.rl.advantage = "gdpo"
    config.task.extra_rewards = "format_answer_tag:0.5"
    config_lib.parse(config)
    records = _run_from_sft(config, sft_workdir, str(tmp_path / "gdpo"))
    for record in records.values():
        assert "reward/format_answer_tag" in record and "loss/pg" in record
