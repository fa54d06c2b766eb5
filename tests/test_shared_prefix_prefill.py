"""config.sampling.shared_prefix_prefill in the RL step's rollouts (`train.rollouts.generate_rows`): each prompt
prefilled once and its KV cache forked to its rows (`models.fork_rows`) gives the rows the repeated prefill gives,
up to float rounding."""

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from configs import default
from rl4llm import config as config_lib
from rl4llm import models
from rl4llm.train import rollouts
from rl4llm.train import setup as setup_lib


def test_generate_rows_with_shared_prefix_prefill_matches_the_repeated_prefill(tmp_path):
    c = default.get_config()
    c.model.preset = "nano"
    c.eval.num_examples = 8
    c.sampling.max_new_tokens = 10
    c.sampling.prompt_bucket = 4
    config = config_lib.parse(c)
    setup = setup_lib.build_setup(config, str(tmp_path))
    flat, unravel = ravel_pytree(models.init_params(setup.model_cfg, jax.random.key(0)))
    params = unravel(flat + 0.3 * jax.random.normal(jax.random.key(1), flat.shape))  # far from uniform
    examples = setup.selector.stream_examples(0, 3)
    args = ([e.prompt for e in examples], [e.answer for e in examples], [2, 4, 1], jax.random.key(2), ["", "", ""])
    repeated, _ = rollouts.generate_rows(config, setup, params, *args)
    shared_config = config.replace(sampling={"shared_prefix_prefill": True})
    shared, _ = rollouts.generate_rows(shared_config, setup, params, *args)
    for name in ("prompt_tokens", "prompt_mask", "completion_tokens", "completion_mask", "finished", "scores"):
        np.testing.assert_array_equal(getattr(shared, name), getattr(repeated, name), err_msg=name)
    np.testing.assert_allclose(shared.logprobs, repeated.logprobs, atol=1e-5, rtol=0)
    assert len({tuple(row) for row in shared.completion_tokens[2:6].tolist()}) > 1  # one prompt's 4 rows differ
    assert len({tuple(row) for row in shared.prompt_tokens.tolist()}) == 3
