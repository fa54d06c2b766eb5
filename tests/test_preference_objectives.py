"""Preference objectives beyond DPO (rl4llm.rl.preference): CPL, P3O, the SPO win-rate advantage and DMPO.

Every expected value is computed by hand (written out in the comments) or by numpy transcriptions of the formulas,
never by calling the kernel; then the zero-margin / on-policy points, masks and padding, gradient signs, and the
learner's pair objective (`train.preference_step.pair_loss`) on hand-picked pairs. The CPL reference
`_official_cpl_loss` transcribes `biased_bce_with_logits` of the official code (`jhejna/cpl`,
`research/algs/cpl.py`: `logit12 = adv1 − bias·adv2`, loss `log(1 + exp(−logit12))` for "1 preferred").
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm.rl import preference
from rl4llm.train import preference_step
from tests.rl.rl_testing import compiled

pref = compiled(preference)
LOG2 = np.log(2.0)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# ----------------------------------------------------------------------------------------------------------- CPL


def test_discounted_sequence_logprobs_by_hand():
    logp = jnp.array([[-1.0, -2.0, -3.0, -4.0], [-1.0, -1.0, jnp.nan, -1.0]])
    mask = jnp.array([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    # row 0: valid tokens -1 (k=0), -3 (k=1), -4 (k=2); the masked token does not advance the discount
    # γ = 0.5: -1 + 0.5·(-3) + 0.25·(-4) = -3.5; row 1: -1 + 0.5·(-1) = -1.5 (NaN in padding ignored)
    np.testing.assert_allclose(pref.discounted_sequence_logprobs(logp, mask, gamma=0.5), [-3.5, -1.5], rtol=1e-6)
    # γ = 1 is the plain sum
    np.testing.assert_allclose(pref.discounted_sequence_logprobs(logp, mask, gamma=1.0),
                               pref.sequence_logprobs(logp, mask), rtol=1e-6)
    g = jax.grad(lambda x: preference.discounted_sequence_logprobs(x, mask, gamma=0.5).sum())(jnp.zeros((2, 4)))
    np.testing.assert_allclose(g, [[1.0, 0.0, 0.5, 0.25], [1.0, 0.5, 0.0, 0.0]])
    with pytest.raises(ValueError, match="gamma=0"):
        preference.discounted_sequence_logprobs(logp, mask, gamma=0)


def _official_cpl_loss(adv1, adv2, bias):
    """`biased_bce_with_logits(adv1, adv2, y=0, bias)` per pair (y = 0: segment 1 preferred), numpy float64."""
    logit12 = adv1 - bias * adv2
    max12 = np.maximum(-logit12, 0.0)
    return np.log(np.exp(-max12) + np.exp(-logit12 - max12)) + max12


def test_cpl_loss_by_hand():
    pc, pr = jnp.array([-2.0, -1.0, -3.0]), jnp.array([-4.0, -1.0, -1.0])
    losses, m = pref.cpl_loss(pc, pr, alpha=0.5, conservative_bias=0.5)
    # S_c = 0.5·pc = (-1, -0.5, -1.5), S_r = (-2, -0.5, -0.5); z = λS_r − S_c = (0, 0.25, 1.25)
    expected = np.log1p(np.exp([0.0, 0.25, 1.25]))
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    np.testing.assert_allclose(losses, _official_cpl_loss(0.5 * np.array(pc), 0.5 * np.array(pr), 0.5), rtol=1e-6)
    np.testing.assert_allclose(m["loss"], expected.mean(), rtol=1e-6)
    np.testing.assert_allclose(m["accuracy"], 1 / 3)  # strict S_c > S_r: pair 0 only (pair 1 ties)
    np.testing.assert_allclose(m["margin"], np.mean([1.0, 0.0, -1.0]), atol=1e-7)
    np.testing.assert_allclose(m["logps/chosen"], -2.0)
    np.testing.assert_allclose(m["logps/rejected"], -2.0)


def test_cpl_zero_margin_point_is_log2_and_bias_is_conservative():
    x = jnp.array([-3.0, -0.7])
    np.testing.assert_allclose(pref.cpl_loss(x, x, alpha=0.1, conservative_bias=1.0)[0], [LOG2, LOG2], rtol=1e-6)
    zero = jnp.zeros(2)
    np.testing.assert_allclose(pref.cpl_loss(zero, zero, alpha=0.3, conservative_bias=0.5)[0], [LOG2] * 2, rtol=1e-6)
    # λ < 1 on equal (negative) segment log-probs: the rejected score is shrunk toward 0, so the loss exceeds log 2
    biased = pref.cpl_loss(x, x, alpha=0.1, conservative_bias=0.5)[0]
    np.testing.assert_allclose(biased, np.log1p(np.exp(-0.5 * 0.1 * np.array(x))), rtol=1e-6)
    assert np.all(np.asarray(biased) > LOG2)


def test_cpl_gradient_raises_chosen_and_lowers_rejected():
    pc, pr, alpha, lam = jnp.array([-2.0, -5.0]), jnp.array([-3.0, -1.0]), 0.2, 0.5
    g_c, g_r = jax.grad(lambda a, b: preference.cpl_loss(a, b, alpha=alpha, conservative_bias=lam)[0].sum(),
                        (0, 1))(pc, pr)
    z = lam * alpha * np.array(pr) - alpha * np.array(pc)  # (0.1, 0.9)
    np.testing.assert_allclose(g_c, -alpha * _sigmoid(z), rtol=1e-6)
    np.testing.assert_allclose(g_r, lam * alpha * _sigmoid(z), rtol=1e-6)
    assert np.all(np.asarray(g_c) < 0) and np.all(np.asarray(g_r) > 0)


def test_cpl_masks_invalid_pairs_and_nan():
    pc, pr = jnp.array([-1.0, jnp.nan, -2.0]), jnp.array([-2.0, jnp.inf, -1.0])
    valid = jnp.array([True, False, True])
    losses, m = pref.cpl_loss(pc, pr, alpha=1.0, conservative_bias=1.0, valid=valid)
    np.testing.assert_allclose(losses, [np.log1p(np.exp(-1.0)), 0.0, np.log1p(np.exp(1.0))], rtol=1e-6)
    np.testing.assert_allclose(m["valid_frac"], 2 / 3)
    g = jax.grad(lambda a: preference.cpl_loss(a, pr, valid=valid)[1]["loss"])(pc)
    assert np.all(np.isfinite(g)) and g[1] == 0
    empty = pref.cpl_loss(jnp.zeros(0), jnp.zeros(0))
    assert empty[0].shape == (0,) and float(empty[1]["loss"]) == 0.0
    for bad in (dict(alpha=0.0), dict(conservative_bias=0.0), dict(conservative_bias=1.5)):
        with pytest.raises(ValueError):
            preference.cpl_loss(pc, pr, **bad)


# ----------------------------------------------------------------------------------------------------------- P3O


def _p3o_numpy(pc, pr, oc, orr, rc, rr, eps, mode):
    """P3O per-pair loss (numpy float64), the formulas written out: Δ = r_c − r_r; joint: R = e^{(pc−oc)−(pr−orr)},
    −min(RΔ, clip(R)Δ)/2; separate: −[min(ρ_cΔ, clip(ρ_c)Δ) + min(ρ_r(−Δ), clip(ρ_r)(−Δ))]/2."""
    d = rc - rr
    if mode == "joint":
        ratio = np.exp((pc - oc) - (pr - orr))
        return -np.minimum(ratio * d, np.clip(ratio, 1 - eps, 1 + eps) * d) / 2
    rho_c, rho_r = np.exp(pc - oc), np.exp(pr - orr)
    return -(np.minimum(rho_c * d, np.clip(rho_c, 1 - eps, 1 + eps) * d)
             + np.minimum(-rho_r * d, -np.clip(rho_r, 1 - eps, 1 + eps) * d)) / 2


def test_p3o_joint_by_hand():
    # pair ratios R = 1.5, 0.5, 1.1 (log-ratios on the chosen side, rejected on-policy); Δ = 2, 2, 1; ε = 0.2
    pc = jnp.log(jnp.array([1.5, 0.5, 1.1]))
    z = jnp.zeros(3)
    rc, rr = jnp.array([1.0, 1.0, 0.5]), jnp.array([-1.0, -1.0, -0.5])
    losses, m = pref.p3o_loss(pc, z, z, z, rc, rr, clip_ratio=0.2, clip_mode="joint")
    # R=1.5: min(3, 1.2·2 = 2.4) = 2.4 -> -1.2 (clipped); R=0.5: min(1, 0.8·2 = 1.6) = 1 -> -0.5;
    # R=1.1: min(1.1, 1.1) -> -0.55
    np.testing.assert_allclose(losses, [-1.2, -0.5, -0.55], rtol=1e-6)
    np.testing.assert_allclose(m["clip_frac"], 1 / 3)
    np.testing.assert_allclose(m["ratio_mean"], 3.1 / 3, rtol=1e-6)
    np.testing.assert_allclose(m["ratio_max"], 1.5, rtol=1e-6)
    np.testing.assert_allclose(m["ratio_min"], 0.5, rtol=1e-6)
    np.testing.assert_allclose(m["reward_margin"], 5 / 3, rtol=1e-6)
    g_c, g_r = jax.grad(lambda a, b: preference.p3o_loss(a, b, z, z, rc, rr, clip_mode="joint")[0].sum(),
                        (0, 1))(pc, z)
    # d/dlog π_c of −RΔ/2 is −RΔ/2 where unclipped, 0 where the clip binds; the rejected side the opposite
    np.testing.assert_allclose(g_c, [0.0, -0.5, -0.55], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(g_r, [0.0, 0.5, 0.55], rtol=1e-6, atol=1e-7)


def test_p3o_separate_by_hand():
    # ρ_c = 1.5, ρ_r = 0.5, Δ = 1: chosen min(1.5, 1.2) = 1.2, rejected min(−0.5, −0.8) = −0.8 -> −(1.2 − 0.8)/2
    # ρ_c = 0.9, ρ_r = 1.1, Δ = 1: chosen 0.9, rejected min(−1.1, −1.1) = −1.1 -> −(0.9 − 1.1)/2 = 0.1
    pc, pr = jnp.log(jnp.array([1.5, 0.9])), jnp.log(jnp.array([0.5, 1.1]))
    z, one = jnp.zeros(2), jnp.ones(2)
    losses, m = pref.p3o_loss(pc, pr, z, z, one, z, clip_ratio=0.2, clip_mode="separate")
    np.testing.assert_allclose(losses, [-0.2, 0.1], rtol=1e-5)
    np.testing.assert_allclose(m["clip_frac"], 0.5)  # both sides of pair 0 bind, none of pair 1
    g_c, g_r = jax.grad(lambda a, b: preference.p3o_loss(a, b, z, z, one, z, clip_mode="separate")[0].sum(),
                        (0, 1))(pc, pr)
    np.testing.assert_allclose(g_c, [0.0, -0.45], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(g_r, [0.0, 0.55], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", preference.P3O_CLIP_MODES)
def test_p3o_matches_numpy_on_random_pairs(mode):
    rng = np.random.default_rng(0)
    args = [rng.normal(size=64) * s for s in (0.3, 0.3, 0.0, 0.0, 1.0, 1.0)]
    args[2], args[3] = args[0] + rng.normal(size=64) * 0.2, args[1] + rng.normal(size=64) * 0.2
    losses, _ = pref.p3o_loss(*(jnp.asarray(a) for a in args), clip_ratio=0.2, clip_mode=mode)
    np.testing.assert_allclose(losses, _p3o_numpy(*args, 0.2, mode), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", preference.P3O_CLIP_MODES)
def test_p3o_on_policy_gradient_is_the_pairwise_policy_gradient(mode):
    """At π = π_old (ratio 1) both variants give Theorem 1's gradient: −Δ/2 on log π(y_c), +Δ/2 on log π(y_r)."""
    pc, pr = jnp.array([-3.0, -7.0, -1.0]), jnp.array([-2.0, -4.0, -9.0])
    rc, rr = jnp.array([1.0, 0.5, 3.0]), jnp.array([0.0, -0.5, 1.0])
    losses, m = pref.p3o_loss(pc, pr, pc, pr, rc, rr, clip_mode=mode)
    delta = np.array(rc) - np.array(rr)
    # the value: joint −RΔ/2 = −Δ/2; separate −(Δ + (−Δ))/2 = 0
    np.testing.assert_allclose(losses, -delta / 2 if mode == "joint" else 0 * delta, rtol=1e-6)
    assert float(m["clip_frac"]) == 0.0 and float(m["ratio_max"]) == 1.0 == float(m["ratio_min"])
    g_c, g_r = jax.grad(lambda a, b: preference.p3o_loss(a, b, pc, pr, rc, rr, clip_mode=mode)[0].sum(),
                        (0, 1))(pc, pr)
    np.testing.assert_allclose(g_c, -delta / 2, rtol=1e-6)
    np.testing.assert_allclose(g_r, delta / 2, rtol=1e-6)
    assert np.all(np.asarray(g_c) < 0) and np.all(np.asarray(g_r) > 0)


@pytest.mark.parametrize("mode", preference.P3O_CLIP_MODES)
def test_p3o_is_invariant_to_a_prompt_constant_in_the_rewards(mode):
    rng = np.random.default_rng(1)
    pc, pr, oc, orr = (jnp.asarray(rng.normal(size=8) * 0.3) for _ in range(4))
    rc, rr = jnp.asarray(rng.normal(size=8)), jnp.asarray(rng.normal(size=8))
    shift = jnp.asarray(rng.normal(size=8) * 10)  # one constant per pair (prompt)

    def value_and_grad(a, b):
        return jax.value_and_grad(lambda x: preference.p3o_loss(x, pr, oc, orr, a, b, clip_mode=mode)[0].sum())(pc)

    (v0, g0), (v1, g1) = value_and_grad(rc, rr), value_and_grad(rc + shift, rr + shift)
    np.testing.assert_allclose(v0, v1, rtol=1e-5)
    np.testing.assert_allclose(g0, g1, rtol=1e-5, atol=1e-6)


def test_p3o_masks_and_clamps_huge_log_ratios():
    pc = jnp.array([200.0, jnp.nan, 0.0])
    z = jnp.zeros(3)
    valid = jnp.array([True, False, True])
    rc, rr = jnp.array([1.0, jnp.nan, 0.0]), jnp.array([0.0, 0.0, 1.0])

    def loss(x, mode):
        return preference.p3o_loss(x, z, z, z, rc, rr, clip_mode=mode, valid=valid)[1]["loss"]

    for mode in preference.P3O_CLIP_MODES:
        value, g = jax.value_and_grad(loss)(pc, mode)
        assert np.isfinite(value) and np.all(np.isfinite(g)) and g[1] == 0, (mode, value, g)
    # pair 0 (log-ratio clamped to 20, Δ = 1) is clipped: −1.2/2; pair 2 on-policy with Δ = −1: +1/2
    np.testing.assert_allclose(loss(pc, "joint"), (-0.6 + 0.5) / 2, rtol=1e-6)
    for bad in (dict(clip_ratio=0.0), dict(clip_ratio=1.0), dict(clip_mode="both")):
        with pytest.raises(ValueError):
            preference.p3o_loss(z, z, z, z, z, z, **bad)


# ------------------------------------------------------------------------------------ the learner's pair objective

# 3 groups of 2 (group 1 tied: no pair): group 0 = rows 0, 3 (row 3 wins), group 2 = rows 4, 5 (row 4 wins)
GROUP_IDS = jnp.array([0, 1, 1, 0, 2, 2])
SCORES = jnp.array([0.0, 1.0, 1.0, 1.0, 2.0, 0.5])


def _rows():  # one token per row: its log-prob is the row's sequence log-prob
    return preference_step.PairRows(mask=jnp.ones((6, 1)), scores=SCORES, group_ids=GROUP_IDS)


def _settings(loss, **fields):
    return preference_step.PreferenceSettings(loss, "sigmoid", 0.1, 0.0, 3, **fields)


def test_pair_objective_cpl_on_hand_picked_pairs():
    seq = jnp.array([-4.0, -1.0, -1.0, -2.0, -3.0, -6.0])
    cfg = _settings("cpl", alpha=0.5, conservative_bias=0.5)
    value, (row_loss, m) = preference_step.pair_loss(cfg, seq[:, None], None, None, _rows())
    # pairs (3, 0): z = 0.5·0.5·(−4) − 0.5·(−2) = 0; (4, 5): 0.25·(−6) + 1.5 = 0 -> both log 2
    np.testing.assert_allclose(value, LOG2, rtol=1e-6)
    np.testing.assert_allclose(row_loss, [0, 0, 0, LOG2 / 2, LOG2 / 2, 0], rtol=1e-6)
    np.testing.assert_allclose(m["valid_pair_frac"], 2 / 3)


def test_pair_objective_p3o_reads_old_logprobs_and_reward_difference():
    seq = jnp.log(jnp.array([1.0, 1.0, 1.0, 1.5, 0.5, 1.0]))  # ratios vs old = 0: R(3, 0) = 1.5, R(4, 5) = 0.5
    cfg = _settings("p3o", clip_ratio=0.2, clip_mode="joint", use_old_logp=True)
    value, (_, m) = preference_step.pair_loss(cfg, seq[:, None], None, jnp.zeros((6, 1)), _rows())
    # (3, 0): Δ = 1, min(1.5, 1.2) -> −0.6; (4, 5): Δ = 1.5, min(0.75, 1.2) -> −0.375
    np.testing.assert_allclose(value, (-0.6 - 0.375) / 2, rtol=1e-6)
    np.testing.assert_allclose(m["clip_frac"], 0.5)
    np.testing.assert_allclose(m["reward_margin"], 1.25)


# ----------------------------------------------------------------------------------------------------------- SPO


def test_win_rates_and_spo_advantages_by_hand():
    # group 0 = rows 0, 2, 5: scores 1, 0, 0.5; group 1 = rows 1, 3 (a tie); group 2 = row 4 alone; row 6: id 7 is
    # outside [0, 3) (no group); groups are not contiguous
    scores = jnp.array([1.0, 2.0, 0.0, 2.0, 5.0, 0.5, 9.0])
    gids = jnp.array([0, 1, 0, 1, 2, 0, 7])
    # row 0 beats both others (1), row 2 loses both (0), row 5 beats row 2 and loses to row 0 (½); the tie: ½ each;
    # the singleton and the row in no group: ½
    expected = np.array([1.0, 0.5, 0.0, 0.5, 0.5, 0.5, 0.5])
    np.testing.assert_allclose(pref.win_rates(scores, gids, num_groups=3), expected)
    np.testing.assert_allclose(pref.spo_advantages(scores, gids, num_groups=3), expected - 0.5)
    # group of 4 with a tie at the top: 3, 3, 1, 0 -> (1 + ½ + 1)/3 twice, 1/3, 0
    np.testing.assert_allclose(pref.win_rates(jnp.array([3.0, 3.0, 1.0, 0.0]), jnp.zeros(4, int), num_groups=1),
                               [2.5 / 3, 2.5 / 3, 1 / 3, 0.0], rtol=1e-6)


def test_spo_is_the_registered_estimator_and_broadcasts_over_tokens():
    from rl4llm.rl import registry

    scores, gids = jnp.array([0.0, 1.0, 1.0, 0.0]), jnp.array([0, 0, 1, 1])
    adv = registry.get_advantage("spo")(scores, gids, jnp.ones((4, 3)), num_groups=2)
    np.testing.assert_allclose(adv, [-0.5, 0.5, 0.5, -0.5])


def test_win_rates_properties():
    rng = np.random.default_rng(0)
    scores = jnp.asarray(rng.integers(0, 4, size=48).astype(np.float32))  # ties are frequent
    gids = jnp.asarray(rng.permutation(np.repeat(np.arange(6), 8)))
    w = np.asarray(pref.win_rates(scores, gids, num_groups=6))
    for g in range(6):  # every group's win rates average ½ (each pair shares one win)
        np.testing.assert_allclose(w[np.asarray(gids) == g].mean(), 0.5, rtol=1e-6)
    # ordinal: an increasing transform of the scores changes nothing, and the win rate orders as the score
    np.testing.assert_allclose(pref.win_rates(jnp.exp(3 * scores) - 7, gids, num_groups=6), w, rtol=1e-6)
    s = np.asarray(scores)
    same = np.asarray(gids)[:, None] == np.asarray(gids)[None, :]
    assert np.all(((w[:, None] > w[None, :]) == (s[:, None] > s[None, :]))[same])


def test_win_rates_nan_scores_compare_with_nobody():
    scores, gids = jnp.array([jnp.nan, 1.0, 0.0]), jnp.zeros(3, int)
    np.testing.assert_allclose(pref.win_rates(scores, gids, num_groups=1), [0.5, 1.0, 0.0])
    assert pref.win_rates(jnp.zeros(0), jnp.zeros(0, int), num_groups=2).shape == (0,)


# ---------------------------------------------------------------------------------------------------------- DMPO


def _official_dmpo_coefficient(j, num_round, gamma):
    """The coefficient of turn j in `swt-user/DMPO` `get_batch_loss_metrics`, line by line."""
    if gamma < 1:
        return gamma ** j * (1 - gamma ** (num_round - j)) / (1 - gamma ** num_round)
    return (num_round - j) / num_round


def test_dmpo_turn_weights_by_hand():
    turn_id = jnp.array([[0, 0, -1, 1, 1, -1, 2], [0, 0, -1, -1, -1, -1, -1]])
    # 3 turns, γ = 0.5: φ(0) = (1 − 0.125)/0.875 = 1, φ(1) = 0.5·0.75/0.875 = 3/7, φ(2) = 0.25·0.5/0.875 = 1/7;
    # 1 turn: φ(0) = 1; observations and padding 0
    np.testing.assert_allclose(pref.dmpo_turn_weights(turn_id, gamma=0.5),
                               [[1, 1, 0, 3 / 7, 3 / 7, 0, 1 / 7], [1, 1, 0, 0, 0, 0, 0]], rtol=1e-6)
    # γ = 1: (T − j)/T
    np.testing.assert_allclose(pref.dmpo_turn_weights(turn_id, gamma=1.0),
                               [[1, 1, 0, 2 / 3, 2 / 3, 0, 1 / 3], [1, 1, 0, 0, 0, 0, 0]], rtol=1e-6)
    for gamma in (0.7, 0.95, 1.0):
        official = [[_official_dmpo_coefficient(j, 3, gamma) if j >= 0 else 0.0 for j in row] for row in
                    np.asarray(turn_id[:1])]
        np.testing.assert_allclose(pref.dmpo_turn_weights(turn_id[:1], gamma=gamma), official, rtol=1e-6)
    # γ → 0: only the first turn weighs
    np.testing.assert_allclose(pref.dmpo_turn_weights(turn_id[:1], gamma=1e-6), [[1, 1, 0, 0, 0, 0, 0]], atol=1e-5)


def test_dmpo_loss_by_hand():
    beta, gamma = 0.5, 0.5
    # chosen: 2 turns (tokens t0: turn 0, t1: observation, t2: turn 1), rejected: 1 turn + padding
    c_tid, r_tid = jnp.array([[0, -1, 1]]), jnp.array([[0, 0, -1]])
    pc, rc = jnp.array([[-1.0, -9.0, -2.0]]), jnp.array([[-2.0, -5.0, -2.0]])
    pr, rr = jnp.array([[-1.0, -1.0, jnp.nan]]), jnp.array([[-0.5, -0.5, 0.0]])
    losses, m = pref.dmpo_loss(pc, pr, rc, rr, c_tid, r_tid, beta=beta, gamma=gamma)
    # chosen: 2 turns, φ = (1 − 0.25)/0.75 = 1, 0.5·0.5/0.75 = 1/3: 1·(−1 + 2) + (1/3)·(−2 + 2) = 1
    # rejected: 1 turn, φ = 1: (−1 + 0.5)·2 = −1; h = 2, L = softplus(−βh) = log(1 + e^{−1})
    np.testing.assert_allclose(losses, [np.log1p(np.exp(-1.0))], rtol=1e-6)
    np.testing.assert_allclose(m["rewards/margins"], beta * 2.0, rtol=1e-6)
    g = jax.grad(lambda x: preference.dmpo_loss(x, pr, rc, rr, c_tid, r_tid, beta=beta, gamma=gamma)[0].sum())(pc)
    # dL/dlogπ_t = −β·σ(−βh)·φ_t on the chosen action tokens, 0 on the observation
    np.testing.assert_allclose(g, -beta * _sigmoid(-1.0) * np.array([[1.0, 0.0, 1 / 3]]), rtol=1e-6)
    assert np.all(np.isfinite(jax.grad(lambda x: preference.dmpo_loss(pc, x, rc, rr, c_tid, r_tid)[0].sum())(pr)))


def test_dmpo_reduces_to_dpo_on_single_turns_and_is_log2_at_zero_margin():
    rng = np.random.default_rng(2)
    pc, pr, rc, rr = (jnp.asarray(rng.normal(size=(4, 5))) for _ in range(4))
    tid = jnp.where(jnp.arange(5)[None] < jnp.array([[5], [3], [1], [4]]), 0, -1)  # one turn, padded
    mask = (tid >= 0).astype(jnp.float32)
    seq = lambda x: preference.sequence_logprobs(x, mask)  # noqa: E731
    np.testing.assert_allclose(pref.dmpo_loss(pc, pr, rc, rr, tid, tid, beta=0.3)[0],
                               pref.dpo_loss(seq(pc), seq(pr), seq(rc), seq(rr), beta=0.3)[0], rtol=1e-5)
    # the same multi-turn log-ratios on both sides: log 2
    tid3 = jnp.array([[0, 1, 1, 2, -1]] * 4)
    np.testing.assert_allclose(pref.dmpo_loss(pc, pc, rc, rc, tid3, tid3)[0], [LOG2] * 4, rtol=1e-6)
    with pytest.raises(ValueError, match="gamma"):
        preference.dmpo_turn_weights(tid3, gamma=0.0)


# -------------------------------------------------------------------------- the learner: micro-batches and configs


def test_learner_p3o_micro_batched_equals_direct_gradient():
    """The learner's P3O update (separate clipping) with micro-batches of 2 rows (pairs straddle micro-batches) and
    old log-probs away from the current ones (some ratios clip) has the value and gradient of `p3o_loss` written
    directly on the hand-picked pairs of `tests.test_online_dpo` (CPL and DPO share the same per-row surrogate)."""
    import dataclasses

    import optax

    from rl4llm import models
    from rl4llm.train import logprobs as logprobs_lib
    from tests import test_online_dpo as dpo

    params = models.init_params(dpo.MODEL_CFG, jax.random.key(0))
    batch = dpo._batch()
    mask = batch.completion_mask

    def sequence_logprobs(p):
        lp, _ = logprobs_lib.completion_logprobs(dpo.MODEL_CFG, p, batch.tokens, batch.attention_mask,
                                                 completion_len=dpo.T, temperature=1.0, chunk_size=4)
        return lp

    current = sequence_logprobs(params)
    batch = batch.replace(old_logp=current + 0.15 * jax.random.normal(jax.random.key(5), current.shape))
    cfg = dpo._learner_cfg(2, loss="p3o", clip_ratio=0.2, clip_mode="separate", use_old_logp=True)
    cfg = dataclasses.replace(cfg, use_old_logp=True)
    pg = dpo._policy_gradients(cfg, dpo._state(params, params, optax.sgd(0.0)), batch)
    chosen, rejected = np.array(dpo.PAIRS).T

    def direct_loss(p):
        s, old = jnp.sum(sequence_logprobs(p) * mask, -1), jnp.sum(batch.old_logp * mask, -1)
        losses, _ = preference.p3o_loss(s[chosen], s[rejected], old[chosen], old[rejected], dpo.SCORES[chosen],
                                        dpo.SCORES[rejected], clip_ratio=0.2, clip_mode="separate")
        return jnp.mean(losses)

    value, grads = jax.value_and_grad(direct_loss)(params)
    np.testing.assert_allclose(pg.sums["pg_loss"], value, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(pg.pair_metrics["p3o/loss"], value, rtol=1e-5, atol=1e-7)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), pg.grads, grads)
    assert float(optax.tree.norm(pg.grads)) > 0
    assert 0 < float(pg.pair_metrics["p3o/clip_frac"]) < 1  # the noise moved some ratios out of 1 ± 0.2


def _config(loss, **overrides):
    from configs import default

    config = default.get_config()
    config.preference.loss = loss
    config.update_from_flattened_dict(overrides)
    return config


@pytest.mark.parametrize("loss, overrides, field", [
    ("p3o", {"preference.clip_ratio": 1.0}, "config.preference.clip_ratio=1.0"),
    ("p3o", {"preference.clip_mode": "both"}, "config.preference.clip_mode"),
    ("p3o", {"rl.num_minibatches": 2}, "config.rl.num_minibatches=2"),
    ("cpl", {"preference.conservative_bias": 0.0}, "config.preference.conservative_bias"),
    ("cpl", {"preference.discount": 1.5}, "config.preference.discount"),
    ("cpl", {"rl.tis_cap": 2.0}, "config.rl.tis_cap=2.0"),
    ("cpl", {"rl.ref_reset_every": 4}, "config.rl.ref_reset_every=4"),  # reference-free: nothing to reset
])
def test_config_errors_name_the_field(loss, overrides, field):
    from rl4llm import config as config_lib

    with pytest.raises(config_lib.ConfigError, match=field.replace(".", r"\.")):
        config_lib.parse(_config(loss, **overrides))


@pytest.mark.parametrize("loss, keeps_reference", [("dpo", True), ("cpl", False), ("p3o", False)])
def test_only_a_pair_loss_that_reads_it_keeps_a_reference_copy_without_kl(loss, keeps_reference):
    import optax

    from rl4llm import config as config_lib
    from rl4llm import models
    from rl4llm.train import state as state_lib

    config = config_lib.parse(_config(loss, **{"rl.kl_coef": 0.0}))
    params = models.init_params(models.get_config("nano", vocab_size=16), jax.random.key(0))
    state = state_lib.init_rl_state(config, params, optax.sgd(0.0), jax.random.key(1))
    assert (state.ref_params is not None) == keeps_reference
