"""Loss aggregation: verl goldens, weights form, micro-batch invariance, masked helpers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm.rl import aggregation as eager_aggregation

from rl_testing import compiled

agg = compiled(eager_aggregation)

L = jnp.array([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]], jnp.float32)
M = jnp.array([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]], jnp.float32)

# Hand arithmetic:
#   valid tokens: (1+2+3+4) + (5+6+7) + (9+10) = 10 + 18 + 19 = 47 over 4 + 3 + 2 = 9 tokens
#   token-mean              = 47 / 9                       = 5.222222
#   seq-mean-token-mean     = (10/4 + 18/3 + 19/2) / 3     = (2.5 + 6 + 9.5) / 3 = 6.0
#   seq-mean-token-sum      = (10 + 18 + 19) / 3           = 15.666667
#   seq-mean-token-sum-norm = (10 + 18 + 19) / (C·3)       = 3.916667 (C=T=4), 0.156667 (C=100)
GOLDEN = {
    "token-mean": 47 / 9,
    "seq-mean-token-mean": 6.0,
    "seq-mean-token-sum": 47 / 3,
    "seq-mean-token-sum-norm": 47 / 12,
}


@pytest.mark.parametrize("mode", agg.AGG_MODES)
def test_verl_goldens(mode):
    np.testing.assert_allclose(agg.aggregate(L, M, mode), GOLDEN[mode], rtol=1e-6)


def test_sum_norm_explicit_length():
    np.testing.assert_allclose(agg.aggregate(L, M, "seq-mean-token-sum-norm", norm_length=100), 0.47 / 3, rtol=1e-6)


def test_unknown_mode_lists_modes():
    with pytest.raises(ValueError, match="token-mean"):
        agg.aggregate(L, M, "mean")


def test_nan_outside_mask_is_ignored():
    noisy = jnp.where(M > 0, L, jnp.nan)
    for mode in agg.AGG_MODES:
        np.testing.assert_allclose(agg.aggregate(noisy, M, mode), GOLDEN[mode], rtol=1e-6)
        np.testing.assert_allclose(
            agg.weighted_sum(noisy, agg.aggregation_weights(M, mode)), GOLDEN[mode], rtol=1e-6
        )


def test_empty_rows_ignored_by_seq_modes():
    L2 = jnp.concatenate([L, jnp.full((1, 4), 100.0)])
    M2 = jnp.concatenate([M, jnp.zeros((1, 4))])
    for mode in ("seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
        np.testing.assert_allclose(agg.aggregate(L2, M2, mode), GOLDEN[mode], rtol=1e-6)


def test_all_masked_is_zero_not_nan():
    for mode in agg.AGG_MODES:
        assert agg.aggregate(L, jnp.zeros_like(M), mode) == 0.0


def _random_batch(seed, n=8, t=7):
    rng = np.random.default_rng(seed)
    values = jnp.asarray(rng.normal(size=(n, t)), jnp.float32)
    mask = jnp.asarray(rng.random((n, t)) < 0.6, jnp.float32).at[0].set(0.0)  # one empty row
    return values, mask


@pytest.mark.parametrize("mode", agg.AGG_MODES)
def test_weights_reproduce_aggregate(mode):
    values, mask = _random_batch(0)
    w = agg.aggregation_weights(mask, mode, norm_length=5.0)
    np.testing.assert_allclose(
        agg.weighted_sum(values, w), agg.aggregate(values, mask, mode, norm_length=5.0), rtol=1e-5
    )


@pytest.mark.parametrize("mode", agg.AGG_MODES)
def test_micro_batch_sum_equals_full_batch(mode):
    values, mask = _random_batch(1)
    w = agg.aggregation_weights(mask, mode)
    loss_fn = lambda v, wt: agg.weighted_sum(jnp.tanh(v) ** 2, wt)  # noqa: E731
    full, full_grad = jax.jit(jax.value_and_grad(lambda v: agg.aggregate(jnp.tanh(v) ** 2, mask, mode)))(values)
    total, grads = 0.0, []
    for sl in (slice(0, 3), slice(3, 5), slice(5, 8)):
        val, g = jax.jit(jax.value_and_grad(loss_fn))(values[sl], w[sl])
        total += val
        grads.append(g)
    np.testing.assert_allclose(total, full, rtol=1e-5)
    np.testing.assert_allclose(jnp.concatenate(grads), full_grad, rtol=1e-5, atol=1e-7)


def test_masked_helpers_match_numpy():
    values, mask = _random_batch(2)
    v, m = np.asarray(values), np.asarray(mask).astype(bool)
    sel = v[m]
    np.testing.assert_allclose(agg.masked_sum(values, mask), sel.sum(), rtol=1e-5)
    np.testing.assert_allclose(agg.masked_mean(values, mask), sel.mean(), rtol=1e-5)
    np.testing.assert_allclose(agg.masked_var(values, mask), sel.var(ddof=1), rtol=1e-5)
    np.testing.assert_allclose(agg.masked_var(values, mask, unbiased=False), sel.var(), rtol=1e-5)
    whitened = np.asarray(agg.masked_whiten(values, mask))
    np.testing.assert_allclose(whitened[m], (sel - sel.mean()) / np.sqrt(sel.var(ddof=1) + 1e-8), rtol=1e-4)
    # outside the mask the same affine map is applied (not zeroed), as in verl
    np.testing.assert_allclose(whitened[~m], (v[~m] - sel.mean()) / np.sqrt(sel.var(ddof=1) + 1e-8), rtol=1e-4)
    unshifted = np.asarray(agg.masked_whiten(values, mask, shift_mean=False))
    np.testing.assert_allclose(unshifted, whitened + sel.mean(), rtol=1e-4, atol=1e-6)


def test_masked_mean_axis():
    np.testing.assert_allclose(agg.masked_mean(L, M, axis=-1), [2.5, 6.0, 9.5], rtol=1e-6)
