"""Group advantage estimators: hand cases and defining properties."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm.rl import advantages as eager_advantages

from rl_testing import compiled

adv = compiled(eager_advantages)


def test_grpo_hand_case():
    # group 0: [1, 0, 0, 1] -> mean 0.5, unbiased std = sqrt(4·0.25/3) = sqrt(1/3) = 0.577350
    #   A = ±0.5 / (0.577350 + 1e-6) = ±0.866024
    # group 1: [2, 4]       -> mean 3, std = sqrt((1 + 1)/1) = 1.414214; A = ∓1/1.414215 = ∓0.707106
    scores = jnp.array([1.0, 0.0, 0.0, 1.0, 2.0, 4.0])
    gids = jnp.array([0, 0, 0, 0, 1, 1])
    a = adv.grpo(scores, gids, num_groups=2)
    s3 = np.sqrt(1 / 3)
    expected = [0.5 / (s3 + 1e-6), -0.5 / (s3 + 1e-6), -0.5 / (s3 + 1e-6), 0.5 / (s3 + 1e-6),
                -1 / (np.sqrt(2) + 1e-6), 1 / (np.sqrt(2) + 1e-6)]
    np.testing.assert_allclose(a, expected, rtol=1e-6)


def test_dr_grpo_is_mean_subtraction():
    scores = jnp.array([1.0, 0.0, 0.0, 1.0, 2.0, 4.0])
    gids = jnp.array([0, 0, 0, 0, 1, 1])
    a = adv.grpo(scores, gids, num_groups=2, normalize_std=False)
    np.testing.assert_allclose(a, [0.5, -0.5, -0.5, 0.5, -1.0, 1.0], rtol=1e-6)


def test_singleton_groups():
    # singleton: μ = 0, σ = 1 -> GRPO gives s/(1 + 1e-6), Dr.GRPO gives s, RLOO gives s
    scores = jnp.array([3.0, 1.0, 2.0])
    gids = jnp.array([0, 1, 1])
    np.testing.assert_allclose(adv.grpo(scores, gids, num_groups=2)[0], 3.0 / (1 + 1e-6), rtol=1e-7)
    np.testing.assert_allclose(adv.grpo(scores, gids, num_groups=2, normalize_std=False)[0], 3.0)
    np.testing.assert_allclose(adv.rloo(scores, gids, num_groups=2)[0], 3.0)


def test_all_equal_rewards_give_zero():
    scores = jnp.array([1.0, 1.0, 1.0, 0.0, 0.0])
    gids = jnp.array([0, 0, 0, 1, 1])
    for a in (adv.grpo(scores, gids, num_groups=2), adv.grpo(scores, gids, num_groups=2, normalize_std=False),
              adv.rloo(scores, gids, num_groups=2)):
        np.testing.assert_array_equal(a, 0.0)


def _random_groups(seed, n=24, g=5):
    rng = np.random.default_rng(seed)
    gids = np.concatenate([np.arange(g), rng.integers(0, g, n - g)])  # every group non-empty
    rng.shuffle(gids)
    return jnp.asarray(rng.normal(size=n), jnp.float32), jnp.asarray(gids), g


@pytest.mark.parametrize("normalize_std", [True, False])
def test_group_advantages_sum_to_zero(normalize_std):
    scores, gids, g = _random_groups(0)
    a = adv.grpo(scores, gids, num_groups=g, normalize_std=normalize_std)
    sums = jax.ops.segment_sum(a, gids, num_segments=g)
    counts = np.bincount(np.asarray(gids), minlength=g)
    np.testing.assert_allclose(np.asarray(sums)[counts > 1], 0.0, atol=1e-5)


def test_grpo_group_std_is_one():
    scores, gids, g = _random_groups(1)
    a = np.asarray(adv.grpo(scores, gids, num_groups=g, eps=0.0))
    for k in range(g):
        members = a[np.asarray(gids) == k]
        if len(members) > 1:
            np.testing.assert_allclose(members.std(ddof=1), 1.0, rtol=1e-5)


def test_rloo_is_leave_one_out():
    scores, gids, g = _random_groups(2)
    a = np.asarray(adv.rloo(scores, gids, num_groups=g))
    s, ids = np.asarray(scores), np.asarray(gids)
    for i in range(len(s)):
        others = s[(ids == ids[i]) & (np.arange(len(s)) != i)]
        expected = s[i] - others.mean() if len(others) else s[i]
        np.testing.assert_allclose(a[i], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn", [adv.grpo, adv.rloo])
def test_non_contiguous_equals_contiguous(fn):
    scores, gids, g = _random_groups(3)
    order = np.argsort(np.asarray(gids), kind="stable")
    shuffled = fn(scores, gids, num_groups=g)
    contiguous = fn(scores[order], gids[order], num_groups=g)
    np.testing.assert_allclose(np.asarray(shuffled)[order], contiguous, rtol=1e-6)


def test_grpo_matches_verl_loop_reference():
    scores, gids, g = _random_groups(4)
    s, ids = np.asarray(scores, np.float64), np.asarray(gids)
    ref = np.empty_like(s)
    for k in range(g):
        members = s[ids == k]
        mu, sd = (0.0, 1.0) if len(members) == 1 else (members.mean(), members.std(ddof=1))
        ref[ids == k] = (members - mu) / (sd + 1e-6)
    np.testing.assert_allclose(adv.grpo(scores, gids, num_groups=g), ref, rtol=1e-5)


def test_jit():
    scores, gids, g = _random_groups(5)
    f = jax.jit(adv.grpo, static_argnames=("num_groups", "normalize_std"))
    np.testing.assert_allclose(f(scores, gids, num_groups=g), adv.grpo(scores, gids, num_groups=g), rtol=1e-6)
