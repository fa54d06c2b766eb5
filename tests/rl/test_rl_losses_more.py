"""Phase-2 policy losses: hand cases, gradient properties, micro-batch invariance of every loss."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm.rl import advantages as eager_advantages
from rl4llm.rl import aggregation as eager_aggregation
from rl4llm.rl import losses as eager_losses
from rl4llm.rl import registry

from rl_testing import SELECTIVE_KWARGS, compiled, distinct_names, random_loss_batch

adv_lib = compiled(eager_advantages)
agg = compiled(eager_aggregation)
losses = compiled(eager_losses)

ONE = jnp.ones((1, 2))


def _grad(fn, logp):
    return jax.jit(jax.grad(lambda lp: fn(lp)[0]))(logp)


def test_gspo_sequence_ratio_and_clip():
    # lr = [0.1, 0.3] -> lr_seq = 0.2, s = e^0.2 = 1.221403 on both tokens; A = +1:
    # L1 = −1.221403 < L2 = −(1 + 4e-4) -> clipped, L = −1.0004, zero gradient
    old = jnp.zeros((1, 2))
    lp = jnp.array([[0.1, 0.3]])
    fn = lambda x: losses.gspo(x, old, jnp.ones((1,)), ONE)  # noqa: E731
    loss, m = fn(lp)
    np.testing.assert_allclose(loss, -1.0004, rtol=1e-6)
    assert m["clip_frac"] == 1.0
    assert m["seq_clip_frac"] == 1.0
    np.testing.assert_allclose(m["ratio_mean"], np.exp(0.2), rtol=1e-6)
    np.testing.assert_array_equal(_grad(fn, lp), 0.0)
    # unclipped: ∂L/∂logp_it = −A·s_i·w_it, w = 1/(2 tokens)/(1 seq) = 0.5
    fn = lambda x: losses.gspo(x, old, jnp.ones((1,)), ONE, clip_low=1.0, clip_high=1.0)  # noqa: E731
    np.testing.assert_allclose(_grad(fn, lp), -0.5 * np.exp(0.2) * np.ones((1, 2)), rtol=1e-6)


def test_gspo_seq_clip_frac_counts_sequences_on_the_binding_side():
    # rows (A, lr per token, mask): s_i = exp(mean lr), clip 0.1 / 0.1
    #   0: A=+1, lr [0.3, 0.3]        s = e^0.3 > 1.1       binds (high)
    #   1: A=+1, lr [−0.3, −0.3]      s = e^−0.3 < 0.9      outside, but the A > 0 side does not bind there
    #   2: A=−1, lr [−0.3, 9 (pad)]   s = e^−0.3 < 0.9      binds (low); the padded token is ignored
    #   3: A=−1, lr [0.05, 0.05]      s inside               no
    #   4: no valid token                                    not counted
    lr = jnp.array([[0.3, 0.3], [-0.3, -0.3], [-0.3, 9.0], [0.05, 0.05], [0.0, 0.0]])
    m = jnp.array([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    a = jnp.array([1.0, 1.0, -1.0, -1.0, 1.0])
    _, metrics = losses.gspo(lr, jnp.zeros_like(lr), a, m, clip_low=0.1, clip_high=0.1)
    np.testing.assert_allclose(metrics["seq_clip_frac"], 2 / 4, rtol=1e-6)
    np.testing.assert_allclose(metrics["clip_frac"], 3 / 7, rtol=1e-6)  # tokens of rows 0 and 2


def test_sapo_gate_mean():
    # gate weight 4σ(1 − σ), σ = sigmoid(τ(ρ − 1)): 1 at ρ = 1; ρ = 2, τ = 1: σ = 0.7310586 -> 0.7864477
    lr = jnp.log(jnp.array([[1.0, 2.0]]))
    _, m = losses.sapo(lr, jnp.zeros_like(lr), jnp.ones((1,)), ONE)
    sig = 1 / (1 + np.exp(-1.0))
    np.testing.assert_allclose(m["gate_mean"], (1.0 + 4 * sig * (1 - sig)) / 2, rtol=1e-6)


def test_gspo_ignores_agg_mode():
    lp, old = jnp.array([[0.1, 0.0], [0.2, 0.0]]), jnp.zeros((2, 2))
    m = jnp.array([[1.0, 1.0], [1.0, 0.0]])
    a = losses.gspo(lp, old, jnp.array([1.0, -1.0]), m, agg_mode="token-mean")[0]
    b = losses.gspo(lp, old, jnp.array([1.0, -1.0]), m, agg_mode="seq-mean-token-sum")[0]
    assert a == b


def test_sapo_gate():
    # ρ = 1: gate = sigmoid(0)·4/τ = 2/τ; A=+1 (τ=1): L = −2; A=−1 (τ=1.05): L = 2/1.05 = 1.904762
    # seq-mean-token-mean over two one-token rows: (−2 + 1.904762)/2 = −0.047619
    z = jnp.zeros((2, 1))
    loss, _ = losses.sapo(z, z, jnp.array([1.0, -1.0]), jnp.ones((2, 1)))
    np.testing.assert_allclose(loss, (-2 + 2 / 1.05) / 2, rtol=1e-5)
    # on-policy gradient equals REINFORCE's: d gate/dρ at ρ = 1 is exactly 1
    g_sapo = _grad(lambda x: losses.sapo(x, z, jnp.array([1.0, -1.0]), jnp.ones((2, 1))), z)
    g_pg = _grad(lambda x: losses.ppo_clip(x, z, jnp.array([1.0, -1.0]), jnp.ones((2, 1)),
                                           agg_mode="seq-mean-token-mean"), z)
    np.testing.assert_allclose(g_sapo, g_pg, rtol=1e-6)


def test_cispo_truncates_weight_not_gradient():
    # ρ = [1.5, 0.5], A = +1: weights sg(clip(ρ, 0, 1.2)) = [1.2, 0.5]; L = −w·logp
    old = jnp.zeros((1, 2))
    lp = jnp.log(jnp.array([[1.5, 0.5]]))
    fn = lambda x: losses.cispo(x, old, jnp.ones((1,)), ONE)  # noqa: E731
    loss, m = fn(lp)
    np.testing.assert_allclose(loss, -(1.2 * np.log(1.5) + 0.5 * np.log(0.5)) / 2, rtol=1e-6)
    np.testing.assert_allclose(_grad(fn, lp), [[-0.6, -0.25]], rtol=1e-6)
    np.testing.assert_allclose(m["is_clip_frac"], 0.5)
    np.testing.assert_allclose(m["is_weight_mean"], (1.2 + 0.5) / 2, rtol=1e-6)


def test_reinforce_is_minus_a_logp():
    lp = jnp.log(jnp.array([[0.5, 0.25]]))
    loss, _ = losses.reinforce(lp, lp, jnp.array([2.0]), ONE)
    np.testing.assert_allclose(loss, -2 * (np.log(0.5) + np.log(0.25)) / 2, rtol=1e-6)


def test_gmpo_hand_case():
    # lr = [0.1, 0.6], clip in log space to [−0.4, 0.4]
    # A = +1: l = min(lr, clip(lr)) = [0.1, 0.4] -> ρ = e^{0.25}, L = −e^{0.25} = −1.284025
    # A = −1: l = max(lr, clip(lr)) = [0.1, 0.6] -> ρ = e^{0.35}, L = +e^{0.35} = 1.419068
    old = jnp.zeros((1, 2))
    lp = jnp.array([[0.1, 0.6]])
    fn = lambda x, a: losses.gmpo(x, old, a, ONE)  # noqa: E731
    loss, m = fn(lp, jnp.ones((1,)))
    np.testing.assert_allclose(loss, -np.exp(0.25), rtol=1e-6)
    np.testing.assert_allclose(m["clip_frac"], 0.5)
    np.testing.assert_allclose(m["clip_frac_high"], 0.5)
    assert m["clip_frac_low"] == 0.0
    # A = −1 with lr = [0.1, 0.6]: 0.6 > 0.4 is outside, but for A < 0 only lr < −0.4 binds; lr = −0.5 does
    assert fn(lp, -jnp.ones((1,)))[1]["clip_frac"] == 0.0
    m = fn(jnp.array([[-0.5, 0.6]]), -jnp.ones((1,)))[1]
    np.testing.assert_allclose((m["clip_frac_low"], m["clip_frac_high"], m["clip_frac"]), (0.5, 0.0, 0.5))
    np.testing.assert_allclose(fn(lp, -jnp.ones((1,)))[0], np.exp(0.35), rtol=1e-6)
    # gradient: −e^{0.25}·½ on the unclipped token, 0 on the clipped one
    np.testing.assert_allclose(_grad(lambda x: fn(x, jnp.ones((1,))), lp), [[-np.exp(0.25) / 2, 0.0]], rtol=1e-5)


def _cov_fixture():
    # A = [3, −1, −1, −1] (mean 0), logp = [−0.5, −2.5, −2.5, −2.5] (mean −2):
    # cov = [3·1.5, (−1)(−0.5), …] = [4.5, 0.5, 0.5, 0.5]; only token 0 lies in (1, 5)
    a = jnp.array([[3.0, -1.0, -1.0, -1.0]])
    lp = jnp.array([[-0.5, -2.5, -2.5, -2.5]])
    return lp, a, jnp.ones((1, 4))


def test_clip_cov_hand_case():
    lp, a, m = _cov_fixture()
    fn = lambda x: losses.clip_cov(x, lp, a, m, jax.random.PRNGKey(0))  # noqa: E731
    loss, metrics = fn(lp)
    # L = −A·ρ = [−3, 1, 1, 1]; token 0 is picked (n_clip = max(⌊2e-4·4⌋, 1) = 1) -> [0, 1, 1, 1] -> 0.75
    np.testing.assert_allclose(loss, 0.75, rtol=1e-6)
    np.testing.assert_allclose(metrics["clip_cov_frac"], 0.25)
    assert metrics["clip_frac"] == 0.0  # on-policy: no PPO clipping
    np.testing.assert_allclose(_grad(fn, lp), [[0.0, 0.25, 0.25, 0.25]], rtol=1e-6)


def test_clip_cov_random_subset_invariants():
    k = jax.random.split(jax.random.PRNGKey(1), 3)
    n, t = 4, 8
    a = jax.random.normal(k[0], (n, t)) * 3
    lp = jax.random.normal(k[1], (n, t)) - 2
    m = jnp.ones((n, t))

    def picked(key):
        loss_fn = lambda x: losses.clip_cov(x, lp, a, m, key, clip_cov_ratio=0.125, clip_cov_lb=0.0,  # noqa: E731
                                            clip_cov_ub=1e9)
        return np.asarray(_grad(loss_fn, lp)) == 0.0

    cov = np.asarray((a - a.mean()) * (lp - lp.mean()))
    first, second = picked(k[2]), picked(jax.random.PRNGKey(7))
    assert first.sum() == second.sum() == 4  # ⌊0.125·32⌋ = 4 < #candidates
    assert np.all(cov[first] > 0) and np.all(cov[second] > 0)
    assert np.array_equal(picked(k[2]), first)  # deterministic given the key
    assert not np.array_equal(first, second)


def test_kl_cov_hand_case_and_zero_coef():
    lp, a, m = _cov_fixture()
    old = lp.at[0, 0].add(-0.1)  # token 0: lr = 0.1
    loss, metrics = losses.kl_cov(lp, old, a, m, ppo_kl_coef=1.0)
    # top-1 cov token is 0: L0 = −3·e^{0.1} + 1·0.1; others −A·1 = 1
    np.testing.assert_allclose(loss, (-3 * np.exp(0.1) + 0.1 + 3) / 4, rtol=1e-5)
    np.testing.assert_allclose(metrics["kl_cov_frac"], 0.25)
    np.testing.assert_allclose(metrics["kl_cov_abs_lr"], 0.1, rtol=1e-5)  # |lr| of the one penalised token
    np.testing.assert_allclose(metrics["abs_kl"], 0.1 / 4, rtol=1e-5)  # over all valid tokens
    assert losses.kl_cov(lp, old, a, 0 * m, ppo_kl_coef=1.0)[1]["kl_cov_abs_lr"] == 0.0  # nothing selected
    plain = losses.kl_cov(lp, old, a, m, ppo_kl_coef=0.0)[0]
    np.testing.assert_allclose(plain, agg.aggregate(-a * jnp.exp(lp - old), m, "token-mean"), rtol=1e-6)


def test_kl_cov_on_policy_gradient_is_plain_policy_gradient():
    # ratio = 1 at every token: the |lr| penalty on the selected token has value 0 AND gradient 0 (torch's
    # sign(0) = 0, verl). With jnp.abs the selected token got an extra +coef/Σm, pushing its probability down.
    lp, a, m = _cov_fixture()
    grad = _grad(lambda x: losses.kl_cov(x, lp, a, m, kl_cov_ratio=0.25, ppo_kl_coef=1.0), lp)
    np.testing.assert_array_equal(np.asarray(grad), np.asarray(-a * m / 4))  # −A·m/Σm, token 0 selected
    _, metrics = losses.kl_cov(lp, lp, a, m, kl_cov_ratio=0.25, ppo_kl_coef=1.0)
    assert float(metrics["kl_cov_frac"]) == 0.25


def test_gbpo_symmetric_clip_on_policy_gradient_is_zero_at_the_target():
    # clip_low = clip_high and z̃ = 0: target ρ* = 1 − ε + 2ε·½ = 1 = ρ on-policy, so |ρ − ρ*| is at its kink:
    # gradient 0 (torch), not sign-convention noise ±A.
    z = jnp.zeros((1, 2))
    fn = lambda x: losses.gbpo(x, z, jnp.array([-2.0]), ONE, jnp.zeros((1,)), clip_low=0.2, clip_high=0.2)  # noqa: E731
    np.testing.assert_array_equal(np.asarray(_grad(fn, z)), np.zeros((1, 2)))
    # off the kink the gradient is ±|A|·ρ/Σm: ρ = e^0.1 above the target -> pushed down with |A| = 2
    up = jnp.full((1, 2), 0.1)
    np.testing.assert_allclose(_grad(fn, up), np.full((1, 2), 2 * np.exp(0.1) / 2), rtol=1e-6)


def test_gbpo_target_and_loss():
    # scores [1, 0, 0, 1, 1]: median 1, mean 0.6, unbiased std sqrt(0.3)
    s = jnp.array([1.0, 0.0, 0.0, 1.0, 1.0])
    g = jnp.zeros(5, jnp.int32)
    z_t = adv_lib.gbpo_targets(s, g, num_groups=1, temperature=0.5)
    np.testing.assert_allclose(z_t, (np.asarray(s) - 1.0) / (np.sqrt(0.3) + 1e-6) / 0.5, rtol=1e-5)
    # ρ = 1, z̃ = 0: target = 1 − 0.2 + 0.48·0.5 = 1.04; L = |1 − 1.04|·|A| = 0.04·2
    z = jnp.zeros((1, 1))
    loss, _ = losses.gbpo(z, z, jnp.array([-2.0]), jnp.ones((1, 1)), jnp.zeros((1,)))
    np.testing.assert_allclose(loss, 0.08, rtol=1e-5)
    # below the target the gradient pushes the ratio up (negative dL/dlogp), whatever the sign of A
    grad = _grad(lambda x: losses.gbpo(x, z, jnp.array([-2.0]), jnp.ones((1, 1)), jnp.zeros((1,))), z)
    assert float(grad[0, 0]) < 0


def test_kimi_on_policy_gradient_is_mean_baseline_reinforce():
    lp = jnp.log(jnp.array([[0.5, 0.2], [0.3, 0.9]]))
    a = jnp.array([1.0, -1.0])
    m = jnp.array([[1.0, 1.0], [1.0, 0.0]])
    g = _grad(lambda x: losses.kimi(x, lp, a, m), lp)
    np.testing.assert_allclose(g, -a[:, None] * m / 2, rtol=1e-6)  # seq-mean-token-sum over 2 rows
    # off-policy value: mean_i(−A_i·Σ logp + τ/2·Δ_i²), Δ = [0.2, 0.1]
    old = lp - jnp.array([[0.1, 0.1], [0.1, 0.0]])
    loss, metrics = losses.kimi(lp, old, a, m, tau=0.5)
    lpn = np.asarray(lp)
    expected = ((-1 * (lpn[0].sum()) + 0.25 * 0.04) + (1 * lpn[1, 0] + 0.25 * 0.01)) / 2
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    np.testing.assert_allclose(metrics["seq_log_ratio_sq"], (0.04 + 0.01) / 2, rtol=1e-5)


def test_value_loss_hand_case():
    # v = 1, v_old = 0, R = 2, c = 0.5: v_clip = 0.5; (v−R)² = 1, (v_clip−R)² = 2.25 -> ½·2.25 = 1.125
    one = jnp.ones((1, 1))
    loss, m = losses.value_loss(one, 0 * one, 2 * one, one)
    np.testing.assert_allclose(loss, 1.125)
    assert m["vf_clip_frac"] == 1.0


def test_value_loss_unclipped_and_masked_hand_case():
    # Row 0: v = 0.2, v_old = 0, R = 1, c = 0.5: v inside the clip range, v_clip = v -> (0.8)² = 0.64.
    # Row 0, token 1: v = 3, v_old = 0, R = 0 -> v_clip = 0.5; max(9, 0.25) = 9 (clipping only ever raises the loss).
    # Row 1: masked out (v = 100 would dominate). token-mean: ½·(0.64 + 9)/2 = 2.41; no token had its clip win.
    v = jnp.array([[0.2, 3.0], [100.0, 100.0]])
    loss, m = losses.value_loss(v, jnp.zeros_like(v), jnp.array([[1.0, 0.0], [0.0, 0.0]]),
                                jnp.array([[1.0, 1.0], [0.0, 0.0]]), clip=0.5)
    np.testing.assert_allclose(loss, 2.41, rtol=1e-6)
    assert m["vf_clip_frac"] == 0.0


def test_truncated_is_weights():
    old = jnp.log(jnp.array([[0.6, 0.2, 0.3]]))
    sampler = jnp.log(jnp.array([[0.2, 0.4, 0.3]]))
    m = jnp.array([[1.0, 1.0, 0.0]])
    # token: min(0.6/0.2, 2) = 2, 0.2/0.4 = 0.5, masked -> 0
    np.testing.assert_allclose(losses.truncated_is_weights(old, sampler, m), [[2.0, 0.5, 0.0]], rtol=1e-6)
    # sequence: min(3·0.5, 2) = 1.5 on valid tokens
    np.testing.assert_allclose(losses.truncated_is_weights(old, sampler, m, level="sequence", cap=3.0),
                               [[1.5, 1.5, 0.0]], rtol=1e-6)


@pytest.mark.parametrize("name", distinct_names(registry.POLICY_LOSSES))
def test_every_loss_is_invariant_to_micro_batching(name):
    """Σ over micro-batches of the loss (whole-batch aggregation weights, and for token-selecting losses
    the whole-batch `token_stats`, sliced) equals the full-batch loss; gradients too."""
    logp, old, a, mask, extras = random_loss_batch(3)
    mode = registry.agg_mode_for(name, "token-mean")
    fn = registry.get_policy_loss(name)
    kwargs = SELECTIVE_KWARGS.get(name, {})

    @jax.jit
    def value_and_grad(lp, o, ad, m, e, w):
        return jax.value_and_grad(lambda x: fn(x, o, ad, m, agg_mode=mode, agg_weights=w, **e, **kwargs)[0])(lp)

    w = agg.aggregation_weights(mask, mode)
    full, full_grad = value_and_grad(logp, old, a, mask, extras, w)
    plain = jax.jit(lambda *args: fn(*args[:4], agg_mode=mode, **args[4], **kwargs)[0])(logp, old, a, mask, extras)
    np.testing.assert_allclose(full, plain, rtol=1e-5, atol=1e-6)
    if name in registry.TOKEN_STATISTICS:
        extras["token_stats"] = registry.get_token_statistics(name)(
            logp=logp, old_logp=old, advantages=a, mask=mask, **extras, **kwargs)
    total, grads = 0.0, []
    for sl in (slice(0, 1), slice(1, 6)):
        ex = {k: (v if k == "key" else v[sl]) for k, v in extras.items()}
        val, g = value_and_grad(logp[sl], old[sl], a[sl], mask[sl], ex, w[sl])
        total += val
        grads.append(g)
    np.testing.assert_allclose(total, full, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jnp.concatenate(grads), full_grad, rtol=1e-4, atol=1e-6)


# The metric that shows each loss's mechanism acting (rl4llm/rl/README.md, "Mechanism metrics").
MECHANISM_METRICS = {
    "ppo_clip": ("clip_frac", "clip_frac_high", "clip_frac_low", "dual_clip_frac"),
    "gspo": ("clip_frac", "seq_clip_frac"),
    "sapo": ("gate_mean",),
    "cispo": ("is_clip_frac", "is_weight_mean"),
    "gpg": (),  # REINFORCE: no mechanism beyond the policy gradient
    "geo_mean": ("clip_frac", "clip_frac_high", "clip_frac_low"),
    "clip_cov": ("clip_cov_frac", "clip_frac"),
    "kl_cov": ("kl_cov_frac", "abs_kl", "kl_cov_abs_lr"),
    "gbpo": ("clip_frac",),
    "kimi": ("seq_log_ratio_sq",),
    "lp_reg": ("lp_reg_frac", "clip_frac", "clip_frac_high", "clip_frac_low", "dual_clip_frac"),
    "hapo": ("neutral_frac", "clip_frac", "clip_frac_high", "clip_frac_low", "dual_clip_frac"),
    "steer": ("token_weight_mean", "token_weight_min", "clip_frac", "clip_frac_high", "clip_frac_low",
              "dual_clip_frac"),
    "luffy": ("off_policy_frac", "off_is_weight_mean", "off_is_weight_max", "off_is_weight_min",
              "off_shaped_weight_mean", "clip_frac"),
    "rl_plus": ("off_policy_frac", "off_is_weight_mean", "off_is_weight_max", "off_is_weight_min",
                "off_exploration_weight_mean", "clip_frac"),
    "adhint": ("off_policy_frac", "off_is_weight_mean", "off_is_weight_max", "off_is_weight_min", "off_masked_frac",
               "off_low_prob_frac", "clip_frac", "dual_clip_frac"),
    "herl": ("off_policy_frac", "off_is_weight_mean", "off_is_weight_max", "off_is_weight_min",
             "off_shaped_weight_mean", "off_is_clamp_frac", "clip_frac", "dual_clip_frac"),
}


@pytest.mark.parametrize("name", distinct_names(registry.POLICY_LOSSES))
def test_every_loss_logs_its_mechanism_metrics(name):
    logp, old, a, mask, extras = random_loss_batch(4)
    fn = registry.get_policy_loss(name)
    _, metrics = fn(logp, old, a, mask, agg_mode=registry.agg_mode_for(name, "token-mean"), **extras,
                    **SELECTIVE_KWARGS.get(name, {}))
    assert set(MECHANISM_METRICS[name]) <= set(metrics)
    assert "clip_frac_lower" not in metrics  # renamed: dual_clip_frac (PPO family), clip_frac_low (GMPO)
    assert all(np.isfinite(float(v)) for v in metrics.values())
