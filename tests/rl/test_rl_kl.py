"""KL estimators: zeros, non-negativity, exact unbiasedness by enumeration, straight-through gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm.rl import kl as eager_kl

from rl_testing import compiled

kl = compiled(eager_kl)


@pytest.mark.parametrize("kind", kl.KINDS)
def test_zero_at_equal_logprobs(kind):
    logp = jnp.log(jnp.array([0.1, 0.5, 0.9]))
    np.testing.assert_array_equal(kl.estimate(logp, logp, kind), 0.0)


@pytest.mark.parametrize("kind", ["k1", "abs", "k2", "k3", "k3+", "abs+"])
def test_gradient_at_equal_logprobs(kind):
    # The first step of a KL-regularised run has π = π_ref exactly. Only k1's gradient is nonzero there (1);
    # |Δ| has torch's subgradient sign(0) = 0 (jnp.abs would give 1), k2/k3 are flat at Δ = 0.
    logp = jnp.log(jnp.array([0.1, 0.5, 0.9]))
    grad = jax.grad(lambda x: jnp.sum(eager_kl.estimate(x, logp, kind)))(logp)
    np.testing.assert_array_equal(np.asarray(grad), 1.0 if kind == "k1" else 0.0)


def test_hand_values():
    # Δ = logp − ref = log(0.5) − log(0.25) = log 2 = 0.693147
    # k1 = 0.693147, abs = 0.693147, k2 = ½·0.480453 = 0.240227, k3 = e^{−Δ} + Δ − 1 = 0.5 + 0.693147 − 1 = 0.193147
    logp, ref = jnp.log(0.5), jnp.log(0.25)
    d = np.log(2.0)
    np.testing.assert_allclose(kl.estimate(logp, ref, "k1"), d, rtol=1e-6)
    np.testing.assert_allclose(kl.estimate(ref, logp, "abs"), d, rtol=1e-6)
    np.testing.assert_allclose(kl.estimate(logp, ref, "k2"), 0.5 * d * d, rtol=1e-6)
    np.testing.assert_allclose(kl.estimate(logp, ref, "k3"), 0.5 + d - 1, rtol=1e-5)
    np.testing.assert_allclose(kl.estimate(logp, ref, "low_var_kl"), 0.5 + d - 1, rtol=1e-5)


def test_k3_nonnegative_and_clamped():
    x = jnp.linspace(-30.0, 30.0, 601)
    k3 = kl.estimate(x, jnp.zeros_like(x), "k3")
    assert float(k3.min()) >= 0.0
    assert float(k3.max()) == 10.0  # value clamp at 10 (and log-ratio clamp at ±20 keeps it finite)


def test_unbiased_on_enumerable_categorical():
    # E_{x~π}[k] = Σ_x π(x)·k(x) must equal KL(π‖π_ref) = Σ π log(π/π_ref) for k1 and k3.
    pi = jnp.array([0.1, 0.2, 0.3, 0.4])
    ref = jnp.array([0.25, 0.25, 0.4, 0.1])
    true_kl = jnp.sum(pi * jnp.log(pi / ref))
    for kind in ("k1", "k3", "k3+"):
        expectation = jnp.sum(pi * kl.estimate(jnp.log(pi), jnp.log(ref), kind))
        np.testing.assert_allclose(expectation, true_kl, rtol=1e-5)


@pytest.mark.parametrize("kind", ["k3+", "k1+", "abs+", "low_var_kl+"])
def test_straight_through_value_and_grad(kind):
    logp = jnp.log(jnp.array([0.1, 0.5, 0.8]))
    ref = jnp.log(jnp.array([0.3, 0.2, 0.8]))
    base = kind[:-1]
    np.testing.assert_allclose(kl.estimate(logp, ref, kind), kl.estimate(logp, ref, base), rtol=1e-6)
    g_plus = jax.jit(jax.grad(lambda lp: jnp.sum(kl.estimate(lp, ref, kind))))(logp)
    g_k2 = jax.jit(jax.grad(lambda lp: jnp.sum(kl.estimate(lp, ref, "k2"))))(logp)
    np.testing.assert_allclose(g_plus, g_k2, rtol=1e-6)


def test_unknown_kind():
    with pytest.raises(ValueError, match="k3"):
        kl.estimate(jnp.zeros(2), jnp.zeros(2), "full")
