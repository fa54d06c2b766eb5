"""Entropy control, chunked log-probs, entropy-aware losses, KL controller and KL in reward."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm.rl import aggregation as eager_aggregation
from rl4llm.rl import entropy as eager_entropy
from rl4llm.rl import kl as eager_kl
from rl4llm.rl import losses as eager_losses

from rl_testing import compiled

agg = compiled(eager_aggregation)
entropy = compiled(eager_entropy)
kl = compiled(eager_kl)
losses = compiled(eager_losses)


def _unembed_problem(n=2, t=13, h=8, v=32, seed=0):
    k = jax.random.split(jax.random.PRNGKey(seed), 3)
    w = jax.random.normal(k[0], (h, v))
    hidden = jax.random.normal(k[1], (n, t, h))
    targets = jax.random.randint(k[2], (n, t), 0, v)
    return w, hidden, targets


@pytest.mark.parametrize("vocab_chunk_size", [None, 5, 32, 64])  # 5: the last of 7 chunks overlaps the 6th
def test_chunked_matches_full_computation_values_and_grads(vocab_chunk_size):
    w, hidden, targets = _unembed_problem()
    temp = 0.7

    def full(w, hid):
        z = (hid @ w) / temp
        logp = jnp.take_along_axis(jax.nn.log_softmax(z), targets[..., None], -1)[..., 0]
        return logp, eager_entropy.from_logits(z)

    def chunked(w, hid):
        return eager_entropy.chunked_logprobs_and_entropy(hid, targets, w, chunk_size=4, temperature=temp,
                                                          vocab_chunk_size=vocab_chunk_size)

    for a, b in zip(jax.jit(chunked)(w, hidden), full(w, hidden)):  # T = 13 is not a multiple of 4
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    scalar = lambda fn: lambda w, hid: jnp.sum(fn(w, hid)[0] * 0.3 + fn(w, hid)[1])  # noqa: E731
    g_chunk = jax.jit(jax.grad(scalar(chunked), argnums=(0, 1)))(w, hidden)
    g_full = jax.jit(jax.grad(scalar(full), argnums=(0, 1)))(w, hidden)
    for a, b in zip(g_chunk, g_full):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_vocab_chunks_online_logsumexp_hand_case():
    # h = [1], W = [[0, ln 2, ln 3, 0, ln 2]] (V = 5) in chunks of 2: [0, ln2], [ln3, 0], then [0, ln2] read at
    # start 3 with its first column (id 3, already seen) masked. Σ e^z = 1 + 2 + 3 + 1 + 2 = 9 -> lse = ln 9.
    # target 2: logp = ln 3 − ln 9 = ln(1/3); H = −Σ π ln π with π = [1, 2, 3, 1, 2]/9.
    w = jnp.log(jnp.array([[1.0, 2.0, 3.0, 1.0, 2.0]]))
    logp, ent = entropy.chunked_logprobs_and_entropy(jnp.ones((1, 1, 1)), jnp.array([[2]]), w, chunk_size=1,
                                                     vocab_chunk_size=2)
    p = np.array([1, 2, 3, 1, 2]) / 9
    np.testing.assert_allclose(logp, [[np.log(1 / 3)]], rtol=1e-6)
    np.testing.assert_allclose(ent, [[-np.sum(p * np.log(p))]], rtol=1e-6)


def test_vocab_chunked_minp_proxy_equals_the_full_logits_kernel():
    w, hidden, targets = _unembed_problem(t=6, v=30)
    w = w * 2.0  # peaked rows: the min-p filter drops part of the vocabulary
    logp, ent, proxy = entropy.chunked_logprobs_and_entropy(hidden, targets, w, chunk_size=4, vocab_chunk_size=7,
                                                            temperature=0.8, min_p=0.1)
    expected = eager_entropy.minp_proxy_logprobs(hidden @ w / 0.8, targets, min_p=0.1)
    assert np.any(expected < -100) and np.any(expected > -100)  # both filtered and kept targets
    np.testing.assert_allclose(proxy, expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("vocab_chunk_size", [None, 256])
def test_chunked_backward_never_holds_all_logits(vocab_chunk_size):
    n, t, h, v, chunk = 2, 32, 8, 4096, 4
    w, hidden, targets = _unembed_problem(n, t, h, v)

    def loss(w, hid):
        logp, ent = eager_entropy.chunked_logprobs_and_entropy(hid, targets, w, chunk_size=chunk,
                                                               vocab_chunk_size=vocab_chunk_size)
        return jnp.sum(logp) + jnp.sum(ent)

    compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(w, hidden).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    assert temp < n * t * v * 4  # a full float32 [N, T, V] logits array
    if vocab_chunk_size:  # not even one sequence chunk's [N, chunk, V] logits (beyond the [H, V] gradient)
        assert temp < n * chunk * v * 4 + h * v * 4


def test_entropy_bonus_and_gradient_toward_uniform():
    h = jnp.array([[1.0, 2.0], [3.0, 0.0]])
    m = jnp.array([[1.0, 1.0], [1.0, 0.0]])
    np.testing.assert_allclose(entropy.entropy_bonus(h, m, coef=0.1), -0.1 * 2.0, rtol=1e-6)
    np.testing.assert_allclose(entropy.entropy_bonus(h, m, coef=0.1, agg_weights=agg.aggregation_weights(m, "token-mean")),
                               -0.2, rtol=1e-6)
    z = jnp.array([2.0, 0.0, -1.0])
    g = jax.jit(jax.grad(lambda z: entropy.entropy_bonus(entropy.from_logits(z)[None, None], jnp.ones((1, 1)), coef=1.0)))(z)
    assert float(entropy.from_logits(z - 0.1 * g)) > float(entropy.from_logits(z))  # descent raises entropy


def test_adaptive_entropy_coef():
    np.testing.assert_allclose(entropy.adaptive_entropy_coef(0.01, 0.1), 0.015)  # below target: +δ
    np.testing.assert_allclose(entropy.adaptive_entropy_coef(0.01, 0.5), 0.005)  # above target: −δ
    assert float(entropy.adaptive_entropy_coef(0.0, 0.5)) == 0.0  # clipped at min


def test_forking_token_mask():
    h = jnp.arange(10.0).reshape(2, 5)
    m = jnp.ones((2, 5)).at[1, 4].set(0.0)  # 9 valid tokens with entropies 0..8
    np.testing.assert_array_equal(entropy.forking_token_mask(h, m, rho=1.0), m)
    # 0.8-quantile of 0..8 = 6.4 -> tokens 7, 8 -> exactly 2 tokens (≈ 0.2·9)
    top = entropy.forking_token_mask(h, m, rho=0.2)
    np.testing.assert_array_equal(np.argwhere(np.asarray(top)), [[1, 2], [1, 3]])
    # used as is_weights: with ρ = 1 the loss equals the plain loss
    lp = -jnp.ones((2, 5))
    plain = losses.ppo_clip(lp, lp + 0.1, jnp.array([1.0, -1.0]), m)[0]
    gated = losses.ppo_clip(lp, lp + 0.1, jnp.array([1.0, -1.0]), m, is_weights=entropy.forking_token_mask(h, m, rho=1.0))[0]
    np.testing.assert_allclose(gated, plain)


def test_normalized_entropy_scores_range_and_pivot():
    h = jnp.exp(jnp.array([[0.0, 1.0, 2.0, 3.0, 4.0], [-2.0, -1.0, 0.5, 7.0, 0.0]]))
    m = jnp.ones((2, 5)).at[1, 4].set(0.0)
    s = np.asarray(entropy.normalized_entropy_scores(h, m, pivot=0.5))
    valid = np.asarray(m) > 0
    assert s[valid].min() == -1.0 and s[valid].max() == 1.0
    # log-entropies of valid tokens: [0,1,2,3,4,-2,-1,0.5,7]; nearest 0.5-quantile = sorted[4] = 1.0
    assert s[0, 1] == 0.0
    assert s[1, 4] == 0.0  # masked


def test_hapo_reduces_to_ppo_clip_with_alpha_and_beta_zero():
    k = jax.random.split(jax.random.PRNGKey(4), 4)
    old = -jax.random.uniform(k[0], (3, 6), minval=0.1, maxval=2.0)
    lp = old + 0.5 * jax.random.normal(k[1], (3, 6))
    a = jax.random.normal(k[2], (3,))
    h = jax.random.uniform(k[3], (3, 6))
    m = jnp.ones((3, 6))
    np.testing.assert_allclose(losses.hapo(lp, old, a, m, h, alpha=0.0, beta=0.0)[0],
                               losses.ppo_clip(lp, old, a, m, dual_clip=10.0)[0], rtol=1e-6)
    # with α > 0 the high-entropy token with ρ = 1.25 and A > 0 is no longer clipped at 1.2
    lp2 = jnp.log(jnp.array([[1.25, 1.25]]))
    h2 = jnp.array([[0.1, 2.0]])  # token 1 is the high-entropy one (ĥ = 1 -> ε_high = 0.4)
    g = jax.jit(jax.grad(lambda x: losses.hapo(x, jnp.zeros((1, 2)), jnp.ones((1,)), jnp.ones((1, 2)), h2, pivot=0.0)[0]))(lp2)
    assert float(g[0, 0]) == 0.0 and float(g[0, 1]) < 0.0


def test_minp_proxy_logprobs():
    p = jnp.array([0.9, 0.09, 0.01])  # min_p = 0.02: keep tokens with p ≥ 0.018 -> {0, 1}
    z = jnp.log(p)
    proxy = entropy.minp_proxy_logprobs(jnp.broadcast_to(z, (3, 3)), jnp.arange(3), min_p=0.02)
    np.testing.assert_allclose(jnp.exp(proxy[:2]), [0.9 / 0.99, 0.09 / 0.99], rtol=1e-5)
    assert float(proxy[2]) < -1e3  # filtered: never regularised


def test_lp_reg_selection_and_gradient_direction():
    # Row 0: A < 0, tokens with logp [−3, −0.5]; proxy [−2, −0.1]; ρ_neg = 0.5 of negative tokens
    # -> threshold = 0.5-quantile of [−3, −0.5] = −1.75 -> token 0 selected (−3 ≤ −1.75 and −3 < −2)
    lp = jnp.array([[-3.0, -0.5]])
    proxy = jnp.array([[-2.0, -0.1]])
    a = -jnp.ones((1,))
    m = jnp.ones((1, 2))
    fn = lambda x: losses.lp_reg(x, lp, a, m, proxy, rho_neg=0.5)  # noqa: E731
    loss, metrics = fn(lp)
    k3 = np.exp(-2.0 + 3.0) - (-2.0 + 3.0) - 1.0  # e^{proxy − logp} − (proxy − logp) − 1
    np.testing.assert_allclose(loss, ((1.0 + k3) + 1.0) / 2, rtol=1e-5)
    np.testing.assert_allclose(metrics["lp_reg_frac"], 0.5)
    g = jax.jit(jax.grad(lambda x: fn(x)[0]))(lp)
    # selected token: d/dlogp(−Aρ + k3) = 1 + (1 − e^{proxy−logp}) < 0 -> descent raises its probability
    np.testing.assert_allclose(g[0, 0], (1.0 + 1.0 - np.exp(1.0)) / 2, rtol=1e-5)
    # no negative tokens or a filtered proxy: plain ppo_clip
    np.testing.assert_allclose(losses.lp_reg(lp, lp, a, m, jnp.full((1, 2), -1e4))[0],
                               losses.ppo_clip(lp, lp, a, m)[0])


def test_kl_in_reward_and_adaptive_controller():
    r = jnp.array([[0.0, 1.0], [0.0, 0.0]])
    old = jnp.log(jnp.array([[0.5, 0.5], [0.4, 0.1]]))
    ref = jnp.log(jnp.array([[0.25, 0.5], [0.4, 0.1]]))
    m = jnp.array([[1.0, 1.0], [1.0, 0.0]])
    shaped, current = kl.kl_in_reward(r, old, ref, m, coef=0.1)
    # k1 = [[log 2, 0], [0, (masked)]] -> rewards − 0.1·kld; current = mean(log2/2, 0) = log2/4
    np.testing.assert_allclose(shaped, [[-0.1 * np.log(2), 1.0], [0.0, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(current, np.log(2) / 4, rtol=1e-5)
    # golden: clip(0.5/0.1 − 1, ±0.2) = 0.2 -> 0.001·(1 + 0.2·256/10000) = 0.00100512
    np.testing.assert_allclose(kl.adaptive_kl_coef(0.001, 0.5, 256), 0.00100512, rtol=1e-6)
    np.testing.assert_allclose(kl.adaptive_kl_coef(0.001, 0.1, 256), 0.001, rtol=1e-7)  # on target
