"""config.sampling.rows_per_call: an RL step's rollout generated in calls of whole groups (`train.completions.
sample_completions`), every call the same compiled sampler program, equals the rollout of one call: each row draws
from its own key stream fold_in(key, row index in the whole rollout) (`sampling.generate`'s row_offset)."""

import jax
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from configs import default
from rl4llm import config as config_lib
from rl4llm import models
from rl4llm import sampling
from rl4llm.train import batches
from rl4llm.train import completions
from rl4llm.train import rollouts
from rl4llm.train import setup as setup_lib

G = 2


def nano_config(**overrides):
    c = default.get_config()
    c.model.preset = "nano"
    c.eval.num_examples = 8
    c.rl.num_prompts, c.rl.num_generations = 6, G
    c.sampling.max_new_tokens = 10
    c.sampling.prompt_bucket = 4
    for section, fields in overrides.items():
        for name, value in fields.items():
            setattr(getattr(c, section), name, value)
    return c


@pytest.fixture(scope="module")
def nano(tmp_path_factory):
    """(config, setup, params) of the nano model, perturbed far from uniform."""
    config = config_lib.parse(nano_config())
    setup = setup_lib.build_setup(config, str(tmp_path_factory.mktemp("setup")))
    flat, unravel = ravel_pytree(models.init_params(setup.model_cfg, jax.random.key(0)))
    return config, setup, unravel(flat + 0.3 * jax.random.normal(jax.random.key(1), flat.shape))


@pytest.mark.parametrize("shared_prefix_prefill", [False, True])
def test_chunked_rollout_equals_the_one_call_rollout(nano, shared_prefix_prefill):
    """5 prompts x G in calls of 2 prompts (the last call padded with a copy of the last prompt) == one call of all
    5: the same tokens, masks, finished flags and rewards, log-probs within float rounding; the calls share one
    compiled program."""
    config, setup, params = nano
    config = config.replace(sampling={"shared_prefix_prefill": shared_prefix_prefill})
    examples = setup.selector.stream_examples(0, 5)
    args = ([e.prompt for e in examples], [e.answer for e in examples], np.full(5, G), jax.random.key(2), [""] * 5)
    whole, _ = rollouts.generate_rows(config, setup, params, *args)
    chunked_config = config.replace(sampling={"rows_per_call": 2 * G})
    compiled = sampling.generate._cache_size()
    chunked, _ = rollouts.generate_rows(chunked_config, setup, params, *args)
    assert sampling.generate._cache_size() == compiled + 1  # three calls, one program
    assert len(chunked.scores) == 5 * G
    for name in ("prompt_tokens", "prompt_mask", "completion_tokens", "completion_mask", "finished", "scores"):
        np.testing.assert_array_equal(getattr(chunked, name), getattr(whole, name), err_msg=name)
    np.testing.assert_allclose(chunked.logprobs, whole.logprobs, atol=1e-5, rtol=0)
    assert len({tuple(row) for row in whole.completion_tokens.tolist()}) > 5  # rows of one prompt differ


def test_a_rows_stream_depends_on_its_index_in_the_rollout_only(nano):
    """Rows [4, 8) of one call == a call of those rows with row_offset 4; with offset 0 (the first rows' streams)
    they differ, so the offset is what makes the chunks equal."""
    config, setup, params = nano
    examples = setup.selector.stream_examples(0, 4)
    tokens, mask = batches.encode_prompts(setup.tokenizer, [e.prompt for e in examples], config.sampling.prompt_bucket)
    rows = np.repeat(np.arange(4), G)
    key = jax.random.key(3)
    whole = jax.device_get(sampling.generate(setup.model_cfg, params, tokens[rows], mask[rows], key,
                                             setup.rollout_cfg))
    late = rows[4:]
    offset = jax.device_get(sampling.generate(setup.model_cfg, params, tokens[late], mask[late], key,
                                              setup.rollout_cfg, row_offset=4))
    first_streams = jax.device_get(sampling.generate(setup.model_cfg, params, tokens[late], mask[late], key,
                                                     setup.rollout_cfg))
    np.testing.assert_array_equal(offset.completion_tokens, whole.completion_tokens[4:])
    np.testing.assert_allclose(offset.logprobs, whole.logprobs[4:], atol=1e-5, rtol=0)
    assert (first_streams.completion_tokens != whole.completion_tokens[4:]).any()


@pytest.mark.parametrize("overrides,message", [
    (dict(sampling={"rows_per_call": 3}), "multiple of config.rl.num_generations=2"),
    (dict(sampling={"rows_per_call": 8}), "must divide the step's num_prompts\\*num_generations=12"),
    (dict(sampling={"rows_per_call": 4}, selection={"method": "knapsack"}), "groups of different sizes"),
    (dict(sampling={"rows_per_call": 4}, tree={"enabled": True, "initial_paths": 2, "branch_points": 0}),
     "tree rollouts"),
])
def test_rows_per_call_errors_name_the_field(overrides, message):
    with pytest.raises(config_lib.ConfigError, match=f"config.sampling.rows_per_call=.*{message}"):
        config_lib.parse(nano_config(**overrides))


def test_rows_per_call_dividing_the_step_parses():
    config = config_lib.parse(nano_config(sampling={"rows_per_call": 4}))
    assert completions.prompts_per_call(config, config.rl.num_prompts) == 2
    assert completions.prompts_per_call(config_lib.parse(nano_config()), 6) == 6
