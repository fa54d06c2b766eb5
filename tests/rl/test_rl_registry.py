"""Registry: lookup errors, the calling convention, and that every method follows it."""

import inspect

import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm.rl import advantages, losses, registry


def test_unknown_names_list_known_ones():
    with pytest.raises(ValueError, match="grpo"):
        registry.get_advantage("nope")
    with pytest.raises(ValueError, match="ppo_clip"):
        registry.get_policy_loss("nope")


@pytest.mark.parametrize("name", sorted(registry.POLICY_LOSSES))
def test_every_loss_accepts_the_common_keywords(name):
    params = inspect.signature(registry.POLICY_LOSSES[name]).parameters
    for kw in ("logp", "old_logp", "advantages", "mask", "agg_mode", "agg_weights", "is_weights"):
        assert kw in params, (name, kw)
    for p in params.values():
        if p.name not in registry.LOSS_INPUTS:
            assert p.kind == p.KEYWORD_ONLY and p.default is not p.empty, (name, p.name)


@pytest.mark.parametrize("name", sorted(registry.ADVANTAGES))
def test_every_advantage_declares_only_known_inputs_or_defaulted_kwargs(name):
    for p in inspect.signature(registry.ADVANTAGES[name]).parameters.values():
        if p.name not in registry.ADVANTAGE_INPUTS:
            assert p.kind == p.KEYWORD_ONLY and p.default is not p.empty, (name, p.name)


def test_advantage_adapter_drops_unused_inputs_and_forwards_hparams():
    scores = jnp.array([1.0, 0.0, 2.0, 4.0])
    gids = jnp.array([0, 0, 1, 1])
    mask = jnp.ones((4, 3))
    fn = registry.get_advantage("grpo")
    a = fn(scores, gids, mask, num_groups=2, values=jnp.zeros((4, 3)), normalize_std=False)
    np.testing.assert_allclose(a, advantages.grpo(scores, gids, num_groups=2, normalize_std=False))
    np.testing.assert_allclose(registry.get_advantage("dr_grpo")(scores, gids, mask, num_groups=2), a)
    with pytest.raises(TypeError, match="normalise_std"):
        fn(scores, gids, mask, num_groups=2, normalise_std=False)


def test_loss_adapter():
    logp = jnp.log(jnp.array([[0.5, 0.25]]))
    args = (logp, jnp.zeros_like(logp), jnp.ones((1,)), jnp.ones((1, 2)))
    got = registry.get_policy_loss("ppo_clip")(*args, clip_low=0.1, entropy=jnp.zeros((1, 2)))
    want = losses.ppo_clip(*args, clip_low=0.1)
    np.testing.assert_allclose(got[0], want[0])
    assert registry.agg_mode_for("ppo_clip", "seq-mean-token-sum") == "seq-mean-token-sum"


def test_last_token_rewards():
    mask = jnp.array([[1, 1, 0], [1, 0, 1], [0, 0, 0]])
    r = registry.last_token_rewards(jnp.array([2.0, 3.0, 4.0]), mask)
    np.testing.assert_array_equal(r, [[0, 2, 0], [0, 0, 3], [0, 0, 0]])
