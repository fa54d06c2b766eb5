"""PRIME: implicit process rewards, the implicit-PRM cross-entropy, and the PRIME advantage (verl recipe loop)."""

import jax
import jax.numpy as jnp
import numpy as np

from rl4llm.rl import advantages, prime, registry


def _whiten_ref(x, m):
    sel = x[m > 0]
    return (x - sel.mean()) / np.sqrt(sel.var(ddof=1) + 1e-8)


def _prime_ref(rm, acc, mask, k, process_coef, outcome_coef):
    """verl recipe/prime `compute_rloo_advantage_return`, transcribed as loops (groups of k contiguous rows)."""
    def masked_rloo(r, m):
        r = np.where(m, r, 0.0)
        out = r.copy()
        for start in range(0, r.shape[0], k):
            means = [r[i][m[i]].mean() for i in range(start, start + k)]
            base = sum(means) / (k - 1)
            for i in range(start, start + k):
                out[i][m[i]] = r[i][m[i]] * (k / (k - 1)) - base
        return out

    m = mask > 0
    last = np.zeros_like(m)
    last[np.arange(len(m)), m.sum(-1) - 1] = True  # verl: valid_response_length − 1 (right-padded rows)
    outcome = np.zeros(mask.shape)
    outcome[last] = acc
    total = masked_rloo(rm, m) * process_coef + masked_rloo(outcome, last) * outcome_coef
    returns = np.flip(np.cumsum(np.flip(total * mask, -1), -1), -1)
    return _whiten_ref(returns, mask) * mask


def test_prime_advantage_matches_the_recipe_loop():
    rng = np.random.default_rng(0)
    n, t, k = 6, 7, 3
    lengths = rng.integers(1, t + 1, n)
    mask = (np.arange(t)[None] < lengths[:, None]).astype(np.float64)
    rm = rng.normal(size=(n, t)) * 0.1
    acc = rng.integers(0, 2, n).astype(np.float64)
    group_ids = np.repeat(np.arange(n // k), k)
    got = registry.get_advantage("prime")(
        jnp.asarray(acc, jnp.float32), jnp.asarray(group_ids), jnp.asarray(mask, jnp.float32),
        num_groups=n // k, process_rewards=jnp.asarray(rm, jnp.float32), process_coef=2.0, outcome_coef=5.0,
    )
    np.testing.assert_allclose(got, _prime_ref(rm, acc, mask, k, 2.0, 5.0), rtol=1e-4, atol=1e-5)


def test_prime_outcome_only_is_rloo_return_to_go():
    # process_coef = 0: G_t = 5·(R_i − mean_{j≠i} R_j) at every valid token; R = [1, 0] in one group -> ±5,
    # whitened over the 3 valid tokens [5, 5, −5]: mean 5/3, unbiased std sqrt(100/3)
    mask = jnp.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    adv = advantages.prime(jnp.array([1.0, 0.0]), jnp.array([0, 0]), mask, jnp.ones((2, 3)), num_groups=1,
                           process_coef=0.0)
    g = np.array([5.0, 5.0, -5.0])
    expected = (g - g.mean()) / np.sqrt(g.var(ddof=1) + 1e-8)
    np.testing.assert_allclose(np.asarray(adv)[np.asarray(mask) > 0], expected, rtol=1e-5)


def test_implicit_rewards_sum_to_the_sequence_log_ratio():
    rng = np.random.default_rng(1)
    prm, ref = (jnp.asarray(rng.normal(size=(3, 4)), jnp.float32) for _ in range(2))
    mask = jnp.array([[1.0, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    r = prime.implicit_process_rewards(prm, ref, mask, beta=0.05)
    np.testing.assert_allclose(jnp.sum(r, -1), 0.05 * jnp.sum((prm - ref) * mask, -1), rtol=1e-6)
    assert not np.any(np.asarray(r)[np.asarray(mask) == 0])


def test_prm_cross_entropy_hand_case_and_gradient_sign():
    # z = 0: BCE = log 2 whatever the label. z = β·Σ(Δ) = 0.05·(2 + 2) = 0.2: y = 1 -> softplus(0.2) − 0.2
    zero = jnp.zeros((2, 2))
    np.testing.assert_allclose(prime.implicit_prm_loss(zero, zero, jnp.ones((2, 2)), jnp.array([0.0, 1.0])),
                               [np.log(2)] * 2, rtol=1e-6)
    prm = jnp.full((1, 2), 2.0)
    loss = prime.implicit_prm_loss(prm, jnp.zeros((1, 2)), jnp.ones((1, 2)), jnp.array([1.0]))
    np.testing.assert_allclose(loss, np.log1p(np.exp(0.2)) - 0.2, rtol=1e-6)
    # A correct sequence (y = 1) pushes its PRM log-probs up, an incorrect one (y = 0) down.
    for label, sign in ((1.0, -1.0), (0.0, 1.0)):
        grad = jax.grad(lambda p: prime.implicit_prm_loss(p, zero, jnp.ones((2, 2)), jnp.full((2,), label)).sum())(
            zero)
        assert np.all(np.sign(grad) == sign)
