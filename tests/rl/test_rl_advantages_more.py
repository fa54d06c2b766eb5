"""Phase-2 advantage estimators: plain-Python references, hand cases, defining properties."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm.rl import advantages as eager_advantages
from rl4llm.rl import registry

from rl_testing import compiled, distinct_names

adv = compiled(eager_advantages)


def _mask_with_holes(seed, n=6, t=9):
    """Random masks: a random valid length, plus random interior holes (observation tokens)."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((n, t), np.float32)
    for i in range(n):
        length = rng.integers(2, t + 1)
        mask[i, :length] = 1.0
        holes = rng.random(length) < 0.3
        holes[0] = holes[length - 1] = False
        mask[i, :length][holes] = 0.0
    return mask


def _whiten_ref(x, m):
    sel = x[m > 0]
    return (x - sel.mean()) / np.sqrt(sel.var(ddof=1) + 1e-8)


def _gae_ref(r, v, m, gamma, lam):
    n, t = r.shape
    adv_ = np.zeros_like(r)
    next_v = np.zeros(n)
    last = np.zeros(n)
    for k in reversed(range(t)):
        delta = r[:, k] + gamma * next_v - v[:, k]
        cand = delta + gamma * lam * last
        next_v = v[:, k] * m[:, k] + (1 - m[:, k]) * next_v
        last = cand * m[:, k] + (1 - m[:, k]) * last
        adv_[:, k] = last
    return _whiten_ref(adv_, m), adv_ + v


@pytest.mark.parametrize("gamma,lam,seed", [(1.0, 1.0, 0), (0.9, 0.95, 1), (0.99, 0.5, 2), (0.5, 0.0, 3)])
def test_gae_matches_reference_loop_with_holes(gamma, lam, seed):
    rng = np.random.default_rng(seed)
    m = _mask_with_holes(seed)
    r = rng.normal(size=m.shape).astype(np.float32)
    v = rng.normal(size=m.shape).astype(np.float32)
    a, ret = adv.gae(jnp.asarray(r), jnp.asarray(v), jnp.asarray(m), gamma=gamma, lam=lam)
    a_ref, ret_ref = _gae_ref(r.astype(np.float64), v.astype(np.float64), m, gamma, lam)
    np.testing.assert_allclose(ret, ret_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a, a_ref, rtol=1e-4, atol=1e-5)


def test_gae_zero_values_gives_final_reward_everywhere():
    m = _mask_with_holes(1)
    scores = jnp.arange(1.0, m.shape[0] + 1)
    r = registry.last_token_rewards(scores, jnp.asarray(m))
    _, returns = adv.gae(r, jnp.zeros_like(r), jnp.asarray(m), gamma=1.0, lam=1.0)
    # With V = 0, returns = raw (unwhitened) advantages: every valid token's advantage is the final reward.
    expected = np.broadcast_to(np.asarray(scores)[:, None], m.shape)
    np.testing.assert_allclose(np.asarray(returns)[m > 0], expected[m > 0], rtol=1e-6)


def test_gae_hand_case_and_default_lambda():
    # One row, r = [0, 0, 1], V = [0.5, 0.5, 0.5], γ = 1, λ = 0.95 (the defaults):
    # δ_2 = 1 − 0.5 = 0.5;  δ_1 = 0 + 0.5 − 0.5 = 0;  δ_0 = 0
    # A_2 = 0.5;  A_1 = 0 + 0.95·0.5 = 0.475;  A_0 = 0.95·0.475 = 0.45125;  returns = A + V
    r = jnp.array([[0.0, 0.0, 1.0]])
    v = jnp.full((1, 3), 0.5)
    _, returns = eager_advantages.gae(r, v, jnp.ones((1, 3)))
    np.testing.assert_allclose(returns, [[0.95125, 0.975, 1.0]], rtol=1e-6)


def test_gae_observation_tokens_are_transparent():
    # Inserting masked (observation) tokens must not change the advantages at valid positions.
    rng = np.random.default_rng(2)
    r = rng.normal(size=(3, 5)).astype(np.float32)
    v = rng.normal(size=(3, 5)).astype(np.float32)
    m = np.ones((3, 5), np.float32)
    _, base = adv.gae(jnp.asarray(r), jnp.asarray(v), jnp.asarray(m), gamma=0.9, lam=0.8)
    ins = lambda x, fill: np.insert(x, [2, 2, 4], fill, axis=1)  # noqa: E731
    _, holed = adv.gae(jnp.asarray(ins(r, 0.0)), jnp.asarray(ins(v, 7.0)), jnp.asarray(ins(m, 0.0)), gamma=0.9, lam=0.8)
    keep = ins(m, 0.0) > 0
    np.testing.assert_allclose(np.asarray(holed - ins(v, 7.0))[keep].reshape(3, 5), base - v, rtol=1e-5, atol=1e-6)


def test_reinforce_plus_plus_matches_loop():
    rng = np.random.default_rng(3)
    m = _mask_with_holes(3)
    r = (rng.normal(size=m.shape) * (rng.random(m.shape) < 0.3)).astype(np.float32)
    gamma = 0.9
    ret = np.zeros_like(r, dtype=np.float64)
    running = np.zeros(r.shape[0])
    for k in reversed(range(r.shape[1])):
        running = r[:, k] + gamma * running
        ret[:, k] = running
        running = running * m[:, k]
    expected = _whiten_ref(ret, m) * m
    got = adv.reinforce_plus_plus(jnp.asarray(r), jnp.asarray(m), gamma=gamma)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_reinforce_plus_plus_baseline_matches_loop():
    m = _mask_with_holes(4)
    scores = np.array([1.0, 0.0, 1.0, 3.0, 2.0, 5.0], np.float32)
    gids = np.array([0, 0, 0, 1, 1, 2])  # group 2 is a singleton: mean 0
    centred = scores - np.array([2 / 3, 2 / 3, 2 / 3, 2.5, 2.5, 0.0])
    expected = _whiten_ref(centred[:, None] * m, m) * m
    got = adv.reinforce_plus_plus_baseline(jnp.asarray(scores), jnp.asarray(gids), jnp.asarray(m), num_groups=3)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_remax_hand_case():
    # rewards [0, 1, 2, 0(pad)], mask [1, 1, 1, 0], greedy baseline 1.5:
    # returns = reverse cumsum = [3, 3, 2, 0]; A = returns − 1.5·m = [1.5, 1.5, 0.5, 0]
    r = jnp.array([[0.0, 1.0, 2.0, 9.0]])
    m = jnp.array([[1.0, 1.0, 1.0, 0.0]])
    np.testing.assert_allclose(adv.remax(r, jnp.array([1.5]), m), [[1.5, 1.5, 0.5, 0.0]])


def test_opo_hand_case():
    # group 0: s = [1, 0] with lengths [2, 6] -> b = (2·1 + 6·0)/8 = 0.25 -> A = [0.75, −0.25]
    # group 1: singleton s = 3 -> b = 0 -> A = 3
    a = adv.opo(jnp.array([1.0, 0.0, 3.0]), jnp.array([0, 0, 1]), jnp.array([2, 6, 4]), num_groups=2)
    np.testing.assert_allclose(a, [0.75, -0.25, 3.0], rtol=1e-6)


def test_gpg_hand_case():
    # N = 4, nonzero scores = 2 -> α = 2; group means 0.5 and 1.0 -> A = 2·(s − μ)
    a = adv.gpg(jnp.array([1.0, 0.0, 0.0, 2.0]), jnp.array([0, 0, 1, 1]), num_groups=2)
    np.testing.assert_allclose(a, [1.0, -1.0, -2.0, 2.0])
    np.testing.assert_allclose(
        adv.gpg(jnp.array([1.0, 0.0]), jnp.array([0, 0]), num_groups=1, f_norm=2.0), [0.5, -0.5])


def test_lite_ppo_one_group_equals_grpo_and_uses_batch_std():
    s = jnp.array([1.0, 0.0, 0.0, 1.0, 1.0])
    g = jnp.zeros(5, jnp.int32)
    np.testing.assert_allclose(adv.lite_ppo(s, g, num_groups=1), adv.grpo(s, g, num_groups=1), rtol=1e-6)
    # two groups: [1, 1] (zero std) and [0, 2]; batch std of [1, 1, 0, 2] = sqrt(2/3)
    a = adv.lite_ppo(jnp.array([1.0, 1.0, 0.0, 2.0]), jnp.array([0, 0, 1, 1]), num_groups=2)
    np.testing.assert_allclose(a, np.array([0, 0, -1, 1]) / (np.sqrt(2 / 3) + 1e-6), rtol=1e-6)


def test_dler_batch_normalisation_hand_case():
    # groups [1, 1] -> centred [0, 0]; [0, 2] -> [-1, 1]; a third group's rows are masked out (not trained on)
    s = jnp.array([1.0, 1.0, 0.0, 2.0, 5.0, 9.0])
    g = jnp.array([0, 0, 1, 1, 2, 2])
    mask = jnp.ones((6, 3)).at[4:].set(0.0)
    # trained rows' centred values [0, 0, -1, 1]: mean 0, unbiased std sqrt(2/3)
    a = adv.dler(s, g, mask, num_groups=3)
    np.testing.assert_allclose(a, np.array([0, 0, -1, 1, 0, 0]) / (np.sqrt(2 / 3) + 1e-6), rtol=1e-6)
    # every trained sequence counts once, whatever its length (reinforce_plus_plus_baseline weighs tokens)
    ragged = mask.at[0, 1:].set(0.0)
    np.testing.assert_allclose(adv.dler(s, g, ragged, num_groups=3), a, rtol=1e-6)


def test_bnpo_special_cases():
    s = jnp.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    g = jnp.repeat(jnp.arange(3), 4)  # p = 0.5, 0.75, 0.25
    p = np.repeat([0.5, 0.75, 0.25], 4)
    np.testing.assert_allclose(adv.bnpo(s, g, num_groups=3, alpha=1.0, beta=1.0), np.asarray(s) - p, rtol=1e-6)
    # α = β = 3/2: BetaPDF(p) = (8/π)·sqrt(p(1−p)) -> A = (π/8)·(s − p)/sqrt(p(1−p)) = (π/8)·GRPO(ddof=0)
    got = adv.bnpo(s, g, num_groups=3, alpha=1.5, beta=1.5)
    np.testing.assert_allclose(got, np.pi / 8 * (np.asarray(s) - p) / np.sqrt(p * (1 - p)), rtol=1e-5)


def test_bnpo_fitted_parameters_hand_case():
    # p = [0.5, 0.75, 0.25]: m = 0.5, v = (0 + 1/16 + 1/16)/2 = 1/16
    # m(1−m)/v − 1 = 0.25·16 − 1 = 3 -> a = b = 1.5 -> α = β = 1 + 1.5/3 = 1.5
    s = jnp.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    g = jnp.repeat(jnp.arange(3), 4)
    np.testing.assert_allclose(adv.bnpo(s, g, num_groups=3), adv.bnpo(s, g, num_groups=3, alpha=1.5, beta=1.5),
                               rtol=1e-5)


def test_gdpo_keeps_reward_combinations_apart():
    # Groups of 2, components (correct, format). Group 0: (1,1) vs (0,0); group 1: (1,0) vs (0,0).
    # Per-component GRPO: ±1/(√2·0.5·... ) -> each non-constant component gives ±0.7071 (std √0.5)
    # Sums before whitening: group 0 ±1.4142, group 1 ±0.7071 (GRPO on the summed reward: ±0.7071 for both).
    comps = jnp.array([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    g = jnp.array([0, 0, 1, 1])
    m = jnp.ones((4, 3))
    a = np.asarray(adv.gdpo(comps, g, m, num_groups=2))[:, 0]
    c = 1 / (np.sqrt(0.5) + 1e-6)
    pre = np.array([2 * c, -2 * c, c, -c])
    np.testing.assert_allclose(a, _whiten_ref(pre[:, None] * np.ones((4, 3)), np.ones((4, 3)))[:, 0], rtol=1e-5)
    assert abs(a[0]) > abs(a[2])
    summed = adv.grpo(comps.sum(-1), g, num_groups=2)
    np.testing.assert_allclose(abs(summed[0]), abs(summed[2]), rtol=1e-6)  # GRPO collapses them


def test_mapo():
    s = jnp.array([1.0, 0.0, 1.0, 0.0])
    g = jnp.zeros(4, jnp.int32)
    np.testing.assert_allclose(adv.mapo(s, g, num_groups=1), adv.grpo(s, g, num_groups=1), rtol=1e-6)  # p = 0.5
    # {1,1,1,0}: μ = 0.75, σ = 0.5, λ = 1 − 4·0.75·0.25 = 0.25
    #   s=1: 0.75·0.25/0.5 + 0.25·0.25/0.75 = 0.375 + 0.083333 = 0.458333
    #   s=0: 0.75·(−0.75)/0.5 + 0.25·(−0.75)/0.75 = −1.125 − 0.25 = −1.375
    a = adv.mapo(jnp.array([1.0, 1.0, 1.0, 0.0]), g, num_groups=1, eps=0.0)
    np.testing.assert_allclose(a, [0.458333, 0.458333, 0.458333, -1.375], rtol=1e-5)
    mirror = adv.mapo(jnp.array([0.0, 0.0, 0.0, 1.0]), g, num_groups=1)
    assert not np.allclose(np.asarray(mirror), -np.asarray(a), atol=1e-3)


def test_canon_half_mu_is_dr_grpo():
    rng = np.random.default_rng(5)
    s = jnp.asarray(rng.normal(size=12), jnp.float32)
    g = jnp.asarray(rng.permutation(np.repeat(np.arange(3), 4)))
    metric = jnp.asarray(rng.normal(size=12), jnp.float32)
    np.testing.assert_allclose(adv.canon(s, g, metric, num_groups=3, mu=0.5),
                               adv.grpo(s, g, num_groups=3, normalize_std=False), rtol=1e-5, atol=1e-6)


def test_canon_inter_group_hand_case():
    # One group, metric [4, 1, 3, 2] -> sorted low half {idx1 (1), idx3 (2)}, high half {idx2 (3), idx0 (4)}
    # s = [1, 0, 1, 1]: m⁺ = mean(s0, s2) = 1, m⁻ = mean(s1, s3) = 0.5
    # μ = 1: high A = s − m⁻ -> idx0: 0.5, idx2: 0.5; low A = s − m⁺ -> idx1: −1, idx3: 0
    a = adv.canon(jnp.array([1.0, 0.0, 1.0, 1.0]), jnp.zeros(4, jnp.int32), jnp.array([4.0, 1.0, 3.0, 2.0]),
                  num_groups=1)
    np.testing.assert_allclose(a, [0.5, -1.0, 0.5, 0.0])
    # odd group: metric [3, 1, 2] -> ⌊3/2⌋ = 1 low {idx1}, high {idx2, idx0}
    a = adv.canon(jnp.array([1.0, 0.0, 0.0]), jnp.zeros(3, jnp.int32), jnp.array([3.0, 1.0, 2.0]), num_groups=1)
    np.testing.assert_allclose(a, [1.0, -0.5, 0.0])


def test_grpo_passk():
    # group 0: [0.2, 0.9, 0.5] -> best idx1: (0.9 − 0.5)/(std + eps), std = unbiased std of the group
    # group 1: tie [1, 1] -> gap 0
    s = jnp.array([0.2, 0.9, 0.5, 1.0, 1.0])
    g = jnp.array([0, 0, 0, 1, 1])
    a = adv.grpo_passk(s, g, num_groups=2)
    sd = np.std([0.2, 0.9, 0.5], ddof=1)
    np.testing.assert_allclose(a, [0, 0.4 / (sd + 1e-6), 0, 0, 0], rtol=1e-5)
    np.testing.assert_allclose(adv.grpo_passk(s, g, num_groups=2, normalize_std=False), [0, 0.4, 0, 0, 0],
                               rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", distinct_names(registry.ADVANTAGES))
def test_every_registered_estimator_runs_under_jit(name):
    n, t, gnum = 8, 5, 2
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    scores = jax.random.bernoulli(k[0], 0.5, (n,)).astype(jnp.float32)
    inputs = dict(
        group_ids=jnp.arange(n) % gnum, mask=jnp.ones((n, t)), values=jax.random.normal(k[1], (n, t)),
        baseline_scores=jnp.full((n,), 0.5), reward_components=jnp.stack([scores, 1 - scores], -1),
        seq_metric=jax.random.normal(k[2], (n,)), process_rewards=0.05 * jax.random.normal(k[1], (n, t)),
        # multi-turn layout (rl.multi_turn): turn 0 on tokens 0-1, an observation, turn 1 on tokens 3-4
        turn_id=jnp.tile(jnp.array([0, 0, -1, 1, 1]), (n, 1)), turn_end=jnp.tile(jnp.array([1, 4]), (n, 1)),
        turn_valid=jnp.ones((n, 2), bool), turn_rewards=jax.random.normal(k[2], (n, 2)),
        gt_logprobs=-jax.random.uniform(k[0], (n, 3)),
        # tree rollouts (rl.tree): rows 2i, 2i+1 share their first two tokens, then each has a node of its own
        tree_nodes=jnp.asarray([[2 * (i // 2)] * 3 + [2 * n + i] * (t - 2) for i in range(n)], jnp.int32),
        # DeepSearch's search-tree nodes (rl.tree.deepsearch): backed-up q-values, every other node terminal (±1)
        node_q=jnp.where(jnp.arange(n) % 2 == 1, 2.0 * scores - 1.0, jax.random.normal(k[2], (n,))),
        node_terminal=jnp.arange(n) % 2 == 1,
        hinted=jnp.arange(n) >= n // 2)  # ADHint: the last half of the rows sampled after a hint
    fn = jax.jit(lambda s, kw: registry.get_advantage(name)(s, kw.pop("group_ids"), kw.pop("mask"),
                                                            num_groups=gnum, **kw))
    out = fn(scores, dict(inputs))
    for leaf in jax.tree.leaves(out):
        assert leaf.shape in ((n,), (n, t)) and np.all(np.isfinite(leaf))
    assert isinstance(out, tuple) == (name in registry.RETURNS_VALUE_TARGETS)
