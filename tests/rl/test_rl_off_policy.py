"""LUFFY's mixed-policy loss (`rl.off_policy.luffy`): hand cases, a trace token of probability 0, ratio 1, jit ==
eager, a numpy transcription of the official `compute_token_on_off_policy_loss`, jax.grad vs the hand-derived
gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm.rl import aggregation, off_policy, registry

from rl_testing import compiled

op = compiled(off_policy)

# One row: token 0 on-policy (ρ = 0.5/0.4 = 1.25), tokens 1, 2 trace tokens (π_θ = 0.2, 0.6); A = +1.
LOGP = jnp.log(jnp.array([[0.5, 0.2, 0.6]]))
OLD = jnp.log(jnp.array([[0.4, 0.3, 0.3]]))  # the old log-probs of trace tokens play no part
OFF = jnp.array([[0.0, 1.0, 1.0]])
ONES = jnp.ones((1, 3))
ONE2 = jnp.ones((1, 2))


def _grad(fn, logp):
    return jax.jit(jax.grad(lambda lp: fn(lp)[0]))(logp)


def test_hand_case_with_on_policy_clip():
    # on: ρ = 1.25 > 1.2, A > 0 -> L = −1.2 (clipped, no gradient); off: f = 0.2/0.3 = 2/3, 0.6/0.7 = 6/7
    fn = lambda lp: op.luffy(lp, OLD, jnp.ones((1,)), ONES, OFF)  # noqa: E731
    loss, m = fn(LOGP)
    np.testing.assert_allclose(loss, (-1.2 - 2 / 3 - 6 / 7) / 3, rtol=1e-6)
    # dL/dlogp on a trace token: −A·γ·w/(w + γ)² · 1/3 (token-mean)
    want = -np.array([[0.0, 0.1 * 0.2 / 0.3**2, 0.1 * 0.6 / 0.7**2]]) / 3
    np.testing.assert_allclose(_grad(fn, LOGP), want, rtol=1e-5)
    np.testing.assert_allclose(m["off_policy_frac"], 2 / 3, rtol=1e-6)
    np.testing.assert_allclose(m["off_is_weight_mean"], 0.4, rtol=1e-6)
    np.testing.assert_allclose(m["off_is_weight_max"], 0.6, rtol=1e-6)
    np.testing.assert_allclose(m["off_is_weight_min"], 0.2, rtol=1e-6)
    np.testing.assert_allclose(m["off_shaped_weight_mean"], (2 / 3 + 6 / 7) / 2, rtol=1e-6)
    assert m["clip_frac"] == 1.0 and m["clip_frac_high"] == 1.0  # over the one on-policy token
    np.testing.assert_allclose(m["ratio_mean"], 1.25, rtol=1e-6)


def test_hand_case_without_on_policy_clip_and_other_gamma():
    # LUFFY's train.sh (loss_remove_clip=True): on-policy L = −A·ρ = −1.25, gradient −A·ρ/3; γ = 0.5
    fn = lambda lp: op.luffy(lp, OLD, jnp.ones((1,)), ONES, OFF, on_policy_clip=False, shaping_gamma=0.5)  # noqa: E731
    loss, m = fn(LOGP)
    np.testing.assert_allclose(loss, (-1.25 - 0.2 / 0.7 - 0.6 / 1.1) / 3, rtol=1e-6)
    want = -np.array([[1.25, 0.5 * 0.2 / 0.7**2, 0.5 * 0.6 / 1.1**2]]) / 3
    np.testing.assert_allclose(_grad(fn, LOGP), want, rtol=1e-5)
    assert "clip_frac" not in m


def test_negative_advantage_pushes_trace_tokens_down():
    fn = lambda lp: op.luffy(lp, OLD, -2.0 * jnp.ones((1,)), ONES, OFF)  # noqa: E731
    g = _grad(fn, LOGP)
    np.testing.assert_allclose(g[0, 1:], 2.0 * np.array([0.1 * 0.2 / 0.09, 0.1 * 0.6 / 0.49]) / 3, rtol=1e-5)


@pytest.mark.parametrize("trace_logp", [-jnp.inf, -1e4, -200.0])
def test_trace_token_of_probability_zero_gives_finite_loss_and_gradient(trace_logp):
    """π_θ(t) = 0 (or underflowing) on a trace token: f(0) = 0, gradient 0 there, nothing NaN elsewhere; the
    behaviour pass's old log-prob of such a token is −inf too (−inf − −inf = NaN if it reached the ratio)."""
    logp = LOGP.at[0, 1].set(trace_logp)
    old = OLD.at[0, 1].set(trace_logp)
    fn = lambda lp: op.luffy(lp, old, jnp.ones((1,)), ONES, OFF)  # noqa: E731
    loss, m = fn(logp)
    g = _grad(fn, logp)
    np.testing.assert_allclose(loss, (-1.2 - 0.0 - 6 / 7) / 3, rtol=1e-6)
    assert np.all(np.isfinite(g)) and g[0, 1] == 0.0
    np.testing.assert_allclose(g[0, 2], -0.1 * 0.6 / 0.49 / 3, rtol=1e-5)
    assert all(np.isfinite(float(v)) for v in m.values())
    assert m["off_is_weight_min"] == 0.0


def test_ratio_one_on_policy_gradient_and_all_on_policy_is_ppo_without_dual_clip():
    """At ρ = 1 (old == logp) on-policy tokens get −A·w whatever the clip ranges (0 included: torch.clamp ties);
    without any trace token the loss is ppo_clip(dual_clip=None)."""
    m = jnp.array([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    logp = jnp.log(jnp.array([[0.3, 0.5, 0.05, 0.9], [0.7, 0.4, 0.2, 0.1]]))
    a = jnp.array([1.5, -2.0])
    off = jnp.array([[0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    w_agg = m / 5.0
    p = np.exp(np.asarray(logp))
    want = -np.asarray(a)[:, None] * np.where(off > 0, 0.1 * p / (p + 0.1) ** 2, 1.0) * w_agg
    for low, high in ((0.2, 0.2), (0.0, 0.0)):
        fn = lambda lp: op.luffy(lp, logp, a, m, off, clip_low=low, clip_high=high)  # noqa: E731,B023
        np.testing.assert_allclose(_grad(fn, logp), want, rtol=1e-5, atol=1e-8)
    old = logp + 0.3 * jnp.array([[1.0, -1.0, 0.5, 0.0], [-0.5, 1.0, 0.2, 0.0]])
    loss, _ = op.luffy(logp, old, a, m)
    ppo, _ = registry.get_policy_loss("ppo_clip")(logp, old, a, m, dual_clip=None)
    np.testing.assert_allclose(loss, ppo, rtol=1e-6)
    zeros, _ = op.luffy(logp, old, a, m, jnp.zeros_like(m))
    np.testing.assert_allclose(zeros, ppo, rtol=1e-6)


def _random_batch(seed, n=5, t=6):
    r = np.random.default_rng(seed)
    old = np.log(r.uniform(0.05, 0.95, (n, t))).astype(np.float32)
    logp = (old + r.normal(0, 0.3, (n, t))).clip(max=0.0).astype(np.float32)
    mask = (r.uniform(size=(n, t)) < 0.8).astype(np.float32)
    mask[:, 0] = 1.0
    off = np.zeros((n, t), np.float32)
    off[r.choice(n, 2, replace=False)] = 1.0
    a = r.normal(size=n).astype(np.float32)
    return logp, old, a, mask, off


def _masked_mean(x, m):
    return (x * m).sum() / (m.sum() + 1e-8)


def official_luffy(old_log_prob, log_prob, advantages, eos_mask, cliprange, clip_upper_bound, prefix_mask,
                   loss_remove_token_mean=False, loss_remove_clip=False):
    """numpy transcription of LUFFY's `compute_token_on_off_policy_loss` (mix_core_alg.py) with the train.sh
    settings: on_policy_reshape="no_reshape", off_policy_reshape="p_div_p_0.1", target_probs=None, no
    off_max_clip / off_min_clip / all_max_clip. Returns pg_loss."""
    negative_approx_kl = log_prob - old_log_prob
    ratio = np.exp(negative_approx_kl)
    on_pg_losses = -advantages * ratio
    upper_bound = max(clip_upper_bound, 1.0 + cliprange)
    if not loss_remove_clip:
        on_pg_losses2 = -advantages * np.clip(ratio, 1.0 - cliprange, upper_bound)
        on_pg_losses = np.maximum(on_pg_losses, on_pg_losses2)
    off_ratio = np.exp(log_prob)
    off_ratio = off_ratio / (off_ratio + 0.1)
    off_pg_losses = -advantages * off_ratio
    pg_losses = off_pg_losses * prefix_mask + on_pg_losses * (1 - prefix_mask)
    if loss_remove_token_mean:
        return (pg_losses * eos_mask).sum() / eos_mask.shape[-1]
    return _masked_mean(pg_losses, eos_mask)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("remove_clip", [False, True])
def test_matches_numpy_transcription_of_the_official_code(seed, remove_clip):
    logp, old, a, mask, off = _random_batch(seed)
    adv = np.broadcast_to(a[:, None], mask.shape)
    want = official_luffy(old, logp, adv, mask, 0.2, 1.28, off, loss_remove_clip=remove_clip)
    got, _ = op.luffy(logp, old, a, mask, off, clip_high=0.28, on_policy_clip=not remove_clip)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # train.sh's loss_remove_token_mean=True: Σ L·m / T = N × seq-mean-token-sum-norm with C = T (every row valid)
    want = official_luffy(old, logp, adv, mask, 0.2, 1.28, off, loss_remove_token_mean=True,
                          loss_remove_clip=remove_clip)
    got, _ = op.luffy(logp, old, a, mask, off, clip_high=0.28, on_policy_clip=not remove_clip,
                      agg_mode="seq-mean-token-sum-norm")
    np.testing.assert_allclose(got * mask.shape[0], want, rtol=1e-5)


@pytest.mark.parametrize("seed", [3, 4])
def test_gradient_matches_hand_derived(seed):
    """dL/dlogp = w_agg · (off: −A·γ·π/(π + γ)²; on: −A·ρ where the clip does not bind, else 0), token-mean."""
    logp, old, a, mask, off = _random_batch(seed)
    fn = lambda lp: op.luffy(lp, old, a, mask, off)  # noqa: E731
    got = np.asarray(_grad(fn, jnp.asarray(logp)))
    p, rho, adv = np.exp(logp), np.exp(logp - old), a[:, None]
    binds = ((adv > 0) & (rho > 1.2)) | ((adv < 0) & (rho < 0.8))
    on = np.where(binds, 0.0, -adv * rho)
    want = np.where(off > 0, -adv * 0.1 * p / (p + 0.1) ** 2, on) * mask / mask.sum()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7)


def test_jit_equals_eager_and_metrics():
    logp, old, a, mask, off = (jnp.asarray(x) for x in _random_batch(5))
    eager = off_policy.luffy(logp, old, a, mask, off, agg_mode="seq-mean-token-mean")
    jitted = op.luffy(logp, old, a, mask, off, agg_mode="seq-mean-token-mean")
    np.testing.assert_allclose(eager[0], jitted[0], rtol=1e-6)
    for k in eager[1]:
        np.testing.assert_allclose(eager[1][k], jitted[1][k], rtol=1e-6, err_msg=k)
    trace = np.asarray(off * mask) > 0
    p = np.exp(np.asarray(logp))[trace]
    np.testing.assert_allclose(eager[1]["off_policy_frac"], trace.sum() / float(mask.sum()), rtol=1e-6)
    np.testing.assert_allclose(eager[1]["off_is_weight_mean"], p.mean(), rtol=1e-5)
    np.testing.assert_allclose(eager[1]["off_is_weight_max"], p.max(), rtol=1e-6)
    np.testing.assert_allclose(eager[1]["off_is_weight_min"], p.min(), rtol=1e-6)


def test_no_trace_tokens_metrics_are_the_identities_and_is_weights_multiply():
    logp, old, a, mask, _ = (jnp.asarray(x) for x in _random_batch(6))
    _, m = op.luffy(logp, old, a, mask)
    assert m["off_policy_frac"] == 0.0 and m["off_is_weight_mean"] == 0.0
    assert m["off_is_weight_max"] == 0.0 and m["off_is_weight_min"] == 1.0
    off = jnp.zeros_like(mask).at[1].set(1.0)
    w = jnp.full_like(mask, 0.5)
    half, _ = op.luffy(logp, old, a, mask, off, is_weights=w)
    full, _ = op.luffy(logp, old, a, mask, off)
    np.testing.assert_allclose(half, 0.5 * full, rtol=1e-6)
    weights = aggregation.aggregation_weights(mask, "token-mean")
    np.testing.assert_allclose(op.luffy(logp, old, a, mask, off, agg_weights=weights)[0], full, rtol=1e-6)


def test_shaping_gamma_must_be_positive():
    with pytest.raises(ValueError, match="shaping_gamma=0"):
        off_policy.luffy(LOGP, OLD, jnp.ones((1,)), ONES, OFF, shaping_gamma=0.0)


# ---------------------------------------------------------------------------------------------------- RL-PLUS


def _mis(p, q):
    """RL-PLUS's MIS weight by hand: π_ω = (q + 1)/2, w = p / (q/2 + π_ω/2) = p / (0.75·q + 0.25)."""
    return p / (0.75 * q + 0.25)


def test_rl_plus_hand_case():
    # trace tokens: (π_θ, π_old) = (0.2, 0.3), (0.6, 0.3); on-policy token as LUFFY's (clipped at 1.2, no gradient)
    fn = lambda lp: op.rl_plus(lp, OLD, jnp.ones((1,)), ONES, OFF)  # noqa: E731
    loss, m = fn(LOGP)
    w = np.array([_mis(0.2, 0.3), _mis(0.6, 0.3)])  # 0.2/0.475, 0.6/0.475
    c = np.sqrt(1.0 - np.array([0.2, 0.6]))
    np.testing.assert_allclose(w, [0.4210526, 1.2631579], rtol=1e-6)
    np.testing.assert_allclose(loss, (-1.2 - (c * w).sum()) / 3, rtol=1e-6)
    np.testing.assert_allclose(_grad(fn, LOGP), np.concatenate([[0.0], -c * w])[None] / 3, rtol=1e-5)
    np.testing.assert_allclose(m["off_is_weight_mean"], w.mean(), rtol=1e-6)
    np.testing.assert_allclose(m["off_is_weight_max"], w.max(), rtol=1e-6)
    np.testing.assert_allclose(m["off_is_weight_min"], w.min(), rtol=1e-6)
    np.testing.assert_allclose(m["off_exploration_weight_mean"], c.mean(), rtol=1e-6)
    np.testing.assert_allclose(m["off_policy_frac"], 2 / 3, rtol=1e-6)


def test_rl_plus_weight_is_bounded_and_exploration_vanishes_at_certainty():
    """w ≤ 2·π_θ/π_old (the digest's bound: the π_ω half of the denominator is ≥ 0) and w ≤ 4·π_θ (π_ω ≥ ½), reached
    at π_old = 0; C = 0 at π_θ = 1, so a certain trace token gets no gradient; exponent 0: C = 1."""
    grid = np.linspace(0.01, 1.0, 12, dtype=np.float32)
    p, q = (jnp.asarray(x.reshape(1, -1)) for x in np.meshgrid(grid, grid))
    ones = jnp.ones_like(p)
    loss_fn = lambda lp, o: op.rl_plus(lp, o, jnp.ones((1,)), ones, ones, exploration_exponent=0.0)  # noqa: E731
    w = -np.asarray(jax.grad(lambda lp: loss_fn(lp, jnp.log(q))[0])(jnp.log(p))) * p.size  # = w (C = 1, A = 1)
    np.testing.assert_allclose(w, _mis(p, q), rtol=1e-5)
    assert np.all(w <= 2 * p / q + 1e-6) and np.all(w <= 4 * p + 1e-6)
    _, m = op.rl_plus(jnp.log(jnp.array([[1.0, 0.5]])), jnp.log(jnp.zeros((1, 2))), jnp.ones((1,)), ONE2, ONE2)
    np.testing.assert_allclose(m["off_is_weight_max"], 4.0, rtol=1e-6)
    fn = lambda lp: op.rl_plus(lp, jnp.log(jnp.array([[0.3, 0.3]])), jnp.ones((1,)), ONE2, ONE2)  # noqa: E731
    g = _grad(fn, jnp.log(jnp.array([[1.0, 0.5]])))
    assert g[0, 0] == 0.0 and g[0, 1] < 0.0


@pytest.mark.parametrize("trace_logp", [-jnp.inf, -1e4])
def test_rl_plus_trace_token_of_probability_zero(trace_logp):
    logp = LOGP.at[0, 1].set(trace_logp)
    old = OLD.at[0, 1].set(trace_logp)
    fn = lambda lp: op.rl_plus(lp, old, jnp.ones((1,)), ONES, OFF)  # noqa: E731
    loss, m = fn(logp)
    g = _grad(fn, logp)
    assert np.isfinite(float(loss)) and np.all(np.isfinite(g)) and g[0, 1] == 0.0
    assert all(np.isfinite(float(v)) for v in m.values())


def official_rl_plus(old_log_prob, log_prob, advantages, eos_mask, cliprange, clip_upper_bound, prefix_mask,
                     loss_remove_clip=False):
    """numpy transcription of RL-PLUS's `compute_token_on_off_policy_loss` (rlplus_core_alg.py) with
    off_policy_strategy="RL-PLUS", target_probs=None, no off / all clips, token mean. Returns pg_loss."""
    ratio = np.exp(log_prob - old_log_prob)
    on_pg_losses = -advantages * ratio
    upper_bound = max(clip_upper_bound, 1.0 + cliprange)
    if not loss_remove_clip:
        on_pg_losses = np.maximum(on_pg_losses, -advantages * np.clip(ratio, 1.0 - cliprange, upper_bound))
    omiga_prob = 0.5 * (np.exp(old_log_prob) + 1)
    off_ratio = 2 * np.exp(log_prob) / (np.exp(old_log_prob) + omiga_prob)
    explosion_based_advantages = advantages * (1 - np.exp(log_prob)) ** 0.5
    off_pg_losses = -off_ratio * explosion_based_advantages
    pg_losses = off_pg_losses * prefix_mask + on_pg_losses * (1 - prefix_mask)
    return _masked_mean(pg_losses, eos_mask)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("remove_clip", [False, True])
def test_rl_plus_matches_numpy_transcription_of_the_official_code(seed, remove_clip):
    logp, old, a, mask, off = _random_batch(seed)
    adv = np.broadcast_to(a[:, None], mask.shape)
    want = official_rl_plus(old, logp, adv, mask, 0.2, 1.0, off, loss_remove_clip=remove_clip)
    got, _ = op.rl_plus(logp, old, a, mask, off, on_policy_clip=not remove_clip)
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("seed", [3, 4])
def test_rl_plus_gradient_matches_hand_derived(seed):
    """dL/dlogp = w_agg · (trace: −A·(1 − π)^½·w, w = π/(¾π_old + ¼); sampled: −A·ρ where the clip does not bind)."""
    logp, old, a, mask, off = _random_batch(seed)
    fn = lambda lp: op.rl_plus(lp, old, a, mask, off)  # noqa: E731
    got = np.asarray(_grad(fn, jnp.asarray(logp)))
    p, q, rho, adv = np.exp(logp), np.exp(old), np.exp(logp - old), a[:, None]
    binds = ((adv > 0) & (rho > 1.2)) | ((adv < 0) & (rho < 0.8))
    want = np.where(off > 0, -adv * np.sqrt(1 - p) * _mis(p, q), np.where(binds, 0.0, -adv * rho))
    np.testing.assert_allclose(got, want * mask / mask.sum(), rtol=1e-4, atol=1e-7)


def test_rl_plus_jit_equals_eager_and_exponent_must_be_non_negative():
    logp, old, a, mask, off = (jnp.asarray(x) for x in _random_batch(7))
    eager = off_policy.rl_plus(logp, old, a, mask, off)
    jitted = op.rl_plus(logp, old, a, mask, off)
    np.testing.assert_allclose(eager[0], jitted[0], rtol=1e-6)
    for k in eager[1]:
        np.testing.assert_allclose(eager[1][k], jitted[1][k], rtol=1e-6, err_msg=k)
    with pytest.raises(ValueError, match="exploration_exponent=-1"):
        off_policy.rl_plus(logp, old, a, mask, off, exploration_exponent=-1.0)
