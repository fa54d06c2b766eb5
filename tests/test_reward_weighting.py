"""Dynamic reward weighting and constrained RLHF: the kernels (`rl4llm.rl.reward_weighting`) against hand-computed
cases, their properties and numpy transcriptions of the official code; the config checks; the companion in a run
(metrics, the multipliers' direction, resume)."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from rl4llm.rl import reward_weighting as rw


# --- numpy transcriptions of the official code -------------------------------------------------------------------


def official_dynamic_weights(weights, flat_grads, *, lr_t, regularization, grad_clip):
    """yining610/dynamic-reward-weighting: dp_actor.compute_gradients clips each reward's gradient with
    clip_grad_norm_(max_norm=grad_clip) and flattens it; ray_trainer_optimization.fit: scores_mat = G G^T,
    scores_vec = scores_mat.sum(-1), scores = lr_t * scores_vec / regularization_factor,
    weights = softmax(log(weights) + scores) (accumulation 1)."""
    grads = np.array(flat_grads, np.float64)
    for k in range(len(grads)):
        clip_coef = grad_clip / (np.linalg.norm(grads[k]) + 1e-6)
        if clip_coef < 1:
            grads[k] *= clip_coef
    scores_vec = (grads @ grads.T).sum(axis=-1)
    logits = np.log(np.asarray(weights, np.float64)) + lr_t * scores_vec / regularization
    return np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()


def official_lagrange_step(lagrange, constraint_returns, threshold, *, lagrange_lr, max_grad_norm):
    """tedmoskovitz/ConstrainedRL4LMs constrained_ppo.train, one minibatch: lagrange_loss = lagrange *
    (threshold - constraint_returns).mean(); clip_grad_norm_([lagrange], max_grad_norm); SGD(momentum=0.9) step (the
    first step of momentum SGD is a plain step). The constraint there is a cost kept <= threshold, mixed advantages
    task_advantages - lagrange * constraint_advantages."""
    grad = np.mean(threshold - np.asarray(constraint_returns, np.float64))
    grad *= min(1.0, max_grad_norm / (abs(grad) + 1e-6))
    return lagrange - lagrange_lr * grad


# --- kernels: hand cases ------------------------------------------------------------------------------------------


def test_gradient_influence_is_the_gram_row_sums():
    gram = jnp.array([[1.0, 0.5], [0.5, 4.0]])
    np.testing.assert_allclose(rw.gradient_influence(gram), [1.5, 4.5])


def test_clip_gram_scales_each_gradient_to_the_clip():
    gram = jnp.array([[1.0, 1.0], [1.0, 4.0]])  # ||g_1|| = 1 (kept, c = 1/(1 + 1e-6)), ||g_2|| = 2 (halved)
    c1, c2 = 1 / (1 + 1e-6), 1 / (2 + 1e-6)
    np.testing.assert_allclose(rw.clip_gram(gram, 1.0), [[c1 * c1, c1 * c2], [c1 * c2, 4 * c2 * c2]], rtol=1e-6)
    np.testing.assert_array_equal(rw.clip_gram(gram, 0.0), gram)  # no clip
    np.testing.assert_allclose(rw.clip_gram(gram, 10.0), gram)  # norms under the clip: unchanged


def test_mirror_descent_step_by_hand():
    # softmax(log 0.5 + ln 3 * 1, log 0.5 + 0) = (3/4, 1/4)
    w = rw.mirror_descent_weights(jnp.array([0.5, 0.5]), jnp.array([1.0, 0.0]), learning_rate=np.log(3.0),
                                  regularization=1.0)
    np.testing.assert_allclose(w, [0.75, 0.25], rtol=1e-6)
    # the learning rate and the regularisation enter as lr / reg only
    w2 = rw.mirror_descent_weights(jnp.array([0.5, 0.5]), jnp.array([1.0, 0.0]), learning_rate=np.log(3.0) * 1e-5,
                                   regularization=1e-5)
    np.testing.assert_allclose(w2, w, rtol=1e-5)


def test_orthogonal_equal_gradients_keep_uniform_weights():
    gram = jnp.eye(3) * 2.0  # orthogonal gradients of equal norm: equal influence
    w = rw.mirror_descent_weights(jnp.full(3, 1 / 3), rw.gradient_influence(rw.clip_gram(gram, 1.0)),
                                  learning_rate=0.7, regularization=0.1)
    np.testing.assert_allclose(w, np.full(3, 1 / 3), rtol=1e-6)


def test_ties_in_influence_keep_the_weights_ratio():
    w0 = jnp.array([0.2, 0.3, 0.5])
    w = rw.mirror_descent_weights(w0, jnp.array([2.0, 2.0, 2.0]), learning_rate=1.0, regularization=1.0)
    np.testing.assert_allclose(w, w0, rtol=1e-6)


def test_accumulate_influence_updates_every_k_steps_with_the_mean():
    s1, s2 = jnp.array([1.0, 3.0]), jnp.array([3.0, 1.0])
    update, _, total = rw.accumulate_influence(jnp.zeros(2), s1, 1, accumulation_steps=2)
    assert not update
    np.testing.assert_array_equal(total, s1)
    update, mean, total = rw.accumulate_influence(total, s2, 2, accumulation_steps=2)
    assert update
    np.testing.assert_array_equal(mean, [2.0, 2.0])
    np.testing.assert_array_equal(total, [0.0, 0.0])
    update, mean, total = rw.accumulate_influence(jnp.zeros(2), s1, 7, accumulation_steps=1)
    assert update and np.array_equal(mean, s1) and np.array_equal(total, [0.0, 0.0])


def test_multiplier_update_by_hand():
    lam = rw.multiplier_update(jnp.array([0.1, 0.05]), jnp.array([0.5, 0.9]), jnp.array([0.8, 0.8]),
                               learning_rate=1.0)
    np.testing.assert_allclose(lam, [0.4, 0.0], rtol=1e-6)  # violated: up by 0.3; slack 0.1 > 0.05: down to 0
    capped = rw.multiplier_update(jnp.array([0.1]), jnp.array([0.0]), jnp.array([0.8]), learning_rate=1.0,
                                  max_multiplier=0.5)
    np.testing.assert_allclose(capped, [0.5])
    np.testing.assert_allclose(rw.constraint_violation(jnp.array([0.5, 0.9]), jnp.array([0.8, 0.8])), [0.3, -0.1],
                               rtol=1e-6)


def test_a_violated_constraint_raises_its_multiplier_a_satisfied_one_lowers_it_to_zero():
    lam = jnp.array([0.0, 0.3])
    for _ in range(20):
        lam = rw.multiplier_update(lam, jnp.array([0.2, 0.95]), jnp.array([0.6, 0.6]), learning_rate=0.05)
    assert lam[0] == pytest.approx(20 * 0.05 * 0.4, rel=1e-5)  # grows linearly while violated
    assert lam[1] == 0.0  # slack: driven to the bound and held there


def test_mix_advantages_by_hand():
    a0 = jnp.array([[1.0, 1.0], [-1.0, -1.0]])
    a1 = jnp.array([[[-1.0, -1.0], [1.0, 1.0]]])
    np.testing.assert_allclose(rw.mix_advantages(a0, a1, jnp.array([0.5])), [[0.5, 0.5], [-0.5, -0.5]])
    np.testing.assert_allclose(rw.mix_advantages(a0, a1, jnp.array([0.5]), normalize=True),
                               [[1 / 3, 1 / 3], [-1 / 3, -1 / 3]], rtol=1e-6)
    np.testing.assert_array_equal(rw.mix_advantages(a0, a1, jnp.array([0.0])), a0)  # λ = 0: the task's advantage


def test_normalized_mixing_is_the_official_sigmoid_mixing_for_one_constraint():
    key1, key2 = jax.random.split(jax.random.PRNGKey(0))
    a0, a1 = jax.random.normal(key1, (6, 5)), jax.random.normal(key2, (1, 6, 5))
    for lam in (0.0, 0.3, 4.0):
        sigma = lam / (1 + lam)
        np.testing.assert_allclose(rw.mix_advantages(a0, a1, jnp.array([lam]), normalize=True),
                                   (1 - sigma) * a0 + sigma * a1[0], rtol=1e-5, atol=1e-6)


# --- properties, transcriptions, jit -------------------------------------------------------------------------------


def test_multipliers_are_never_negative():
    rng = np.random.default_rng(0)
    for _ in range(50):
        lam = jnp.asarray(rng.uniform(0, 2, 3), jnp.float32)
        new = rw.multiplier_update(lam, jnp.asarray(rng.uniform(-3, 3, 3), jnp.float32),
                                   jnp.asarray(rng.uniform(-1, 1, 3), jnp.float32), learning_rate=rng.uniform(0, 5))
        assert (np.asarray(new) >= 0).all()


def test_weights_stay_on_the_simplex():
    rng = np.random.default_rng(1)
    w = jnp.full(4, 0.25)
    for _ in range(30):
        w = rw.mirror_descent_weights(w, jnp.asarray(rng.normal(size=4), jnp.float32), learning_rate=0.3,
                                      regularization=1.0)
        assert (np.asarray(w) > 0).all() and float(jnp.sum(w)) == pytest.approx(1.0, abs=1e-6)


def test_dynamic_weights_match_the_official_code():
    rng = np.random.default_rng(2)
    grads = rng.normal(size=(3, 50)) * np.array([[0.05], [0.5], [3.0]])  # under, around and over the clip
    weights = np.array([0.334, 0.333, 0.333])  # the released runs' initial weights
    gram = jnp.asarray(grads @ grads.T, jnp.float32)
    ours = rw.mirror_descent_weights(jnp.asarray(weights, jnp.float32), rw.gradient_influence(rw.clip_gram(gram, 1.0)),
                                     learning_rate=1e-6, regularization=1e-5)
    np.testing.assert_allclose(ours, official_dynamic_weights(weights, grads, lr_t=1e-6, regularization=1e-5,
                                                              grad_clip=1.0), rtol=1e-5)


def test_multiplier_update_matches_the_official_step():
    """The official cost constraint C <= θ, mixed A_task − λ A_C, is ours with the reward −C >= −θ."""
    rng = np.random.default_rng(3)
    costs = rng.uniform(0, 1, 64)
    for threshold in (0.2, 0.5):
        official = official_lagrange_step(0.5, costs, threshold, lagrange_lr=1e-2, max_grad_norm=10.0)
        ours = rw.multiplier_update(jnp.array([0.5]), jnp.array([-costs.mean()]), jnp.array([-threshold]),
                                    learning_rate=1e-2)
        np.testing.assert_allclose(ours, [official], rtol=1e-5)


def test_jit_equals_eager():
    gram = jnp.array([[2.0, 0.3, -0.1], [0.3, 0.5, 0.0], [-0.1, 0.0, 9.0]])
    w = jnp.array([0.2, 0.3, 0.5])

    def dynamic(gram, w):
        return rw.mirror_descent_weights(w, rw.gradient_influence(rw.clip_gram(gram, 1.0)), learning_rate=0.2,
                                         regularization=1.0)

    np.testing.assert_allclose(jax.jit(dynamic)(gram, w), dynamic(gram, w), rtol=1e-6)
    lam, values, thresholds = jnp.array([0.1, 0.0]), jnp.array([0.3, 0.9]), jnp.array([0.5, 0.5])

    def constrained(lam):
        return rw.multiplier_update(lam, values, thresholds, learning_rate=0.1, max_multiplier=2.0)

    np.testing.assert_allclose(jax.jit(constrained)(lam), constrained(lam), rtol=1e-6)
    a0, a1 = jnp.ones((2, 3)), -jnp.ones((2, 2, 3))
    mix = lambda lam: rw.mix_advantages(a0, a1, lam, normalize=True)  # noqa: E731
    np.testing.assert_allclose(jax.jit(mix)(jnp.array([0.5, 1.0])), mix(jnp.array([0.5, 1.0])), rtol=1e-6)


# --- config checks -------------------------------------------------------------------------------------------------

from configs import default  # noqa: E402
from rl4llm import config as config_lib  # noqa: E402
from rl4llm.train import job  # noqa: E402
from rl4llm.train import metrics as metrics_lib  # noqa: E402
from tests.test_train import tiny_config  # noqa: E402


def _config_errors(**changes) -> str:
    config = default.get_config()
    config.update_from_flattened_dict(changes)
    with pytest.raises(config_lib.ConfigError) as info:
        config_lib.parse(config)
    return str(info.value)


def test_a_constraint_on_a_component_the_task_does_not_produce_fails_before_compiling():
    message = _config_errors(**{"reward_weighting.method": "constrained", "task.extra_rewards": "format_arithmetic:0",
                                "reward_weighting.thresholds": "format_answer_tag:0.5"})
    assert "config.reward_weighting.thresholds: a constraint on 'format_answer_tag', a component the task does " \
           "not produce" in message


def test_reward_weighting_config_errors_name_the_field():
    assert "config.task.extra_rewards='': config.reward_weighting.method='dynamic' weighs" in _config_errors(
        **{"reward_weighting.method": "dynamic"})
    assert "config.reward_weighting.thresholds='': config.reward_weighting.method='constrained' needs a threshold" \
        in _config_errors(**{"reward_weighting.method": "constrained", "task.extra_rewards": "format_arithmetic:0"})
    assert "config.reward_weighting.thresholds='format_arithmetic:0.9': set but config.reward_weighting.method=" \
           "'none'" in _config_errors(**{"reward_weighting.thresholds": "format_arithmetic:0.9"})
    assert "config.reward_weighting.thresholds='format_arithmetic:x'" in _config_errors(
        **{"reward_weighting.method": "constrained", "task.extra_rewards": "format_arithmetic:0",
           "reward_weighting.thresholds": "format_arithmetic:x"})
    message = _config_errors(**{"reward_weighting.method": "dynamic", "task.extra_rewards": "format_arithmetic:1",
                                "rl.advantage": "gae", "task.length_shaping": "dapo_overlong",
                                "rl.kl_in_reward": True, "rl.async_rollouts": True, "rl.tis_cap": 2.0})
    for field in ("config.rl.advantage='gae'", "config.task.length_shaping='dapo_overlong'",
                  "config.rl.kl_in_reward=True", "config.rl.async_rollouts=True"):
        assert f"{field}: config.reward_weighting.method='dynamic'" in message, field
    assert "config.task.extra_rewards='format_arithmetic:0': config.reward_weighting.method='dynamic' starts from" \
        in _config_errors(**{"reward_weighting.method": "dynamic", "task.extra_rewards": "format_arithmetic:0"})
    assert "config.rl.loss='gbpo': config.reward_weighting.method='dynamic'" in _config_errors(
        **{"reward_weighting.method": "dynamic", "task.extra_rewards": "format_arithmetic:1", "rl.loss": "gbpo"})
    assert "config.reward_weighting.multiplier_lr" in _config_errors(**{"reward_weighting.multiplier_lr": 0.0})
    assert "config.reward_weighting.method" in _config_errors(**{"reward_weighting.method": "pareto"})


# --- in the RL loop (nano runs) -------------------------------------------------------------------------------------

_TIMING = ("time/", "tokens_per_s", "step_s")


def _records(workdir):
    return {r["step"]: r for r in metrics_lib.read_metrics(workdir, "rl")}


def _constrained_config():
    """format_arithmetic >= 0.95 (the nano policy after 6 SFT steps never writes the worked form: violated) and
    format_answer_tag >= -1 (always 0 on arithmetic: satisfied, its multiplier starts at 0.05 and must drop to 0)."""
    config = tiny_config()
    config.rl.steps = 4
    config.task.extra_rewards = "format_arithmetic:0,format_answer_tag:0"
    config.reward_weighting.method = "constrained"
    config.reward_weighting.thresholds = "format_arithmetic:0.95,format_answer_tag:-1"
    config.reward_weighting.multiplier_init = 0.05
    config.reward_weighting.multiplier_lr = 0.1
    return config


def test_constrained_run_moves_the_multipliers_and_resumes_exactly(tmp_path):
    config = _constrained_config()
    full = str(tmp_path / "full")
    job.run(config, full)
    records = _records(full)
    assert sorted(records) == [1, 2, 3, 4]
    lr, names = 0.1, ("format_arithmetic", "format_answer_tag")
    for step in (1, 2, 3):
        for name in names:
            lam, violation = records[step][f"constraint/multiplier/{name}"], records[step][f"constraint/violation/{name}"]
            threshold = 0.95 if name == "format_arithmetic" else -1.0
            assert violation == pytest.approx(threshold - records[step][f"reward_weighting/mean/{name}"], abs=1e-6)
            assert records[step + 1][f"constraint/multiplier/{name}"] == pytest.approx(max(0.0, lam + lr * violation),
                                                                                      abs=1e-6)
    assert records[1]["constraint/multiplier/format_arithmetic"] == pytest.approx(0.05)
    assert all(records[s]["constraint/violation/format_arithmetic"] > 0 for s in records)  # violated throughout
    assert records[4]["constraint/multiplier/format_arithmetic"] > records[1]["constraint/multiplier/format_arithmetic"]
    assert [records[s]["constraint/multiplier/format_answer_tag"] for s in (2, 3, 4)] == [0.0, 0.0, 0.0]  # satisfied
    assert "reward_weighting/mean/exact_answer" in records[1]
    # interrupted after step 2 (a checkpoint), then resumed: steps 3 and 4 are the uninterrupted run's
    resumed = str(tmp_path / "resumed")
    job.run(config, resumed, stop_after_rl_step=2)
    job.run(config, resumed)
    again = _records(resumed)
    for step in (3, 4):
        strip = lambda r: {k: v for k, v in r.items() if not k.startswith(_TIMING)}  # noqa: E731
        assert strip(again[step]) == strip(records[step]), step


def test_dynamic_run_moves_the_weights_by_mirror_descent(tmp_path, monkeypatch):
    from rl4llm import rewards
    from tests.test_recipes import _parity_reward  # the nano policy solves nothing: a main reward that varies

    monkeypatch.setitem(rewards.REWARDS, "parity", _parity_reward)
    config = tiny_config()
    config.rl.steps = 3
    config.task.reward = "parity"
    config.task.extra_rewards = "format_arithmetic:1,format_answer_tag:1"  # initial weights 1/3 each
    config.reward_weighting.method = "dynamic"
    config.reward_weighting.regularization = 1e-4
    job.run(config, str(tmp_path / "run"))
    records = _records(str(tmp_path / "run"))
    names = ("parity", "format_arithmetic", "format_answer_tag")
    weights = {s: np.array([records[s][f"reward_weighting/weight/{n}"] for n in names]) for s in records}
    np.testing.assert_allclose(weights[1], np.full(3, 1 / 3), rtol=1e-6)
    for step in (1, 2):
        assert weights[step].sum() == pytest.approx(1.0, abs=1e-6)
        # format_answer_tag is 0 on every completion: zero advantages, zero gradient, zero influence
        assert records[step]["reward_weighting/influence/format_answer_tag"] == 0.0
        influence = np.array([records[step][f"reward_weighting/influence/{n}"] for n in names])
        lr_t = 1e-4 * (step - 1) / 5  # the default 5-update linear warm-up, one update per step
        expected = rw.mirror_descent_weights(jnp.asarray(weights[step], jnp.float32), jnp.asarray(influence),
                                             learning_rate=lr_t, regularization=1e-4)
        np.testing.assert_allclose(weights[step + 1], expected, rtol=1e-5)
        assert records[step]["reward_weighting/weight_change"] == pytest.approx(
            np.abs(weights[step + 1] - weights[step]).sum(), abs=1e-6)
    # step 2's groups were all correct (no gradient); the weights moved at step 3, once the learning rate is > 0
    assert max(r["reward_weighting/weight_change"] for r in records.values()) > 0
    # only the main reward varies, and GRPO is scale-invariant: the step trained on (1/3)·parity, i.e. on parity's
    # own gradient, so its influence <g, g> is the learner's squared gradient norm (under the clip of 1)
    for record in records.values():
        assert record["reward_weighting/influence/parity"] == pytest.approx(record["grad_norm"] ** 2, rel=1e-3, abs=1e-9)
