"""HAPO advantage redistribution and token-level group advantage, multi-component BNPO, STEER weights,
and the whole-minibatch token statistics (`token_stats`) of the token-selecting losses."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm.rl import advantages as eager_advantages
from rl4llm.rl import entropy as eager_entropy
from rl4llm.rl import losses as eager_losses
from rl4llm.rl import registry

from rl_testing import SELECTIVE_KWARGS, compiled, random_loss_batch

adv = compiled(eager_advantages)
entropy = compiled(eager_entropy)
losses = compiled(eager_losses)


def _grad(fn, logp):
    return jax.jit(jax.grad(lambda lp: fn(lp)[0]))(logp)


# ------------------------------------------------------------------------------------------ HAPO


def test_hapo_advantage_redistribution_hand_case():
    # A = 1 everywhere, old logp = 0; ĥ given directly as token_stats = [0.5, −0.5, 0.5, −0.5], α = β = 1:
    # tok 0: ĥ>0, ε_hi = 0.2·1.5 = 0.3, ε_lo = 0.2 -> neutral (0.9, 1.15); ρ = 1.2 outside -> A_ent = 1.5;
    #        unclipped (1.2 < 1.3): L = −1.5·1.2 = −1.8
    # tok 1: ĥ≤0, ε_lo = 0.2·1.5 = 0.3, ε_hi = 0.2 -> neutral (0.85, 1.1); ρ = 1.05 inside -> A_ent = 0.5;
    #        L = −0.5·1.05 = −0.525
    # tok 2: ĥ>0, ρ = 1.0 inside -> A = 1: L = −1
    # tok 3: ĥ≤0, ρ = 0.8 outside -> A = 1; 0.8 ≥ 1 − 0.3 not clipped: L = −0.8
    # token-mean: (−1.8 − 0.525 − 1 − 0.8)/4 = −1.03125
    ratio = jnp.array([[1.2, 1.05, 1.0, 0.8]])
    score = jnp.array([[0.5, -0.5, 0.5, -0.5]])
    old, m, a = jnp.zeros((1, 4)), jnp.ones((1, 4)), jnp.ones((1,))
    fn = lambda x: losses.hapo(x, old, a, m, jnp.ones((1, 4)), token_stats=score)  # noqa: E731
    loss, metrics = fn(jnp.log(ratio))
    np.testing.assert_allclose(loss, -1.03125, rtol=1e-6)
    np.testing.assert_allclose(metrics["neutral_frac"], 0.5)
    # dL/dlogp = −Â·ρ/4 on unclipped tokens
    np.testing.assert_allclose(_grad(fn, jnp.log(ratio)), [[-1.5 * 1.2 / 4, -0.5 * 1.05 / 4, -0.25, -0.8 / 4]],
                               rtol=1e-5)
    # β = 0: no redistribution -> (−1.2 − 1.05 − 1 − 0.8)/4
    plain = losses.hapo(jnp.log(ratio), old, a, m, jnp.ones((1, 4)), beta=0.0, token_stats=score)[0]
    np.testing.assert_allclose(plain, -4.05 / 4, rtol=1e-6)


def test_hapo_token_level_group_advantage_hand_case():
    # group 0: s = [1, 0], L = [3, 1]: μ = 3/4, σ² = (3·(1/4)² + (3/4)²)/4 = 3/16 -> A = [1/4, −3/4]/√(3/16)
    # group 1: s = [1, 0], L = [1, 30]: μ = 1/31, σ = √30/31 -> A_0 = (30/31)/σ = 5.48 ≥ 5 -> GRPO fallback ±1/√2
    s = jnp.array([1.0, 0.0, 1.0, 0.0])
    g = jnp.array([0, 0, 1, 1])
    lengths = jnp.array([3, 1, 1, 30])
    a = adv.hapo(s, g, lengths, num_groups=2)
    sd = np.sqrt(3 / 16)
    half = 0.5 / (np.sqrt(0.5) + 1e-6)
    np.testing.assert_allclose(a, [0.25 / (sd + 1e-6), -0.75 / (sd + 1e-6), half, -half], rtol=1e-5)


def test_hapo_group_advantage_with_equal_lengths_is_population_std_grpo():
    rng = np.random.default_rng(0)
    s = rng.integers(0, 2, size=12).astype(np.float32)
    g = np.repeat(np.arange(3), 4)
    a = adv.hapo(jnp.asarray(s), jnp.asarray(g), jnp.full((12,), 7), num_groups=3)
    ref = np.concatenate([(x - x.mean()) / (x.std() + 1e-6) for x in s.reshape(3, 4)])
    np.testing.assert_allclose(a, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(a).reshape(3, 4).sum(-1), 0.0, atol=1e-5)  # zero-sum groups
    np.testing.assert_array_equal(adv.hapo(jnp.ones(4), jnp.zeros(4, jnp.int32), jnp.arange(1, 5), num_groups=1),
                                  0.0)  # all-equal rewards


# ------------------------------------------------------------------------------------------ BNPO


def test_bnpo_components_hand_case():
    # α = β = 1: BNPO(r) = r − p_g per component.
    # c1 = [1, 0, 1, 1], groups [0, 0, 1, 1]: p = [0.5, 1] -> [0.5, −0.5, 0, 0]
    # c2 = [0, 0, 1, 0]: p = [0, 0.5] -> [0, 0, 0.5, −0.5];  mean over K = 2: [0.25, −0.25, 0.25, −0.25]
    comps = jnp.array([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    g = jnp.array([0, 0, 1, 1])
    got = adv.bnpo(jnp.zeros(4), g, num_groups=2, reward_components=comps, alpha=1.0, beta=1.0)
    np.testing.assert_allclose(got, [0.25, -0.25, 0.25, -0.25], rtol=1e-6)


def test_bnpo_components_fit_each_component_separately():
    rng = np.random.default_rng(1)
    comps = jnp.asarray(rng.integers(0, 2, size=(16, 3)).astype(np.float32))
    g = jnp.asarray(rng.permutation(np.repeat(np.arange(4), 4)))
    got = adv.bnpo(jnp.zeros(16), g, num_groups=4, reward_components=comps)
    per = [adv.bnpo(comps[:, k], g, num_groups=4) for k in range(3)]
    np.testing.assert_allclose(got, np.mean(per, axis=0), rtol=1e-5, atol=1e-6)
    single = adv.bnpo(jnp.zeros(16), g, num_groups=4, reward_components=comps[:, :1])
    np.testing.assert_allclose(single, per[0], rtol=1e-6)  # K = 1 is plain BNPO


# ----------------------------------------------------------------------------------------- STEER


def _steer_case():
    # π = π_old = [0.5, 0.25], H = [ln 2, 1], A = 1:
    # Ω_0 = |1/0.5·0.5·0.5·(ln 0.5 + ln 2)| = 0;  Ω_1 = |1/0.25·0.25·0.75·(ln 0.25 + 1)| = 0.75·0.386294 = 0.289721
    logp = jnp.log(jnp.array([[0.5, 0.25]]))
    return logp, jnp.array([[np.log(2.0), 1.0]]), jnp.ones((1,)), jnp.ones((1, 2))


def test_steer_weights_hand_case():
    logp, h, a, m = _steer_case()
    # exponential: k = −ln 0.8/0.289721 -> w_1 = e^{ln 0.8} = 0.8 (the max-Ω token gets w_min), w_0 = e^0 = 1
    w = entropy.steer_token_weights(logp, logp, a, m, h, weight_min=0.8, weight_max=1.0, mapping="exponential")
    np.testing.assert_allclose(w, [[1.0, 0.8]], rtol=1e-5)
    # linear to [0.8, 1.2]: Ω_min = 0 -> 1.2, Ω_max -> 0.8
    w = entropy.steer_token_weights(logp, logp, a, m, h, weight_min=0.8, weight_max=1.2, mapping="linear")
    np.testing.assert_allclose(w, [[1.2, 0.8]], rtol=1e-5)
    # loss: on-policy ppo token loss −A·ρ = −1, weighted: (−1·1 − 1·0.8)/2 = −0.9
    loss, metrics = losses.steer(logp, logp, a, m, h)
    np.testing.assert_allclose(loss, -0.9, rtol=1e-5)
    np.testing.assert_allclose(metrics["token_weight_min"], 0.8, rtol=1e-5)
    np.testing.assert_allclose(_grad(lambda x: losses.steer(x, logp, a, m, h), logp), [[-0.5, -0.4]], rtol=1e-5)


def test_steer_weight_properties():
    k = jax.random.split(jax.random.PRNGKey(2), 4)
    old = -jax.random.uniform(k[0], (4, 6), minval=0.05, maxval=4.0)
    logp = old + 0.2 * jax.random.normal(k[1], (4, 6))
    h = jax.random.uniform(k[2], (4, 6), maxval=3.0)
    a = jax.random.normal(k[3], (4,))
    m = jnp.ones((4, 6)).at[0, 3:].set(0.0)
    w = np.asarray(entropy.steer_token_weights(logp, old, a, m, h, weight_min=0.7, weight_max=1.0,
                                               mapping="exponential"))
    valid = np.asarray(m) > 0
    assert np.all((w[valid] >= 0.7 - 1e-6) & (w[valid] <= 1.0)) and np.all(w[~valid] == 0)
    np.testing.assert_allclose(w[valid].min(), 0.7, rtol=1e-5)  # the largest Ω gets exactly w_min
    zero = entropy.steer_token_weights(logp, old, jnp.zeros(4), m, h, weight_min=0.7, weight_max=1.0,
                                       mapping="exponential")
    np.testing.assert_array_equal(zero, m)  # A ≡ 0: no entropy change, weight 1
    # w_min = 1: every weight is 1 and steer is ppo_clip with the same clip ranges
    np.testing.assert_allclose(losses.steer(logp, old, a, m, h, weight_min=1.0)[0],
                               losses.ppo_clip(logp, old, a, m, clip_high=0.28, dual_clip=10.0)[0], rtol=1e-6)


# ------------------------------------------------------------------------- hyper-parameter checks


@pytest.mark.parametrize("name,kwargs,message", [
    ("hapo", dict(beta=1.5), "beta=1.5: must lie in [0, 1]"),
    ("hapo", dict(pivot=2.0), "pivot=2.0: must lie in [0, 1]"),
    ("steer", dict(mapping="cubic"), "mapping='cubic': must be 'exponential' or 'linear'"),
    ("steer", dict(weight_min=0.0), "weight_min=0.0: must lie in (0, 1]"),
    ("clip_cov", dict(clip_cov_ratio=0.0), "clip_cov_ratio=0.0"),
    ("kl_cov", dict(kl_cov_ratio=2.0), "kl_cov_ratio=2.0"),
    ("lp_reg", dict(rho_neg=0.0), "rho_neg=0.0"),
])
def test_bad_hyper_parameters_are_named(name, kwargs, message):
    logp, old, a, mask, extras = random_loss_batch(0)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        registry.get_policy_loss(name)(logp, old, a, mask, **extras, **kwargs)


def test_bad_advantage_hyper_parameters_are_named():
    with pytest.raises(ValueError, match="r_max=0.0: must be > r_min=0.0"):
        eager_advantages.bnpo(jnp.zeros(4), jnp.zeros(4, jnp.int32), num_groups=1, r_max=0.0)
    with pytest.raises(ValueError, match="fallback=0.0"):
        eager_advantages.hapo(jnp.zeros(4), jnp.zeros(4, jnp.int32), jnp.ones(4), num_groups=1, fallback=0.0)


# ------------------------------------------------------------- whole-minibatch token statistics


@pytest.mark.parametrize("name", sorted(registry.TOKEN_STATISTICS))
def test_token_stats_of_the_batch_reproduce_the_loss(name):
    logp, old, a, mask, extras = random_loss_batch(1)
    kwargs = SELECTIVE_KWARGS.get(name, {})
    stats = registry.get_token_statistics(name)(logp=logp, old_logp=old, advantages=a, mask=mask, **extras, **kwargs)
    assert stats.shape == logp.shape
    fn = registry.get_policy_loss(name)
    plain = jax.jit(lambda lp: fn(lp, old, a, mask, **extras, **kwargs)[0])(logp)
    given = jax.jit(lambda lp, s: fn(lp, old, a, mask, **extras, **kwargs, token_stats=s)[0])(logp, stats)
    np.testing.assert_allclose(given, plain, rtol=1e-6)
    if name in ("clip_cov", "kl_cov", "lp_reg"):  # selections: a few tokens, not all, not none
        assert 0 < float(jnp.sum(stats * mask)) < float(jnp.sum(mask))
