"""Entropy from logits."""

import jax
import jax.numpy as jnp
import numpy as np

from rl4llm.rl import entropy as eager_entropy

from rl_testing import compiled

entropy = compiled(eager_entropy)


def test_uniform_and_one_hot():
    np.testing.assert_allclose(entropy.from_logits(jnp.zeros((2, 8))), np.log(8.0), rtol=1e-6)
    np.testing.assert_allclose(entropy.from_logits(jnp.array([0.0, -1e4, -1e4])), 0.0, atol=1e-6)


def test_matches_definition_and_dtype():
    z = jax.random.normal(jax.random.PRNGKey(0), (3, 5, 11)).astype(jnp.bfloat16)
    h = entropy.from_logits(z)
    assert h.shape == (3, 5) and h.dtype == jnp.float32
    p = jax.nn.softmax(z.astype(jnp.float32), -1)
    np.testing.assert_allclose(h, -jnp.sum(p * jnp.log(p), -1), rtol=1e-5)


def test_minus_inf_logits():
    z = jnp.array([0.0, 0.0, -jnp.inf])
    np.testing.assert_allclose(entropy.from_logits(z), np.log(2.0), rtol=1e-6)
    g = jax.grad(entropy.from_logits)(z)
    assert np.all(np.isfinite(g))
