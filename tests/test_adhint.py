"""ADHint (Zhang et al. 2025; digest §8.3, reconstructed): the hint rate from the sample difficulty prior
(`curriculum.adhint_hint`, the `adhint` hint schedule), the hint tokens' consistency modulation and selective masking
(`rl.adhint.adhint_loss`), the advantage with the rollout difficulty posterior (`rl.adhint.adhint_advantages`), their
reduction to GRPO without hints, and a run of configs/adhint.py where the mechanism acts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm import config as config_lib
from rl4llm.data import arithmetic
from rl4llm.data import curriculum
from rl4llm.rl import adhint
from rl4llm.rl import advantages
from rl4llm.rl import losses
from rl4llm.rl import registry
from rl4llm.train import prompt_selection
from tests import test_selection
from tests.test_selection import _hand_rows, _hint_recipe_records
from tests.test_train import tiny_config

warm_start = test_selection.warm_start  # the module-scoped tiny SFT stage (a fixture)


# ------------------------------------------------------------------------------------------- hint rate


def test_hint_rate_falls_linearly_with_the_unhinted_accuracy():
    np.testing.assert_allclose(curriculum.adhint_hint([0.0, 0.25, 0.5, 1.0], 0.8), [0.8, 0.6, 0.4, 0.0])


def test_adhint_rounds_hint_each_problem_at_h_max_times_its_unhinted_failure_rate():
    """Round 1 unhinted; round 2 appends the prefix at h = h_max·(1 − acc of round 1): problem 0 (solved 1 of 2)
    at 0.8·0.5 = 0.4, problem 1 (solved 2 of 2) at 0 (no hint); each group holds both rounds of its problem."""
    c = tiny_config()
    c.rl.num_prompts, c.rl.num_generations = 2, 4
    c.selection.update(hints=True, hint_schedule="adhint", hint_rounds=2, hint_max=0.8)
    selector = prompt_selection.Selector(config_lib.parse(c), None, data_offset=0, pad_id=0, encode=None,
                                         tokenize=None, decode=None)
    examples = [arithmetic.render_problem([37, 48, 19], ["+", "-"]), arithmetic.render_problem([5, 6, 2], ["+", "+"])]
    calls = []

    def generate(prompts, answers, counts, key, prefixes, traces=None, solutions=None):
        del answers, key, traces, solutions
        assert list(counts) == [2, 2]
        calls.append([len(p) for p in prefixes])
        for prompt, prefix, ex in zip(prompts, prefixes, examples):
            assert prompt == curriculum.hinted_prompt(ex.prompt, ex.solution, len(prefix))
        return _hand_rows([0.0, 1.0, 1.0, 1.0] if len(calls) == 1 else [1.0, 0.0, 1.0, 1.0], len(calls)), {}

    rows, metrics = selector.generate_groups(examples, jax.random.key(0), generate)
    chars = curriculum.hint_chars(examples[0].solution, examples[0].answer, 0.4)
    assert chars > 0 and calls == [[0, 0], [chars, 0]]
    np.testing.assert_array_equal(rows.completion_tokens[:, 0], [1, 1, 2, 2, 1, 1, 2, 2])
    np.testing.assert_array_equal(rows.hint_chars, [0, 0, chars, chars, 0, 0, 0, 0])
    assert metrics["selection/hint_rate"] == pytest.approx(0.2)  # mean of (0.4, 0)
    assert metrics["selection/hinted_frac"] == 0.5 and metrics["selection/unhinted_accuracy"] == 0.75


# ------------------------------------------------------------------------------------------ advantage


def test_advantage_scales_hinted_successes_by_the_difficulty_posterior():
    """Group 0: 4 unhinted failures, 4 hinted successes: GRPO's ±0.93541 (μ = ½, σ = 0.53452), the hinted
    successes × w = (1/6)/(5/6) = 0.2. Group 1: unhinted (1, 0), hinted (1, 0): posteriors equal, w = 1, GRPO.
    Group 2: unhinted (1, 1), hinted (1, 0): the hint made it harder, w = min(1, (2/4)/(1/4)) = 1. Hinted failures
    keep GRPO's advantage."""
    scores = jnp.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 0], jnp.float32)
    group_ids = jnp.repeat(jnp.arange(3), jnp.array([8, 4, 4]), total_repeat_length=16)
    hinted = jnp.array([0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1], bool)
    adv = adhint.adhint_advantages(scores, group_ids, hinted, num_groups=3)
    a0 = 0.5 / (np.sqrt(8 / 7 * 0.25) + 1e-6)
    a1 = 0.5 / (np.sqrt(4 / 3 * 0.25) + 1e-6)  # group 1: μ = ½
    hi, lo = 0.25 / (np.sqrt(1 / 3 * 0.75) + 1e-6), -0.75 / (np.sqrt(1 / 3 * 0.75) + 1e-6)  # group 2: μ = ¾
    expected = [-a0] * 4 + [0.2 * a0] * 4 + [a1, -a1, a1, -a1] + [hi, hi, hi, lo]
    np.testing.assert_allclose(adv, expected, rtol=1e-5)
    np.testing.assert_allclose(adhint.difficulty_posterior(scores, hinted, group_ids, 3), [1 / 6, 2 / 4, 2 / 4])


def test_without_hinted_rows_the_advantage_is_grpo_exactly():
    scores = jax.random.uniform(jax.random.key(0), (12,))
    group_ids = jnp.repeat(jnp.arange(3), 4)
    np.testing.assert_array_equal(adhint.adhint_advantages(scores, group_ids, jnp.zeros(12, bool), num_groups=3),
                                  advantages.grpo(scores, group_ids, num_groups=3))
    # and through the trainer's adapter, which forwards `hinted`
    mask = jnp.ones((12, 3))
    np.testing.assert_array_equal(
        registry.get_advantage("adhint")(scores, group_ids, mask, num_groups=3, hinted=jnp.zeros(12, bool)),
        registry.get_advantage("grpo")(scores, group_ids, mask, num_groups=3))


# ----------------------------------------------------------------------------------------------- loss


def test_hint_tokens_get_gradient_weight_pi_and_masking_by_hand():
    """Row 0 (A = 2): a hint token at π = 0.5 (weight 0.5), one at π = τ = 0.1 (the tie: kept, weight 0.1), one at
    π = 0.05 < τ (masked), then a sampled token (PPO on-policy: weight 1). Row 1 (A = −1): its hint token is masked
    (hint preservation), its sampled tokens get PPO's −A. token-mean over the 6 valid tokens."""
    tau = 0.1
    logp = jnp.log(jnp.array([[0.5, tau, 0.05, 0.3], [0.7, 0.2, 0.4, 0.9]], jnp.float32))
    off = jnp.array([[1, 1, 1, 0], [1, 0, 0, 0]], jnp.float32)
    mask = jnp.array([[1, 1, 1, 1], [1, 1, 0, 0]], jnp.float32)
    adv = jnp.array([2.0, -1.0])

    def loss(lp):
        return adhint.adhint_loss(lp, jax.lax.stop_gradient(lp), adv, mask, off, mask_threshold=tau)

    (value, metrics), grad = jax.value_and_grad(loss, has_aux=True)(logp)
    expected_grad = np.array([[-2 * 0.5, -2 * tau, 0.0, -2.0], [0.0, 1.0, 0.0, 0.0]]) / 6
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(value, (-2 * 0.5 - 2 * tau - 2.0 + 1.0) / 6, rtol=1e-5)
    assert metrics["off_masked_frac"] == pytest.approx(2 / 4)  # π < τ in row 0, A < 0 in row 1
    assert metrics["off_low_prob_frac"] == pytest.approx(1 / 4)
    assert metrics["off_policy_frac"] == pytest.approx(4 / 6)
    assert metrics["off_is_weight_mean"] == pytest.approx((0.5 + tau + 0.05 + 0.7) / 4, rel=1e-5)


def test_without_hint_tokens_the_loss_is_ppo_clip_exactly():
    k1, k2, k3 = jax.random.split(jax.random.key(1), 3)
    logp = -jnp.abs(jax.random.normal(k1, (8, 5)))
    old_logp = logp + 0.5 * jax.random.normal(k2, (8, 5))  # ratios beyond the clip and the dual clip
    mask = (jnp.arange(5)[None, :] < jax.random.randint(k3, (8, 1), 1, 6)).astype(jnp.float32)
    adv = jnp.array([2.0, -1.5, 1.0, -0.5, 0.0, 3.0, -2.0, 1.0])
    for off in (None, jnp.zeros((8, 5))):
        def ours(lp, off=off):
            return adhint.adhint_loss(lp, old_logp, adv, mask, off)[0]

        def ppo(lp):
            return losses.ppo_clip(lp, old_logp, adv, mask)[0]

        np.testing.assert_array_equal(ours(logp), ppo(logp))
        np.testing.assert_array_equal(jax.grad(ours)(logp), jax.grad(ppo)(logp))


# ---------------------------------------------------------------------------------------------- a run


def test_adhint_recipe_hints_the_failed_problems_and_masks_hint_tokens(tmp_path, monkeypatch, warm_start):
    """Two steps of configs/adhint.py under a reward the nano warm start rarely earns and any hint does
    (`_starts_like_the_solution`), at h_max = 0.25 (a longer hint with the nano policy's continuation overflows the
    tiny budget): the problems it fails get hints at rate h_max·(1 − acc), the hinted rollouts succeed more, and
    their tokens reach the loss off-policy with weight π_θ. The nano policy is near uniform (π ≈ 1/20 on every
    token), so at τ = 0.5 every hint token is below the threshold and masked."""
    records = _hint_recipe_records("adhint", tmp_path, monkeypatch, warm_start, hint_max=0.25,
                                   overrides={"rl.loss_kwargs.mask_threshold": 0.5})
    for r in records.values():
        assert r["selection/hinted_frac"] > 0 and 0 < r["selection/hint_rate"] <= 0.25, r
        assert r["selection/hinted_accuracy"] > r["selection/unhinted_accuracy"], r
        assert r["off_policy_frac"] > 0 and 0 < r["off_is_weight_mean"] < 0.5, r
        assert r["off_masked_frac"] == r["off_low_prob_frac"] == 1.0, r
        assert np.isfinite(r["loss/pg"])
