"""Policy losses: hand cases, gradients, broadcasting, micro-batch invariance."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm.rl import aggregation as agg
from rl4llm.rl import losses as eager_losses

from rl_testing import compiled

losses = compiled(eager_losses)

# One row, six tokens, old_logp = 0 so ρ = exp(logp). Default clip 0.2/0.2, dual-clip c = 3.
#   tok  A    ρ     L1=−Aρ  L2=−A·clip(ρ,.8,1.2)  Lc=max   dual (A<0): min(3, Lc)   dL/dlogp
#   0   +1   1.1   −1.1    −1.1                  −1.1     −                         −1.1
#   1   +1   1.5   −1.5    −1.2                  −1.2     −                          0   (clipped)
#   2   −1   0.5   +0.5    +0.8                  +0.8     0.8                        0   (clipped)
#   3   −1   4.0   +4.0    +1.2                  +4.0     3.0 (dual clip)            0
#   4   −1   1.1   +1.1    +1.1                  +1.1     1.1                       +1.1
#   5   +1   0.5   −0.5    −0.8                  −0.5     −                         −0.5
# token-mean = (−1.1 − 1.2 + 0.8 + 3.0 + 1.1 − 0.5)/6 = 2.1/6 = 0.35
# clip_frac = #[L2 > L1] / 6 = 2/6 (tokens 1, 2): clip_frac_high = 1/6 (token 1: A > 0, ρ > 1.2),
# clip_frac_low = 1/6 (token 2: A < 0, ρ < 0.8); dual_clip_frac = 1/6 (token 3); token 5 (A > 0, ρ < 0.8) is
# outside the range on the side that does not bind: in no fraction
RATIOS = jnp.array([[1.1, 1.5, 0.5, 4.0, 1.1, 0.5]])
ADV = jnp.array([[1.0, 1.0, -1.0, -1.0, -1.0, 1.0]])
MASK = jnp.ones((1, 6))


def test_ppo_clip_hand_case():
    logp = jnp.log(RATIOS)
    loss, m = losses.ppo_clip(logp, jnp.zeros_like(logp), ADV, MASK)
    np.testing.assert_allclose(loss, 0.35, rtol=1e-5)
    np.testing.assert_allclose(m["clip_frac"], 2 / 6, rtol=1e-6)
    np.testing.assert_allclose(m["dual_clip_frac"], 1 / 6, rtol=1e-6)
    np.testing.assert_allclose(m["clip_frac_high"], 1 / 6, rtol=1e-6)
    np.testing.assert_allclose(m["clip_frac_low"], 1 / 6, rtol=1e-6)
    np.testing.assert_allclose(m["approx_kl"], -jnp.mean(jnp.log(RATIOS)), rtol=1e-5)
    np.testing.assert_allclose(m["ratio_max"], 4.0, rtol=1e-6)
    np.testing.assert_allclose(m["ratio_min"], 0.5, rtol=1e-6)
    np.testing.assert_allclose(m["ratio_mean"], 8.7 / 6, rtol=1e-6)
    grad = jax.jit(jax.grad(lambda lp: losses.ppo_clip(lp, jnp.zeros_like(lp), ADV, MASK)[0]))(logp)
    np.testing.assert_allclose(grad, [[-1.1 / 6, 0, 0, 0, 1.1 / 6, -0.5 / 6]], rtol=1e-5, atol=1e-7)


def test_dual_clip_disabled_and_clip_higher():
    logp = jnp.log(RATIOS)
    # without dual clip token 3 keeps 4.0: (−1.1 − 1.2 + 0.8 + 4.0 + 1.1 − 0.5)/6 = 3.1/6
    loss, m = losses.ppo_clip(logp, jnp.zeros_like(logp), ADV, MASK, dual_clip=None)
    np.testing.assert_allclose(loss, 3.1 / 6, rtol=1e-5)
    assert m["dual_clip_frac"] == 0.0
    # clip_high = 0.28: ρ = 1.25, A = +1 is inside the trust region -> L = −1.25 (−1.2 with 0.2)
    lp = jnp.log(jnp.array([[1.25]]))
    for high, expected, frac_high in ((0.28, -1.25, 0.0), (0.2, -1.2, 1.0)):
        loss, m = losses.ppo_clip(lp, jnp.zeros_like(lp), jnp.ones((1,)), jnp.ones((1, 1)), clip_high=high)
        np.testing.assert_allclose(loss, expected, rtol=1e-6)
        assert m["clip_frac_high"] == m["clip_frac"] == frac_high  # clip-higher's effect is visible here
    with pytest.raises(ValueError, match="dual_clip"):
        losses.ppo_clip(lp, lp, jnp.ones((1,)), jnp.ones((1, 1)), dual_clip=1.0)


def test_log_ratio_clamped_at_20():
    lp = jnp.array([[50.0]])
    loss, _ = losses.ppo_clip(lp, jnp.zeros_like(lp), -jnp.ones((1,)), jnp.ones((1, 1)), dual_clip=None)
    np.testing.assert_allclose(loss, np.exp(20.0), rtol=1e-5)


def _batch(seed, n=8, t=6):
    k = jax.random.split(jax.random.PRNGKey(seed), 4)
    old = -jax.random.uniform(k[0], (n, t), minval=0.1, maxval=3.0)
    logp = old + 0.3 * jax.random.normal(k[1], (n, t))
    a = jax.random.normal(k[2], (n,))
    mask = (jax.random.uniform(k[3], (n, t)) < 0.7).astype(jnp.float32)
    return logp, old, a, mask


def test_sequence_advantages_broadcast():
    logp, old, a, mask = _batch(0)
    l1, _ = losses.ppo_clip(logp, old, a, mask)
    l2, _ = losses.ppo_clip(logp, old, jnp.broadcast_to(a[:, None], logp.shape), mask)
    np.testing.assert_allclose(l1, l2, rtol=1e-6)


def test_is_weights_scale_token_losses():
    logp, old, a, mask = _batch(1)
    l1, _ = losses.ppo_clip(logp, old, a, mask, is_weights=jnp.full(logp.shape, 0.5))
    l2, _ = losses.ppo_clip(logp, old, a, mask)
    np.testing.assert_allclose(l1, 0.5 * l2, rtol=1e-6)


@pytest.mark.parametrize("mode", agg.AGG_MODES)
def test_micro_batching_with_agg_weights(mode):
    logp, old, a, mask = _batch(2)
    f = lambda lp, o, ad, m, **kw: losses.ppo_clip(lp, o, ad, m, agg_mode=mode, **kw)[0]  # noqa: E731
    full, full_grad = jax.jit(jax.value_and_grad(f))(logp, old, a, mask)
    w = agg.aggregation_weights(mask, mode)
    total, grads = 0.0, []
    for sl in (slice(0, 2), slice(2, 5), slice(5, 8)):
        val, g = jax.jit(jax.value_and_grad(f))(logp[sl], old[sl], a[sl], mask[sl], agg_weights=w[sl])
        total += val
        grads.append(g)
    np.testing.assert_allclose(total, full, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(jnp.concatenate(grads), full_grad, rtol=1e-5, atol=1e-7)
