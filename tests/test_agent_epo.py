"""Mini-o3 over-turn masking and EPO's per-turn entropy regularisation in the agent loop (config.agent.over_turn_mask,
config.agent.epo; train.epo): masked trajectories get no loss but stay in their groups' advantages; EPO with coef 0
is the baseline learner step; the hinge corridor's gradient through the learner, hand-computed; the per-turn entropy
history is checkpointed, so a resumed run equals the uninterrupted one."""
from __future__ import annotations

import functools
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from rl4llm import config as config_lib
from rl4llm.models import ModelConfig, init_params
from rl4llm.train import agent
from rl4llm.train import episodes
from rl4llm.train import inputs as inputs_lib
from rl4llm.train import job
from rl4llm.train import optim
from rl4llm.train import programs
from rl4llm.train import setup as setup_lib
from rl4llm.train import state as state_lib
from rl4llm.train.companions import epo as epo_lib
from rl4llm.train import learner as learner_lib
from tests.test_multi_turn import agent_config


def _cfg(**kwargs) -> learner_lib.LearnerConfig:
    base = dict(loss="ppo_clip", loss_kwargs=(), agg_mode="token-mean", kl_coef=0.0, kl_kind="k3", entropy_coef=0.01,
                temperature=1.0, micro_batch_size=0, logprob_chunk_size=64, use_old_logp=True)
    return learner_lib.LearnerConfig(**(base | kwargs))


def _epo(coef=0.1, smooth_coef=1.0, kappa_low=0.0, kappa_high=2.0, alpha=0.5, total_epochs=150) -> tuple:
    """LearnerConfig.epo in `epo_lib.learner_settings`'s form."""
    return tuple(sorted(dict(coef=coef, smooth_coef=smooth_coef, kappa_low=kappa_low, kappa_high=kappa_high,
                             alpha=alpha, total_epochs=total_epochs).items()))


# ----------------------------------------------------------------------------------- agent runs and records


@pytest.fixture(scope="module")
def epo_runs(tmp_path_factory):
    """A 2-step EPO agent run on guess-the-number (the corridor (0, H̄/2) lies below every entropy, so the penalty is
    on) and the same run interrupted after RL step 1 (its workdir with the SFT stage and RL checkpoint 1 only),
    resumed; and the run's setup (its compiled rollout programs serve the other tests)."""
    config = agent_config()
    config.sft.steps = 0  # RL from the initial params (no SFT step to compile)
    config.eval.every = 100  # no evaluation before the last step
    config.agent.epo.update(coef=0.01, kappa_high=0.5, alpha=0.1, total_epochs=4)
    full, resumed = str(tmp_path_factory.mktemp("epo") / "full"), str(tmp_path_factory.mktemp("epo") / "resumed")
    job.run(config, full)
    shutil.copytree(full, resumed)
    shutil.rmtree(os.path.join(resumed, "checkpoints", "rl", "2"))
    os.remove(os.path.join(resumed, "metrics.jsonl"))
    job.run(config, resumed)
    config = config_lib.parse(config)
    return config, full, resumed, agent.build_setup(config, full)


@pytest.fixture(scope="module")
def record(epo_runs):
    """(setup, params, record) of 2 guess-the-number tasks x 2 episodes, with hand-set flags and scores: row 0 cut
    by the turn cap, row 2 by the context limit; scores (0, 1 | 1, 0)."""
    config, _, _, setup = epo_runs
    params = setup_lib.initial_params(config, setup.model_cfg, jax.random.key(0))
    traj = episodes.run_episodes(setup, params, setup.source.train_tasks(0, 2), 2, 0, jax.random.key(1),
                                      setup.rollout_cfg)
    traj = traj.replace(over_turn=jnp.asarray([True, False, False, False]),
                        truncated=jnp.asarray([False, False, True, False]),
                        outcome=jnp.asarray(traj.outcome).at[:, 0].set(jnp.asarray([0.0, 1.0, 1.0, 0.0])))
    return setup, params, jax.device_get(traj)


@functools.cache
def _step(model_cfg, cfg: learner_lib.LearnerConfig):
    optimizer = optim.make_optimizer(1e-3, 0, 0.0, 0.0)
    return learner_lib.make_learner_step(model_cfg, cfg, optimizer), optimizer


def _update(setup, params, cfg, batch, epo=None):
    step, optimizer = _step(setup.model_cfg, cfg)
    state = learner_lib.TrainState(params=jax.tree.map(jnp.copy, params), opt_state=optimizer.init(params),
                                   ref_params=None, key=jax.random.key_data(jax.random.key(0))).with_extras(epo=epo)
    state, metrics = step(state, batch, jax.random.key(0))
    return np.asarray(ravel_pytree(state.params)[0]), jax.device_get(metrics), jax.device_get(state.extra("epo"))


def _batch(traj, over_turn_mask: bool):
    """The agent loop's learner batch of `traj` with trajectory-GRPO advantages as the loop computes them (the
    outcome z-scored in its group, the cut rows included)."""
    advantages, _ = inputs_lib.advantages(jnp.asarray(traj.outcome[:, 0]), jnp.asarray(traj.group_ids),
                                        jnp.asarray(traj.loss_mask, jnp.float32), name="grpo", num_groups=2, kwargs=())
    return episodes.learner_batch(traj, advantages, traj.behaviour_logp, over_turn_mask=over_turn_mask)


# --------------------------------------------------------------------------------------- over-turn masking


def test_over_turn_masked_trajectories_get_no_loss_but_stay_in_their_groups(record):
    setup, params, traj = record
    plain, masked = _batch(traj, False), _batch(traj, True)
    cut = np.asarray(traj.over_turn | traj.truncated)
    assert cut.tolist() == [True, False, True, False]  # row 0: turn cap; row 2: context limit
    mask, plain_mask = np.asarray(masked.completion_mask), np.asarray(plain.completion_mask)
    assert (mask[cut] == 0).all() and (np.asarray(masked.advantages)[cut] == 0).all() and plain_mask[cut].sum() > 0
    np.testing.assert_array_equal(mask[~cut], plain_mask[~cut])
    np.testing.assert_array_equal(np.asarray(masked.advantages)[~cut], np.asarray(plain.advantages)[~cut])
    # Groups {0, 1} and {2, 3}: scores (0, 1) and (1, 0). The advantages kept the cut row in its group:
    # A = ±(1 - 0.5) / std_unbiased(0, 1) = ±0.5 / sqrt(0.5) = ±0.7071 (a group without it would give 0).
    for row, expected in ((1, 0.5 / np.sqrt(0.5)), (3, -0.5 / np.sqrt(0.5))):
        on = plain_mask[row] > 0
        np.testing.assert_allclose(np.asarray(masked.advantages)[row][on], expected, rtol=1e-5)
    # No loss from the cut rows: the update ignores their advantages under the mask, not without it.
    noisy = np.where(cut[:, None], 50.0, np.asarray(masked.advantages)).astype(np.float32)
    base_params, base, _ = _update(setup, params, _cfg(), masked)
    noisy_params, noisy_metrics, _ = _update(setup, params, _cfg(), masked.replace(advantages=jnp.asarray(noisy)))
    np.testing.assert_array_equal(noisy_params, base_params)
    assert noisy_metrics["entropy"] == base["entropy"]
    unmasked_params, _, _ = _update(setup, params, _cfg(), plain)
    unmasked_noisy_params, _, _ = _update(setup, params, _cfg(), plain.replace(advantages=jnp.asarray(noisy)))
    assert np.abs(unmasked_noisy_params - unmasked_params).max() > 1e-5


def test_over_turn_mask_flag_masks_the_cut_trajectories_of_an_agent_step(epo_runs):
    """config.agent.over_turn_mask in collect_agent_rollouts: the rows the env cut at its turn cap get completion
    mask 0, the others keep their loss mask and advantages, and the masked fraction is logged."""
    config, _, _, setup = epo_runs
    state = state_lib.init_rl_state(config, setup_lib.initial_params(config, setup.model_cfg, jax.random.key(0)),
                                  optim.make_optimizer(1e-3, 0, 0.0, 0.0), jax.random.key(0))
    plain = agent.collect(config, setup, None, state, 0)
    masked = agent.collect(config.replace(agent={"over_turn_mask": True}), setup, None, state, 0)
    cut = np.asarray(plain.batch.completion_mask).sum(-1) != np.asarray(masked.batch.completion_mask).sum(-1)
    assert masked.host_metrics["over_turn_masked_frac"] == cut.mean() == plain.host_metrics["over_turn_frac"] > 0
    assert (np.asarray(masked.batch.completion_mask)[cut] == 0).all()
    np.testing.assert_array_equal(np.asarray(masked.batch.advantages)[~cut], np.asarray(plain.batch.advantages)[~cut])
    np.testing.assert_array_equal(np.asarray(masked.batch.completion_mask)[~cut],
                                  np.asarray(plain.batch.completion_mask)[~cut])


# ---------------------------------------------------------------------------------------------------- EPO


def test_epo_with_zero_coef_is_the_baseline_learner_step_and_the_update_extends_the_history(record):
    """coef 0 in the config: no EPO term and no EPO state (the learner program and checkpoint are the baseline's);
    coef 0 in the learner with a history: the same update, and the history grows by this batch's per-turn totals."""
    setup, params, traj = record
    config = config_lib.parse(agent_config())
    optimizer = optim.make_optimizer(1e-3, 0, 0.0, 0.0)
    assert config.agent.epo.coef == 0 and programs.learner_config(config).epo == ()
    assert state_lib.initial_state(config, setup, params, optimizer, jax.random.key(0)).extra("epo") is None
    config = config.replace(agent={"epo": {"coef": 0.001}})
    assert dict(programs.learner_config(config).epo)["coef"] == 0.001
    epo = state_lib.initial_state(config, setup, params, optimizer, jax.random.key(0)).extra("epo")
    assert epo.entropy_sums.shape == (setup.mt_cfg.max_turns,) == (4,) and not epo.token_counts.any()

    batch = _batch(traj, False)
    old_sums, old_counts = np.asarray([3.0, 2.0, 0.5, 0.0]), np.asarray([2.0, 1.0, 1.0, 0.0])
    history = epo_lib.EPOState(entropy_sums=jnp.asarray(old_sums), token_counts=jnp.asarray(old_counts),
                               step=jnp.int32(10))
    base_params, base, _ = _update(setup, params, _cfg(), batch)
    zero_cfg = _cfg(epo=_epo(coef=0.0, kappa_low=0.9, kappa_high=1.1))
    zero_params, zero, new_history = _update(setup, params, zero_cfg, batch, history)
    # Two programs (with and without the zero-weighted term) may round differently: the same update to float32
    # rounding (2e-7 measured under the tests' XLA flags, conftest.py), far below the update itself (lr 1e-3).
    np.testing.assert_allclose(zero_params, base_params, rtol=0, atol=1e-6)
    for key, value in base.items():
        assert float(zero[key]) == pytest.approx(float(value), rel=1e-5, abs=1e-7), key
    assert zero["epo/indicator_penalty"] > 0  # the corridor is on
    # The update's action tokens joined the history: per turn index exactly, and their entropy total is the
    # learner's token-mean entropy of the batch (before its update) times their number.
    counts = new_history.token_counts - old_counts
    assert counts.tolist() == [(traj.turn_id == k).sum() for k in range(4)] and counts.min() > 0
    sums = new_history.entropy_sums - old_sums
    np.testing.assert_allclose(sums.sum() / counts.sum(), base["entropy"], rtol=1e-5)
    assert (sums > 0).all() and int(new_history.step) == 10


# A hand-built batch: 4 rows of 10 tokens (9 completion positions); turn 0 then an observation then turn 1.
_TURN_ID = np.asarray([[-1, 0, 0, 0, -1, -1, 1, 1, -1],
                       [-1, 0, 0, -1, -1, 1, 1, 1, 1],
                       [-1, -1, 0, 0, 0, 0, -1, 1, -1],
                       [-1, 0, -1, -1, 1, 1, 1, -1, -1]], np.int32)


_TINY = ModelConfig(vocab_size=32, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8,
                    intermediate_size=32)


@functools.cache
def _tiny_params():
    """Perturbed init: next-token distributions far from uniform."""
    flat, unravel = ravel_pytree(init_params(_TINY, jax.random.key(0)))
    return unravel(flat + 0.3 * jax.random.normal(jax.random.key(1), flat.shape))


def _hand_batch() -> learner_lib.LearnerBatch:
    mask = (_TURN_ID >= 0).astype(np.float32)
    tokens = np.random.default_rng(0).integers(3, _TINY.vocab_size, (4, 10)).astype(np.int32)
    zeros = jnp.zeros(mask.shape, jnp.float32)
    return learner_lib.LearnerBatch(tokens=jnp.asarray(tokens), attention_mask=jnp.ones((4, 10), jnp.int32),
                                    completion_mask=jnp.asarray(mask), advantages=zeros, old_logp=zeros,
                                    sampler_logp=zeros, turn_id=jnp.asarray(_TURN_ID))


@functools.cache
def _grads_fn(cfg):
    return jax.jit(lambda state, batch: learner_lib.policy_gradients(_TINY, cfg, state, batch, jax.random.key(0)))


def _grads(mean_entropy: float, counts: float = 10.0):
    """Flat gradient and summed metrics of the learner's loss on the hand-built batch in micro-batches of 2 rows
    (zero advantages: the policy loss has no gradient; no KL, no entropy bonus: EPO alone, λ = 0.1, α = 0.5,
    c_s = 1, κ_l = 0.5, κ_r = 2), at RL step 75 of 150, with the history mean `mean_entropy` over `counts` tokens
    for both turn indices."""
    cfg = _cfg(entropy_coef=0.0, use_old_logp=False, epo=_epo(kappa_low=0.5), micro_batch_size=2)
    history = epo_lib.EPOState(entropy_sums=jnp.full((2,), counts * mean_entropy), token_counts=jnp.full((2,), counts),
                               step=jnp.int32(75))
    state = learner_lib.TrainState(params=_tiny_params(), opt_state=None, ref_params=None, key=None).with_extras(
        epo=history)
    pg = _grads_fn(cfg)(state, _hand_batch())
    return np.asarray(ravel_pytree(pg.grads)[0]), jax.device_get(pg.sums), np.asarray(pg.entropy)


def test_epo_hinge_gradient_through_the_learner_is_zero_inside_the_corridor_and_pushes_back_outside():
    """With no history yet EPO is its entropy bonus alone: g0 = -λ·∇agg(H). The hinge P = α·[relu(κ_l·H̄ − H) +
    relu(H − κ_r·H̄)] adds λ·c_s·w·∇agg(P), w = w(75; E = 150) = 1 − 0.2·(1 − e^{−2·75/75}) = 0.827067:
      every token inside (κ_l·H̄, κ_r·H̄)  ->  ∇P = 0           ->  g = g0
      every token above κ_r·H̄             ->  ∇P = α·∇H        ->  g = (1 − w·α)·g0   (entropy pushed down)
      every token below κ_l·H̄             ->  ∇P = −α·∇H       ->  g = (1 + w·α)·g0   (entropy pushed up)
    The metrics are whole-batch token means although the loss runs in micro-batches (agg_weights)."""
    w, alpha = 1 - 0.2 * (1 - np.exp(-2.0)), 0.5
    g0, sums0, entropy = _grads(1.0, counts=0.0)
    h = entropy[_TURN_ID >= 0]
    assert np.linalg.norm(g0) > 1e-4 and sums0["epo/indicator_penalty"] == 0
    np.testing.assert_allclose(sums0["epo/entropy"], np.mean(h), rtol=1e-5)
    assert 0.5 < h.min() and h.max() < 4 * h.min()  # one corridor (H̄/2, 2·H̄) can hold them all

    inside, sums_in, _ = _grads((h.max() / 2 + 2 * h.min()) / 2)
    np.testing.assert_allclose(inside, g0, rtol=1e-6, atol=1e-9)
    assert sums_in["epo/hinge_penalty"] == 0 and sums_in["epo/indicator_penalty"] == 0

    above, sums_above, _ = _grads(1e-3)  # corridor (5e-4, 2e-3): every entropy above it
    np.testing.assert_allclose(above, (1 - w * alpha) * g0, rtol=1e-4, atol=1e-8)
    np.testing.assert_allclose(sums_above["epo/hinge_penalty"], alpha * np.mean(h - 2e-3), rtol=1e-5)
    np.testing.assert_allclose(sums_above["epo/indicator_penalty"], alpha, rtol=1e-6)

    below, sums_below, _ = _grads(100.0)  # corridor (50, 200): every entropy below it
    np.testing.assert_allclose(below, (1 + w * alpha) * g0, rtol=1e-4, atol=1e-8)
    np.testing.assert_allclose(sums_below["epo/hinge_penalty"], alpha * np.mean(50.0 - h), rtol=1e-5)


# ----------------------------------------------------------------------------------- agent run and resume


def _records(workdir):
    from rl4llm.train import metrics as metrics_lib

    return {r["step"]: {k: v for k, v in r.items() if not k.startswith(("time/", "tokens_per_s"))}
            for r in metrics_lib.read_metrics(workdir, "rl")}


def test_epo_history_is_checkpointed_and_a_resumed_run_equals_the_uninterrupted_one(epo_runs):
    from rl4llm.train import checkpointing

    config, full, resumed, _ = epo_runs
    records = _records(full)
    first, second = records[1], records[2]
    # Step 1 had no history (no penalty); step 2's corridor is around step 1's per-turn means.
    assert first["epo/hinge_penalty"] == 0 and first["epo/indicator_penalty"] == 0
    assert second["epo/hinge_penalty"] > 0 and second["epo/indicator_penalty"] > 0
    np.testing.assert_allclose([first["epo/phase_weight"], second["epo/phase_weight"]],
                               [1.0, 1 - 0.2 * (1 - np.exp(-1.0))], rtol=1e-6)  # w(0), w(1) with E = 4
    assert sorted(_records(resumed)) == [2] and _records(resumed)[2] == second
    # The history is in the checkpoints: the resumed run's final one holds the uninterrupted run's.
    empty = epo_lib.init_state(config.agent.guess_number["max_turns"])
    histories = []
    for workdir in (full, resumed):
        ckpt = checkpointing.Checkpointer(os.path.join(workdir, "checkpoints", "rl"))
        histories.append([ckpt.restore_entry(step, "extras", {"epo": empty})[0]["epo"] for step in (1, 2)])
        ckpt.close()
    (after_1, after_2), (_, resumed_2) = histories
    assert 0 < after_1.token_counts.sum() < after_2.token_counts.sum()
    for a, b in zip(jax.tree.leaves(after_2), jax.tree.leaves(resumed_2)):
        np.testing.assert_array_equal(a, b)


def test_epo_config_errors_name_the_field():
    config = agent_config()
    config.agent.epo.update(coef=0.001, kappa_low=2.0, kappa_high=1.0, alpha=-0.1, total_epochs=0)
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.parse(config)
    assert "config.agent.epo.alpha=-0.1" in str(e.value)
    config.agent.epo.alpha = 0.1
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.parse(config)
    for field in ("config.agent.epo.kappa_high=1.0", "config.agent.epo.total_epochs=0"):
        assert field in str(e.value), field
    config.agent.epo.update(kappa_low=0.0, kappa_high=2.0, total_epochs=150)
    config_lib.parse(config)
