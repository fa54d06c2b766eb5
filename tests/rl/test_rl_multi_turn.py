"""Multi-turn kernels (rl.multi_turn): hand-computed multi-turn cases and defining properties."""

import datetime

import hypothesis
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import strategies as st

from rl4llm.rl import advantages as eager_advantages
from rl4llm.rl import entropy as entropy_lib
from rl4llm.rl import losses
from rl4llm.rl import multi_turn as eager_multi_turn
from rl4llm.rl import registry
from rl4llm.rl.aggregation import masked_whiten

from rl_testing import compiled

mt = compiled(eager_multi_turn)
adv = compiled(eager_advantages)

_SETTINGS = dict(deadline=datetime.timedelta(seconds=60), suppress_health_check=list(hypothesis.HealthCheck),
                 max_examples=12, derandomize=True)
S3 = np.sqrt(1 / 3)  # unbiased std of {0, 1, 1} or {1, 0, 0}


def layout(rows, t):
    """(turn_id [B, T], mask [B, T], turn_valid [B, K], turn_end [B, K]) from rows given as a list of
    segments: "p<n>" prompt, "a<n>" a turn of n action tokens, "o<n>" an observation; then padding."""
    k = max(sum(s[0] == "a" for s in row) for row in rows)
    turn_id = np.full((len(rows), t), -1)
    turn_valid = np.zeros((len(rows), k), bool)
    turn_end = np.zeros((len(rows), k), int)
    for i, row in enumerate(rows):
        pos, turn = 0, 0
        for seg in row:
            n = int(seg[1:])
            if seg[0] == "a":
                turn_id[i, pos:pos + n] = turn
                turn_valid[i, turn] = True
                turn_end[i, turn] = pos + n - 1
                turn += 1
            pos += n
        assert pos <= t
    return (jnp.asarray(turn_id), jnp.asarray(turn_id >= 0, jnp.float32), jnp.asarray(turn_valid),
            jnp.asarray(turn_end))


B, T, K, G = 6, 24, 4, 2  # fixed shapes for the random layouts: one compilation per kernel


def random_layout(seed):
    """Random ragged layout: 1..K turns of 1..3 tokens, observations of 0..2 tokens (0: adjacent turns),
    a 0..2-token prompt, padding. Every turn index below K is reached by some row of each group."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(B):
        n = K if i < G else int(rng.integers(1, K + 1))
        row = [f"p{rng.integers(0, 3)}"]
        for _ in range(n):
            row += [f"a{rng.integers(1, 4)}", f"o{rng.integers(0, 3)}"]
        rows.append(row)
    return layout(rows, T)


def group_ids():
    return jnp.arange(B) % G


# ------------------------------------------------------------------------------------------- helpers


def test_per_turn_sum_and_broadcast():
    # tokens: [prompt, a0, a0, obs, a1, a1, a1, pad]; values [nan, 1, 2, 9, 3, 4, 5, 9]
    # turn 0: 1 + 2 = 3; turn 1: 3 + 4 + 5 = 12; turn 2 (does not exist): 0; NaN off the mask ignored
    turn_id, mask, _, _ = layout([["p1", "a2", "o1", "a3"]], 8)
    values = jnp.array([[jnp.nan, 1.0, 2.0, 9.0, 3.0, 4.0, 5.0, 9.0]])
    np.testing.assert_array_equal(mt.per_turn_sum(values, turn_id, mask, num_turns=3), [[3.0, 12.0, 0.0]])
    # broadcast [10, 20, 30]: prompt/obs/pad get 0, never turn 0's value
    np.testing.assert_array_equal(mt.turns_to_tokens(jnp.array([[10.0, 20.0, 30.0]]), turn_id, mask),
                                  [[0, 10, 10, 0, 20, 20, 20, 0]])


def test_discounted_turn_returns_hand_case():
    # γ = 0.5. Row 0, 3 turns, r = [1, 2, 4]: G2 = 4, G1 = 2 + 0.5·4 = 4, G0 = 1 + 0.5·4 = 3.
    # Row 1, 2 turns, r = [1, 2, (100: no turn)]: G1 = 2, G0 = 1 + 0.5·2 = 2, G2 = 0.
    r = jnp.array([[1.0, 2.0, 4.0], [1.0, 2.0, 100.0]])
    valid = jnp.array([[True, True, True], [True, True, False]])
    np.testing.assert_allclose(mt.discounted_turn_returns(r, valid, gamma=0.5), [[3, 4, 4], [2, 2, 0]])
    np.testing.assert_array_equal(eager_multi_turn.last_turn(valid), [[0, 0, 1], [0, 1, 0]])


def test_layout_shape_errors_name_the_field():
    turn_id, mask, valid, _ = layout([["a2", "o1", "a1"]], 5)
    with pytest.raises(ValueError, match="turn_rewards"):
        eager_multi_turn.mt_grpo(jnp.ones(1), jnp.zeros(1, int), mask, jnp.zeros((1, 3)), turn_id, valid, num_groups=1)
    with pytest.raises(ValueError, match="gt_logprobs"):
        eager_multi_turn.igpo(jnp.ones(1), jnp.zeros(1, int), mask, jnp.zeros((1, 2)), turn_id, valid, num_groups=1)
    with pytest.raises(ValueError, match="mode='bad'"):
        eager_multi_turn.mt_grpo(jnp.ones(1), jnp.zeros(1, int), mask, jnp.zeros((1, 2)), turn_id, valid,
                                 num_groups=1, mode="bad")
    with pytest.raises(ValueError, match="turn_gamma=1.5"):
        eager_multi_turn.bilevel_gae(jnp.ones(1), mask, jnp.zeros((1, 5)), jnp.zeros((1, 2)), turn_id,
                                     jnp.zeros((1, 2), int), valid, turn_gamma=1.5)


# --------------------------------------------------------------------------------------------- MT-GRPO


def _two_turn_group():
    # 4 trajectories of one group, each: turn 0 (2 tokens), tool result (1 token), turn 1 (2 tokens)
    return layout([["a2", "o1", "a2"]] * 4, 6)


def test_mt_grpo_aae_turn_reward_only_on_pre_result_tokens():
    # digest §4.1 test: outcome constant -> z(R^O) = 0. R^T = [1, 0, 1, 1]: mean 0.75, unbiased std
    # sqrt((3·0.0625 + 0.5625)/3) = 0.5 -> z = [0.5, −1.5, 0.5, 0.5]; λ = 2 -> turn-0 tokens [1, −3, 1, 1]·(0.5/(0.5+eps)),
    # turn-1 tokens and the observation 0.
    turn_id, mask, valid, _ = _two_turn_group()
    r_turn = jnp.array([[1.0, 7.0], [0.0, 7.0], [1.0, 7.0], [1.0, 7.0]])  # the final turn's reward is unused
    a = mt.mt_grpo(jnp.ones(4), jnp.zeros(4, int), mask, r_turn, turn_id, valid, num_groups=1, turn_advantage_coef=2.0)
    z = np.array([0.25, -0.75, 0.25, 0.25]) / (0.5 + 1e-6)
    expected = np.zeros((4, 6))
    expected[:, :2] = 2 * z[:, None]
    np.testing.assert_allclose(a, expected, rtol=1e-5, atol=1e-7)


def test_mt_grpo_aae_and_cae_hand_case():
    # R^T = [1, 0, 1, 1], R^O = [1, 0, 0, 1].  z(R^O): mean 0.5, std sqrt(1/3) -> ±0.5/S3 = ±0.866
    # AAE: turn 0 = z(R^O) + z(R^T) = z(R^O) + [0.5, −1.5, 0.5, 0.5]; turn 1 = z(R^O)
    # CAE (γ = 1): R^T + R^O = [2, 0, 1, 2]: mean 1.25, dev [0.75, −1.25, −0.25, 0.75],
    #   var = (0.5625 + 1.5625 + 0.0625 + 0.5625)/3 = 0.91667 -> turn 0 = dev/sqrt(0.91667); turn 1 = z(R^O)
    turn_id, mask, valid, _ = _two_turn_group()
    r_turn = jnp.array([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    scores = jnp.array([1.0, 0.0, 0.0, 1.0])
    gids = jnp.zeros(4, int)
    z_o = np.array([0.5, -0.5, -0.5, 0.5]) / (S3 + 1e-6)
    aae = mt.mt_grpo(scores, gids, mask, r_turn, turn_id, valid, num_groups=1)
    np.testing.assert_allclose(aae[:, 0], z_o + np.array([0.25, -0.75, 0.25, 0.25]) / (0.5 + 1e-6), rtol=1e-5)
    np.testing.assert_allclose(aae[:, 3], z_o, rtol=1e-5)
    cae = mt.mt_grpo(scores, gids, mask, r_turn, turn_id, valid, num_groups=1, mode="cae")
    dev = np.array([0.75, -1.25, -0.25, 0.75])
    np.testing.assert_allclose(cae[:, 1], dev / (np.sqrt(2.75 / 3) + 1e-6), rtol=1e-5)
    np.testing.assert_allclose(cae[:, 4], z_o, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(aae)[:, 2], 0.0)  # the tool result
    np.testing.assert_array_equal(np.asarray(cae)[:, 2], 0.0)


def test_mt_grpo_without_tool_result_uses_the_combined_reward():
    # one group: A, B with a tool result, C answers in its only turn. R^T_0 = [1, 0, 1], R^O = [0, 1, 1];
    # z of {0,1,1} / {1,0,1} = dev/S3 with S3 = sqrt(1/3): dev 1/3 -> s, 2/3 -> 2s where s = (1/3)/S3 = S3.
    # z(R^O) = [−2s, s, s]; z(R^T_0) = [s, −2s, s]; C: z(R^T_0 + R^O) = z([1, 1, 2]) -> 2s.
    # A: turn 0 = −2s + s = −s, turn 1 = −2s;  B: turn 0 = s − 2s = −s, turn 1 = s;  C: 2s on all its tokens
    turn_id, mask, valid, _ = layout([["a1", "o1", "a1"], ["a1", "o1", "a1"], ["a2"]], 3)
    r_turn = jnp.array([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    a = mt.mt_grpo(jnp.array([0.0, 1.0, 1.0]), jnp.zeros(3, int), mask, r_turn, turn_id, valid, num_groups=1)
    s = (1 / 3) / (S3 + 1e-6)
    np.testing.assert_allclose(a, [[-s, 0, -2 * s], [-s, 0, s], [2 * s, 2 * s, 0]], rtol=1e-5, atol=1e-7)


def test_mt_grpo_three_turns_each_intermediate_turn_normalised_among_those_reaching_it():
    # one group, R^O = 0 (z = 0). A, B: 3 turns; C: 2 turns. R^T_1 = [1, 0, 3] (all reach turn 1): mean 4/3,
    # dev [−1/3, −4/3, 5/3], var = (1 + 16 + 25)/9/2 = 7/3. Turn 1 is intermediate for A and B only
    # (C's turn 1 is its last): A −(1/3)/sqrt(7/3), B −(4/3)/sqrt(7/3), C 0. Final turns get z(R^O) = 0.
    turn_id, mask, valid, _ = layout([["a1", "o1", "a1", "o1", "a1"]] * 2 + [["a1", "o1", "a1"]], 5)
    r_turn = jnp.array([[0.0, 1.0, 5.0], [0.0, 0.0, 5.0], [0.0, 3.0, 0.0]])
    a = mt.mt_grpo(jnp.zeros(3), jnp.zeros(3, int), mask, r_turn, turn_id, valid, num_groups=1)
    std = np.sqrt(7 / 3) + 1e-6
    np.testing.assert_allclose(a, [[0, 0, -1 / 3 / std, 0, 0], [0, 0, -4 / 3 / std, 0, 0], [0, 0, 0, 0, 0]],
                               rtol=1e-5, atol=1e-7)


@hypothesis.settings(**_SETTINGS)
@hypothesis.given(st.integers(0, 10_000))
def test_mt_grpo_with_zero_turn_rewards_is_trajectory_grpo(seed):
    turn_id, mask, valid, _ = random_layout(seed)
    scores = jnp.asarray(np.random.default_rng(seed).integers(0, 3, B), jnp.float32)
    zero = jnp.zeros((B, K))
    baseline = mt.trajectory_grpo(scores, group_ids(), mask, num_groups=G)
    np.testing.assert_array_equal(baseline, adv.grpo(scores, group_ids(), num_groups=G)[:, None] * mask)
    got = mt.mt_grpo(scores, group_ids(), mask, zero, turn_id, valid, num_groups=G)
    np.testing.assert_allclose(got, baseline, rtol=1e-6, atol=1e-7)


def test_mt_grpo_cae_with_zero_turn_rewards_is_trajectory_grpo_for_two_turns():
    # CAE's intermediate turn uses z_0(0 + γ·R^O) over everyone (all reach turn 0): = z(R^O) when γ = 1
    turn_id, mask, valid, _ = layout([["a2", "o1", "a1"], ["a1"], ["a1", "o2", "a2"], ["a3"]], 6)
    scores = jnp.array([1.0, 0.0, 0.0, 2.0])
    gids = jnp.array([0, 0, 1, 1])
    got = mt.mt_grpo(scores, gids, mask, jnp.zeros((4, 2)), turn_id, valid, num_groups=2, mode="cae")
    np.testing.assert_allclose(got, mt.trajectory_grpo(scores, gids, mask, num_groups=2), rtol=1e-6)


# ------------------------------------------------------------------------------------------------ IGPO


def _igpo_case():
    # group 0: A 3 turns, B 2 turns. Ground-truth probability after 0, 1, 2, 3 turns:
    #   A: [0.1, 0.3, 0.6, 0.9] -> gains turn 0: 0.2, turn 1: 0.3; turn 2 is final: α·F1 = 1
    #   B: [0.1, 0.05, 0.5, 0.7] -> gain turn 0: −0.05; turn 1 is final: F1 = 0   (the last entries are unused)
    turn_id, mask, valid, _ = layout([["a1", "o1", "a1", "o1", "a1"], ["a2", "o1", "a1"]], 5)
    gt = jnp.log(jnp.array([[0.1, 0.3, 0.6, 0.9], [0.1, 0.05, 0.5, 0.7]]))
    return turn_id, mask, valid, gt, jnp.array([1.0, 0.0])


def test_igpo_turn_rewards_hand_case():
    _, _, valid, gt, scores = _igpo_case()
    r, is_gain = mt.igpo_turn_rewards(scores, gt, valid)
    np.testing.assert_allclose(r, [[0.2, 0.3, 1.0], [-0.05, 0.0, 0.0]], atol=1e-6)
    np.testing.assert_array_equal(is_gain, [[1, 1, 0], [1, 0, 0]])
    r_log, _ = mt.igpo_turn_rewards(scores, gt, valid, gain_type="log_prob_diff", outcome_coef=2.0)
    np.testing.assert_allclose(r_log, [[np.log(3), np.log(2), 2.0], [np.log(0.5), 0.0, 0.0]], rtol=1e-5)


def test_igpo_joint_normalisation_and_turn_returns_hand_case():
    # the group's 5 turn rewards [0.2, 0.3, 1 | −0.05, 0]: mean 1.45/5 = 0.29, dev [−0.09, 0.01, 0.71 | −0.34, −0.29],
    # population var = (0.0081 + 0.0001 + 0.5041 + 0.1156 + 0.0841)/5 = 0.1424, σ = sqrt(0.1424 + 1e-8)
    # γ = 1: A turn 0 = (−0.09 + 0.01 + 0.71)/σ = 0.63/σ, turn 1 = 0.72/σ, turn 2 = 0.71/σ; B turn 0 = −0.63/σ, turn 1 = −0.29/σ
    turn_id, mask, valid, gt, scores = _igpo_case()
    sd = np.sqrt(0.1424 + 1e-8) + 1e-6
    a = mt.igpo(scores, jnp.zeros(2, int), mask, gt, turn_id, valid, num_groups=1)
    np.testing.assert_allclose(a, np.array([[0.63, 0, 0.72, 0, 0.71], [-0.63, -0.63, 0, -0.29, 0]]) / sd,
                               rtol=1e-4, atol=1e-6)
    # γ = 0.5: A turn 0 = (−0.09 + 0.5·0.01 + 0.25·0.71)/σ = 0.0925/σ
    a_half = mt.igpo(scores, jnp.zeros(2, int), mask, gt, turn_id, valid, num_groups=1, gamma=0.5)
    np.testing.assert_allclose(a_half[0, 0], 0.0925 / sd, rtol=1e-4)


def test_igpo_separate_normalisation_hand_case():
    # gains [0.2, 0.3 | −0.05]: mean 0.15, dev [0.05, 0.15 | −0.2], var = 0.065/3, σ_g = sqrt(0.065/3 + 1e-8)
    # finals [1 | 0]: mean 0.5, dev ±0.5, σ_f = sqrt(0.25 + 1e-8)
    # A turn 1 = 0.15/σ_g + 0.5/σ_f; B turn 0 = −0.2/σ_g − 0.5/σ_f
    turn_id, mask, valid, gt, scores = _igpo_case()
    a = mt.igpo(scores, jnp.zeros(2, int), mask, gt, turn_id, valid, num_groups=1, norm_mode="separate")
    sg, sf = np.sqrt(0.065 / 3 + 1e-8) + 1e-6, np.sqrt(0.25 + 1e-8) + 1e-6
    np.testing.assert_allclose(a[0, 2], 0.15 / sg + 0.5 / sf, rtol=1e-4)
    np.testing.assert_allclose(a[1, 0], -0.2 / sg - 0.5 / sf, rtol=1e-4)


@hypothesis.settings(**_SETTINGS)
@hypothesis.given(st.integers(0, 10_000))
def test_igpo_gains_telescope_to_the_final_change(seed):
    _, _, valid, _ = random_layout(seed)
    gt = -jnp.asarray(np.random.default_rng(seed).uniform(0.01, 4.0, (B, K + 1)), jnp.float32)
    last = np.asarray(valid).sum(1) - 1  # K_i − 1: the context after the last non-final turn
    start, end = np.asarray(gt)[:, 0], np.asarray(gt)[np.arange(B), last]
    for gain_type, f in (("prob_diff", np.exp), ("log_prob_diff", lambda x: x)):
        r, is_gain = mt.igpo_turn_rewards(jnp.zeros(B), gt, valid, gain_type=gain_type)
        total = np.sum(np.where(is_gain, r, 0.0), axis=1)
        np.testing.assert_allclose(total, f(end) - f(start), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------------ GTPO


def test_gtpo_hand_case():
    # γ = 0.5, one group. A: 2 turns, R^T = [1, 0], R^O = 1 -> r = [1, 1], G = [1.5, 1];
    # B: 2 turns, all 0 -> G = [0, 0];  C: 1 turn, R^T = [2], R^O = 1 -> r = [3], G = [3].
    # turn 0 among A, B, C: [1.5, 0, 3]: mean 1.5, dev [0, −1.5, 1.5], std 1.5 -> [0, −1, 1]
    # turn 1 among A, B: [1, 0]: std sqrt(0.5) -> ±0.5/sqrt(0.5)
    turn_id, mask, valid, _ = layout([["a1", "o1", "a1"], ["a1", "o1", "a1"], ["a1"]], 3)
    a = mt.gtpo(jnp.array([1.0, 0.0, 1.0]), jnp.zeros(3, int), mask, jnp.array([[1.0, 0.0], [0.0, 0.0], [2.0, 0.0]]),
                turn_id, valid, num_groups=1, gamma=0.5)
    h = 0.5 / (np.sqrt(0.5) + 1e-6)
    np.testing.assert_allclose(a, [[0, 0, h], [-1.5 / 1.500001, 0, -h], [1.5 / 1.500001, 0, 0]], rtol=1e-5, atol=1e-7)


@hypothesis.settings(**_SETTINGS)
@hypothesis.given(st.integers(0, 10_000))
def test_gtpo_outcome_only_equals_grpo_on_turns_the_whole_group_reaches(seed):
    turn_id, mask, valid, _ = random_layout(seed)
    scores = jnp.asarray(np.random.default_rng(seed).integers(0, 2, B), jnp.float32)
    a = np.asarray(mt.gtpo(scores, group_ids(), mask, jnp.zeros((B, K)), turn_id, valid, num_groups=G))
    g = np.asarray(adv.grpo(scores, group_ids(), num_groups=G))
    reached_by_all = np.all(np.asarray(valid)[:, None, :] | (np.asarray(group_ids())[:, None, None]  # [B, B, K]
                                                             != np.asarray(group_ids())[None, :, None]), axis=0)
    tid = np.asarray(turn_id)
    sel = (tid >= 0) & np.take_along_axis(reached_by_all, np.clip(tid, 0, K - 1), axis=1)
    assert sel.any()
    np.testing.assert_allclose(a[sel], np.broadcast_to(g[:, None], a.shape)[sel], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------ bi-level GAE


def test_bilevel_gae_hand_case():
    # tokens [a0, a0, obs, a1, a1], V = [0.1, 0.2, 0.3, 0.4, 0.5], turn rewards 0, outcome 1; γ = λ = 1, γ_hi = 0.5
    # turn level: V_0 = V(1) = 0.2, V_1 = V(4) = 0.5. Â_1 = 1 − 0.5 = 0.5; Â_0 = (0 + 0.5·0.5 − 0.2) + 0.5·1·0.5 = 0.3
    #   R_0 = 0.3 + 0.2 = 0.5, R_1 = 0.5 + 0.5 = 1
    # token level: turn 1: A(4) = 1 − 0.5 = 0.5, A(3) = (0 + 0.5 − 0.4) + 0.5 = 0.6
    #              turn 0: A(1) = 0.5 − 0.2 = 0.3 (bootstrap 0 after the turn), A(0) = (0 + 0.2 − 0.1) + 0.3 = 0.4
    # returns = A + V: [0.5, 0.5, ·, 1, 1] (γ = λ = 1: every token's return is its turn's R_k)
    turn_id, mask, valid, end = layout([["a2", "o1", "a2"]], 5)
    values = jnp.array([[0.1, 0.2, 0.3, 0.4, 0.5]])
    a, ret = mt.bilevel_gae(jnp.ones(1), mask, values, jnp.zeros((1, 2)), turn_id, end, valid, turn_gamma=0.5)
    raw = jnp.array([[0.4, 0.3, 0.0, 0.6, 0.5]])
    np.testing.assert_allclose(ret[0, [0, 1, 3, 4]], [0.5, 0.5, 1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(a, masked_whiten(raw, mask) * mask, rtol=1e-5, atol=1e-6)
    assert a[0, 2] == 0.0


def _ragen_reference(rewards_at_end, values, mask, ends, gamma, lam, turn_gamma):
    """RAGEN `compute_bi_level_gae_advantage_return` loops (eos positions given explicitly), unwhitened."""
    b, t = mask.shape
    adv, ret = np.zeros((b, t)), np.zeros((b, t))
    for i in range(b):
        eos, r = list(ends[i]), dict(zip(ends[i], rewards_at_end[i]))
        last, updated = 0.0, {}
        for j in range(len(eos) - 1, -1, -1):
            nv = values[i, eos[j + 1]] if j < len(eos) - 1 else 0.0
            last = r[eos[j]] + turn_gamma * nv - values[i, eos[j]] + turn_gamma * lam * last
            updated[eos[j]] = last + values[i, eos[j]]
        last, pos = 0.0, list(np.nonzero(mask[i])[0])
        for j in range(len(pos) - 1, -1, -1):
            p = pos[j]
            if p in updated:
                nv, last = 0.0, 0.0
            else:
                nv = values[i, pos[j + 1]]
            last = updated.get(p, 0.0) + gamma * nv - values[i, p] + gamma * lam * last
            adv[i, p], ret[i, p] = last, last + values[i, p]
    return adv, ret


@hypothesis.settings(**_SETTINGS)
@hypothesis.given(st.integers(0, 10_000))
def test_bilevel_gae_matches_ragen_loops_on_ragged_turns(seed):
    turn_id, mask, valid, end = random_layout(seed)
    rng = np.random.default_rng(seed)
    values = jnp.asarray(rng.normal(size=(B, T)), jnp.float32)
    r_turn = jnp.asarray(rng.normal(size=(B, K)), jnp.float32) * valid
    scores = jnp.asarray(rng.integers(0, 2, B), jnp.float32)
    a, ret = mt.bilevel_gae(scores, mask, values, r_turn, turn_id, end, valid, gamma=0.9, lam=0.8, turn_gamma=0.7)
    v, e = np.asarray(valid), np.asarray(end)
    ends = [list(e[i][v[i]]) for i in range(B)]
    r_end = [list(np.asarray(r_turn)[i][v[i]] + np.eye(v[i].sum())[-1] * float(scores[i])) for i in range(B)]
    ref_adv, ref_ret = _ragen_reference(r_end, np.asarray(values), np.asarray(mask), ends, 0.9, 0.8, 0.7)
    m = np.asarray(mask) > 0
    np.testing.assert_allclose(np.asarray(ret)[m], ref_ret[m], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a, masked_whiten(jnp.asarray(ref_adv, jnp.float32), mask) * mask, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(a)[~m], 0.0)


@hypothesis.settings(**_SETTINGS)
@hypothesis.given(st.integers(0, 10_000))
def test_bilevel_gae_with_one_turn_is_token_gae(seed):
    rng = np.random.default_rng(seed)
    rows = [[f"p{rng.integers(0, 3)}", f"a{rng.integers(1, 10)}"] for _ in range(B)]
    turn_id, mask, valid, end = layout(rows, 12)
    values = jnp.asarray(rng.normal(size=(B, 12)), jnp.float32)
    scores = jnp.asarray(rng.normal(size=B), jnp.float32)
    a, ret = mt.bilevel_gae(scores, mask, values, jnp.zeros((B, 1)), turn_id, end, valid, gamma=0.9, lam=0.7,
                            turn_gamma=0.3)
    want_a, want_ret = adv.gae(registry.last_token_rewards(scores, mask), values, mask, gamma=0.9, lam=0.7)
    np.testing.assert_allclose(a, want_a * mask, rtol=1e-5, atol=1e-5)
    m = np.asarray(mask) > 0
    np.testing.assert_allclose(np.asarray(ret)[m], np.asarray(want_ret)[m], rtol=1e-5, atol=1e-5)


def test_bilevel_gae_with_unit_discounts_and_zero_values_is_turn_reward_to_go():
    # digest §4.5: γ_hi = λ = 1, V ≡ 0 -> returns of turn k's tokens = Σ_{k' ≥ k} r_k' (+ outcome):
    # r = [1, 2, 3] + outcome 4 on the last turn -> [10, 9, 7]
    turn_id, mask, valid, end = layout([["a1", "o2", "a2", "a1"]], 6)
    _, ret = mt.bilevel_gae(jnp.array([4.0]), mask, jnp.zeros((1, 6)), jnp.array([[1.0, 2.0, 3.0]]), turn_id, end,
                            valid, turn_gamma=1.0)
    np.testing.assert_allclose(ret[0, [0, 3, 4, 5]], [10, 9, 9, 7])


# ------------------------------------------------------------------------------------ rewards, masking


def test_gated_reward_accumulation():
    # δ = 0.5: row 0 (r^high = 1 ≥ δ) keeps its step rewards: R = 1 + 0.1 + 0.2 = 1.3 (turn 2 does not exist);
    # row 1 (r^high = 0.4 < δ) gets none: R = 0.4
    gated, total = mt.gated_reward_accumulation(jnp.array([1.0, 0.4]), jnp.array([[0.1, 0.2, 0.3], [0.5, 0.5, 0.0]]),
                                                jnp.array([[1, 1, 0], [1, 1, 1]], bool), threshold=0.5)
    np.testing.assert_allclose(gated, [[0.1, 0.2, 0.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(total, [1.3, 0.4], rtol=1e-6)


@hypothesis.settings(**_SETTINGS)
@hypothesis.given(st.lists(st.floats(-2, 2, width=32, allow_subnormal=False), min_size=6, max_size=6),
                  st.integers(0, 10_000))
def test_gated_return_is_the_outcome_below_the_gate_and_monotone(high, seed):
    high = jnp.sort(jnp.asarray(high, jnp.float32))
    low = jnp.asarray(np.random.default_rng(seed).uniform(0, 1, (1, 3)), jnp.float32).repeat(6, 0)  # r^low ≥ 0
    _, total = mt.gated_reward_accumulation(high, low, jnp.ones((6, 3), bool), threshold=0.3)
    below = np.asarray(high) < 0.3
    np.testing.assert_array_equal(np.asarray(total)[below], np.asarray(high)[below])
    assert np.all(np.diff(np.asarray(total)) >= -1e-6)


def test_over_turn_masking_zeroes_truncated_trajectories_gradient_only():
    # Mini-o3: advantages computed as usual (the truncated row stays in its group); the loss mask drops it
    turn_id, mask, valid, _ = layout([["a2", "o1", "a2"], ["a1", "o1", "a1"], ["a3"], ["a2", "o2", "a1"]], 5)
    scores = jnp.array([1.0, 0.0, 1.0, 0.0])
    truncated = jnp.array([False, True, False, False])
    a = mt.trajectory_grpo(scores, jnp.zeros(4, int), mask, num_groups=1)
    loss_mask = mt.over_turn_mask(mask, truncated)
    keep, m = np.array([0, 2, 3]), np.asarray(mask)
    np.testing.assert_array_equal(np.asarray(loss_mask)[1], 0.0)
    np.testing.assert_array_equal(np.asarray(loss_mask)[keep], m[keep])
    old = -jnp.ones((4, 5))
    grad = np.asarray(jax.jit(jax.grad(lambda lp: losses.ppo_clip(lp, old, a, loss_mask)[0]))(old))
    np.testing.assert_array_equal(grad[1], 0.0)
    assert np.all(np.abs(grad[keep][m[keep] > 0]) > 0)


# ------------------------------------------------------------------------------------------------- EPO


def _epo_case():
    # one row, turn 0 = tokens 0-1, turn 1 = tokens 2-3; history H̄ = [2/2, 4/2] = [1, 2]
    # κ_l = 0.5, κ_r = 2 -> corridors: turn 0 (0.5, 2), turn 1 (1, 4)
    # H = [0.6 (in), 3.0 (above by 1), 1.5 (in), 0.1 (below by 0.9)]
    turn_id, mask, _, _ = layout([["a2", "a2"]], 4)
    return turn_id, mask, jnp.array([[0.6, 3.0, 1.5, 0.1]]), jnp.array([2.0, 4.0]), jnp.array([2.0, 2.0])


def test_epo_hinge_loss_hand_case():
    # α = 0.1: P = 0.1·[0, 1.0, 0, 0.9] -> token-mean 0.19/4 = 0.0475; mean H = 5.2/4 = 1.3
    # L = −λ·(1.3 − c·w·0.0475) = −0.01·(1.3 − 0.8·0.0475) = −0.01262; indicator penalty = 0.1·2/4 = 0.05
    turn_id, mask, h, sums, counts = _epo_case()
    kw = dict(coef=0.01, phase_weight=0.8, kappa_low=0.5, kappa_high=2.0, alpha=0.1)
    loss, metrics = mt.epo_entropy_loss(h, turn_id, mask, sums, counts, **kw)
    np.testing.assert_allclose(loss, -0.01262, rtol=1e-5)
    np.testing.assert_allclose(metrics["epo/hinge_penalty"], 0.0475, rtol=1e-5)
    np.testing.assert_allclose(metrics["epo/indicator_penalty"], 0.05, rtol=1e-6)
    # dL/dH = −λ/4·(1 − c·w·α·s), s = +1 above, −1 below, 0 inside: [−0.0025, −0.0023, −0.0025, −0.0027]
    grad = jax.grad(lambda x: eager_multi_turn.epo_entropy_loss(x, turn_id, mask, sums, counts, **kw)[0])(h)
    np.testing.assert_allclose(grad, [[-0.0025, -0.0023, -0.0025, -0.0027]], rtol=1e-5)
    # a turn index without history gets no penalty
    _, m2 = mt.epo_entropy_loss(h, turn_id, mask, sums, jnp.array([2.0, 0.0]), **kw)
    np.testing.assert_allclose(m2["epo/hinge_penalty"], 0.1 * 1.0 / 4, rtol=1e-5)


def test_epo_hinge_gradient_is_zero_inside_and_pushes_entropy_back_outside():
    # per-token logits -> H: [0,.1,.2] 1.092 | [0,1,2] 0.832 | [0,0,5] 0.080 | [0,1,2] 0.832 (not a uniform
    # distribution: its entropy is stationary in the logits)
    # history H̄ = [1, 1], κ_l = 0.5, κ_r = 1.05: corridor (0.5, 1.05) for both turns
    # -> token 0 above, token 1 inside (turn 0); token 2 below, token 3 inside (turn 1)
    turn_id, mask, _, _ = layout([["a2", "a2"]], 4)
    logits0 = jnp.array([[[0.0, 0.1, 0.2], [0.0, 1.0, 2.0], [0.0, 0.0, 5.0], [0.0, 1.0, 2.0]]])  # [1, 4, 3]
    e = np.asarray(entropy_lib.from_logits(logits0))[0]
    above, below = e >= 1.05, e <= 0.5
    np.testing.assert_array_equal(above, [1, 0, 0, 0])
    np.testing.assert_array_equal(below, [0, 0, 1, 0])
    kw = dict(kappa_low=0.5, kappa_high=1.05, alpha=1.0, coef=1.0)
    history = (jnp.array([2.0, 2.0]), jnp.array([2.0, 2.0]))

    def penalty(logits):  # the corridor term alone: loss(c_s = 1) − loss(c_s = 0)
        h = entropy_lib.from_logits(logits)
        return (eager_multi_turn.epo_entropy_loss(h, turn_id, mask, *history, **kw)[0]
                - eager_multi_turn.epo_entropy_loss(h, turn_id, mask, *history, smooth_coef=0.0, **kw)[0])

    g = np.asarray(jax.grad(penalty)(logits0))[0]  # [4, 3]
    np.testing.assert_array_equal(g[[1, 3]], 0.0)  # inside the corridor: no gradient
    assert np.all(np.abs(g[[0, 2]]).sum(-1) > 1e-4)  # outside: a gradient (the official indicator has none)
    # one descent step moves each outside token's entropy back toward its corridor
    e_after = np.asarray(entropy_lib.from_logits(logits0 - 0.1 * jax.grad(penalty)(logits0)))[0]
    assert e_after[0] < e[0] and e_after[2] > e[2]


def test_epo_phase_weight():
    # w(0) = 1; w(E/2) = 1 − 0.2(1 − e^−2) ≈ 0.827; just after E/2 ≈ 0.8; w(E) = 0.8·e^−3; non-increasing
    w = np.asarray(eager_multi_turn.epo_phase_weight(jnp.arange(151.0)))
    np.testing.assert_allclose(w[[0, 75, 150]], [1.0, 1 - 0.2 * (1 - np.exp(-2)), 0.8 * np.exp(-3)], rtol=1e-6)
    np.testing.assert_allclose(eager_multi_turn.epo_phase_weight(75.0001), 0.8, rtol=1e-4)
    assert np.all(np.diff(w) <= 1e-7)


def test_turn_entropy_stats():
    # turn 0 tokens H = 0.6, 3.0 -> (3.6, 2); turn 1 tokens 1.5, 0.1 -> (1.6, 2); turn 2: (0, 0)
    turn_id, mask, h, _, _ = _epo_case()
    sums, counts = mt.turn_entropy_stats(h, turn_id, mask, num_turns=3)
    np.testing.assert_allclose(sums, [3.6, 1.6, 0.0], rtol=1e-6)
    np.testing.assert_array_equal(counts, [2, 2, 0])


# ------------------------------------------------------------------------------------------------ ARPO


def test_arpo_step_entropy_and_probability():
    # token 0 top-k p = [0.5, 0.25, 0.25]: H = 0.5·ln2 + 2·0.25·ln4 = 1.5·ln2; token 1 p = [1]: H = 0; token 2 invalid
    # summed over valid tokens (the official code pools them): 1.5·ln2 + 0, ÷ ln|V| = ln 4 = 2·ln2 -> 0.75
    top = jnp.log(jnp.array([[[0.5, 0.25, 0.25], [1.0, 1e-30, 1e-30], [0.3, 0.3, 0.3]]]))
    got = mt.arpo_step_entropy(top, jnp.array([[1, 1, 0]]), vocab_size=4)
    np.testing.assert_allclose(got, [0.75], rtol=1e-5)
    # P = clip(0.5 + 0.2·ΔH, 0, 1): ΔH = 1 -> 0.7, 5 -> 1, −5 -> 0
    p = mt.arpo_branch_probability(jnp.array([1.0, 5.0, -5.0]), jnp.zeros(3))
    np.testing.assert_allclose(p, [0.7, 1.0, 0.0], rtol=1e-6)


def test_arpo_branch_rates():
    n = 4000
    ids, budget = jnp.arange(n) % 40, jnp.full((40,), n)
    key = jax.random.PRNGKey(0)
    # α = 0: each active rollout branches with probability β (expected β·#active)
    c = mt.arpo_branch_counts(key, jnp.zeros(n), jnp.zeros(n), jnp.ones(n, bool), ids, budget, entropy_weight=0.0)
    assert abs(float(jnp.mean(c)) - 0.5) < 0.03  # 4σ = 4·sqrt(0.25/4000) = 0.032
    # ΔH ≥ (1 − β)/α = 2.5: always; ΔH = −5 (P = 0): never; inactive rollouts: never
    hi = jnp.full(n, 2.5)
    np.testing.assert_array_equal(mt.arpo_branch_counts(key, hi, jnp.zeros(n), jnp.ones(n, bool), ids, budget), 1)
    np.testing.assert_array_equal(mt.arpo_branch_counts(key, -5 * jnp.ones(n), jnp.zeros(n), jnp.ones(n, bool), ids,
                                                        budget), 0)
    np.testing.assert_array_equal(mt.arpo_branch_counts(key, hi, jnp.zeros(n), jnp.zeros(n, bool), ids, budget), 0)


@hypothesis.settings(**_SETTINGS)
@hypothesis.given(st.integers(0, 10_000))
def test_arpo_budget_is_filled_in_rollout_order_and_never_exceeded(seed):
    rng = np.random.default_rng(seed)
    n, groups, beam = 12, 3, 3
    ids = jnp.asarray(rng.integers(0, groups, n))
    remaining = jnp.asarray(rng.integers(-1, 5, groups))
    active = jnp.asarray(rng.uniform(size=n) < 0.8)
    dh = jnp.asarray(rng.normal(size=n), jnp.float32)
    key = jax.random.PRNGKey(seed)
    counts = np.asarray(mt.arpo_branch_counts(key, dh, jnp.zeros(n), active, ids, remaining, beam_size=beam))
    # reference: the same draws, granted one by one in rollout order while the prompt has slots
    u = np.asarray(jax.random.uniform(key, (n, beam - 1)))
    left = np.asarray(remaining).copy()
    want = np.zeros(n, int)
    for i in range(n):
        for j in range(beam - 1):
            if active[i] and np.clip(u[i, j] - 0.2 * float(dh[i]), 0, 1) <= 0.5 and left[ids[i]] > 0:
                want[i] += 1
                left[ids[i]] -= 1
    np.testing.assert_array_equal(counts, want)
    for g in range(groups):
        assert counts[np.asarray(ids) == g].sum() <= max(int(remaining[g]), 0)


# ------------------------------------------------------------------------------------- registry, masks


def _turn_inputs(seed):
    turn_id, mask, valid, end = random_layout(seed)
    rng = np.random.default_rng(seed)
    return dict(mask=mask, turn_id=turn_id, turn_valid=valid, turn_end=end,
                turn_rewards=jnp.asarray(rng.normal(size=(B, K)), jnp.float32) * valid,
                gt_logprobs=-jnp.asarray(rng.uniform(0.01, 3, (B, K + 1)), jnp.float32),
                values=jnp.asarray(rng.normal(size=(B, T)), jnp.float32),
                scores=jnp.asarray(rng.integers(0, 2, B), jnp.float32))


MULTI_TURN_ESTIMATORS = ("mt_grpo", "igpo", "gtpo", "bilevel_gae")


@pytest.mark.parametrize("name", MULTI_TURN_ESTIMATORS)
def test_registered_multi_turn_estimators_run_under_jit_and_zero_observation_tokens(name):
    inputs = _turn_inputs(3)
    assert {"turn_id", "turn_valid"} <= registry.advantage_inputs(name)
    call = jax.jit(lambda kw: registry.get_advantage(name)(kw.pop("scores"), group_ids(), kw.pop("mask"),
                                                           num_groups=G, **kw))
    out = call(dict(inputs))
    a = out[0] if name in registry.RETURNS_VALUE_TARGETS else out
    assert a.shape == (B, T) and np.all(np.isfinite(a))
    off = np.asarray(inputs["mask"]) == 0
    np.testing.assert_array_equal(np.asarray(a)[off], 0.0)  # prompt, observation and padding tokens
    assert np.any(np.asarray(a)[~off] != 0)
