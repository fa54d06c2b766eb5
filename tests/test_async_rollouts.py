"""Asynchronous rollouts (rl.async_rollouts): the staleness schedule and its bound, the background pipeline,
decoupled PPO's importance weights, resume, validation, and an end-to-end run that still learns."""

import os
import shutil
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm import rewards
from rl4llm.train import async_rollouts
from rl4llm import config as config_lib
from rl4llm.train import logprobs
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import job
from rl4llm.train import learner as learner_lib
from rl4llm.train import optim
from rl4llm.train import preemption
from rl4llm.train import programs
from rl4llm.train import single_turn
from rl4llm.train import setup as setup_lib
from rl4llm.train import sft as sft_lib
from rl4llm.train import state as state_lib
from rl4llm.train import step as step_lib
from tests.test_train import _answer_is_even, _comparable, _rl_records, tiny_config


def test_generation_version_hand_cases():
    # v(s) = max(s - k, start, floor(s / C) * C)
    lags = lambda k, c, start=0, n=8: [  # noqa: E731
        s - async_rollouts.generation_version(s, start=start, max_staleness=k, flush_every=c) for s in range(start, n)
    ]
    assert lags(1, 0) == [0, 1, 1, 1, 1, 1, 1, 1]  # one-step off-policy: batch s+1 from the params of step s
    assert lags(2, 0) == [0, 1, 2, 2, 2, 2, 2, 2]
    assert lags(1, 2) == [0, 1, 0, 1, 0, 1, 0, 1]  # flushed at every checkpoint (C = 2)
    assert lags(2, 4) == [0, 1, 2, 2, 0, 1, 2, 2]  # s = 3: max(1, 0, 0) = 1, lag 2; s = 4: max(2, 0, 4) = 4
    assert lags(3, 4, start=4) == [0, 1, 2, 3]  # a (resumed) run starts flushed
    for k in (1, 2, 3):
        for c in (0, 1, 3, 5):
            versions = [async_rollouts.generation_version(s, start=0, max_staleness=k, flush_every=c) for s in range(20)]
            assert all(0 <= s - v <= k for s, v in enumerate(versions))
            assert versions == sorted(versions)


def test_check_staleness_bounds():
    assert async_rollouts.check_staleness(5, 5, 4, max_staleness=1) == 1
    assert async_rollouts.check_staleness(5, 5, 5, max_staleness=0) == 0
    with pytest.raises(async_rollouts.StaleRolloutsError, match="staleness 2.*max_staleness=1"):
        async_rollouts.check_staleness(5, 5, 3, max_staleness=1)
    with pytest.raises(async_rollouts.StaleRolloutsError, match="batch of step 4"):
        async_rollouts.check_staleness(5, 4, 4, max_staleness=1)
    with pytest.raises(async_rollouts.StaleRolloutsError, match="staleness -1"):  # from the future
        async_rollouts.check_staleness(5, 5, 6, max_staleness=1)


def _tiny_state(value: float):
    params = {"w": jnp.full((3,), value)}
    return learner_lib.TrainState(params=params, opt_state=(jnp.zeros(3),), ref_params=None,
                                          key=jnp.zeros(2, jnp.uint32))


def test_pipeline_collects_in_background_from_copied_snapshots_within_the_bound():
    """Versions published 0, 1, 2, ... (the learner's params after each step); the pipeline collects step s
    from version v(s) in another thread; the snapshot survives the learner donating its state."""
    k, end = 2, 7
    version_of = lambda s: async_rollouts.generation_version(s, start=0, max_staleness=k, flush_every=0)  # noqa
    seen = []

    def collect(snapshot, step, version):
        seen.append((step, version, float(snapshot.params["w"][0]), threading.current_thread().name))
        return step, version

    pipeline = async_rollouts.RolloutPipeline(collect, version_of, 0, end, max_in_flight=k + 1)
    donate = jax.jit(lambda s: s.replace(params={"w": s.params["w"] + 1}), donate_argnums=0)
    state = _tiny_state(0.0)
    pipeline.publish(state, 0)
    try:
        for step in range(end):
            assert pipeline.get(step) == (step, version_of(step))
            state = donate(state)  # the learner's update: the published version's buffers are donated
            pipeline.publish(state, step + 1)
    finally:
        pipeline.close()
    assert [s for s, *_ in seen] == list(range(end))
    assert [v for _, v, *_ in seen] == [0, 0, 0, 1, 2, 3, 4]
    assert [w for _, _, w, _ in seen] == [0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0]  # the snapshot of that version
    assert all(name.startswith("rollouts") for *_, name in seen)


def test_validation_names_the_fields():
    config = tiny_config(async_rollouts=True, max_staleness=0, tis_cap=2.0)
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.max_staleness=0: must be an integer >= 1"):
        config_lib.parse(config)
    config = tiny_config(async_rollouts=True)  # tis_cap stays 0
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.tis_cap=0\.0: asynchronous rollouts"):
        config_lib.parse(config)
    config = tiny_config(async_rollouts=True, tis_cap=2.0)
    config.distributed.initialize = True
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.async_rollouts=True: .*multi-host"):
        config_lib.parse(config)
    config_lib.parse(tiny_config(async_rollouts=True, max_staleness=3, tis_cap=2.0))


def _odd_length(completion: str, answer: str) -> float:
    del answer
    return float(len(completion) % 2)  # varies within a group even for an untrained policy


@pytest.mark.parametrize("ppo_epochs", [1, 2])
def test_stale_batch_gets_decoupled_ppo_weights(tmp_path, monkeypatch, ppo_epochs):
    """A batch generated by version 0 and learned at step 1 (after one update): the TIS weights use the
    proximal policy (version 1, the params the step starts from) over the sampler's log-probs,
    w = min(exp(logp_prox - logp_behav), cap); a synchronous learner or a too-stale batch is refused."""
    cap = 1.05
    monkeypatch.setitem(rewards.REWARDS, "odd_length", _odd_length)
    config = tiny_config(async_rollouts=True, tis_cap=cap, ppo_epochs=ppo_epochs, warmup_steps=0, learning_rate=1e-2)
    config.task.reward = "odd_length"
    config = config_lib.parse(config)
    setup = setup_lib.build_setup(config, str(tmp_path))
    try:
        optimizer = optim.make_optimizer(config.rl.learning_rate, 0, 0.0, config.rl.grad_clip)
        params = setup_lib.initial_params(config, setup.model_cfg, jax.random.key(0))
        state = state_lib.init_rl_state(config, params, optimizer, jax.random.key(1))
        rl_programs = programs.build_rl_programs(config, setup, optimizer)
        snapshot = async_rollouts.sampler_snapshot(state)
        batch0, batch1 = (single_turn.collect(config, setup, rl_programs, snapshot, s, params_version=0) for s in (0, 1))
        state, _ = step_lib.learn_on_rollouts(config, rl_programs, state, batch0, 0)
        # π_prox: the learner's log-probs under version 1; π_behav: the sampler's, under version 0.
        prox_logp, _ = logprobs.completion_logprobs(
            setup.model_cfg, state.params, batch1.batch.tokens, batch1.batch.attention_mask,
            completion_len=config.sampling.max_new_tokens, temperature=config.sampling.temperature,
        )
        mask = batch1.batch.completion_mask
        expected = np.minimum(np.exp(prox_logp - batch1.batch.sampler_logp), cap)
        expected_mean = float((expected * mask).sum() / mask.sum())
        assert abs(expected_mean - 1.0) > 1e-3  # the versions differ enough for the test to mean something
        sync = config_lib.parse(tiny_config(tis_cap=cap, ppo_epochs=ppo_epochs))
        with pytest.raises(async_rollouts.StaleRolloutsError, match="staleness 1"):
            step_lib.learn_on_rollouts(sync, rl_programs, state, batch1, 1)
        _, metrics = step_lib.learn_on_rollouts(config, rl_programs, state, batch1, 1)
        assert metrics["async/staleness"] == 1.0
        np.testing.assert_allclose(metrics["is_weight"], expected_mean, rtol=1e-4)
    finally:
        setup.rewards.close()


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory):
    """One SFT warm start (120 steps, as test_train's learning test) shared by the async runs below."""
    workdir = str(tmp_path_factory.mktemp("warm"))
    config = _learning_config()
    config.task.reward = tiny_config().task.reward  # SFT does not score; the test reward is registered per test
    config = config_lib.parse(config)
    setup = setup_lib.build_setup(config, workdir)
    try:
        sft_lib.run_sft(config, setup, single_turn, jax.random.key(config.seed), metrics_lib.MetricsWriter(workdir),
                        workdir, preemption.StopSignal())  # not entered: no signal handler, never stops
    finally:
        setup.rewards.close()
    return workdir


def _learning_config(**rl):
    config = tiny_config(steps=30, num_prompts=8, num_generations=8, learning_rate=3e-3, async_rollouts=True,
                         max_staleness=1, tis_cap=2.0)
    config.rl.update(rl)
    config.task.reward = "answer_is_even"
    config.sft.steps = 120
    config.sft.learning_rate = 1e-2
    config.eval.every = 30
    config.checkpoint.every = 30
    return config


def _from_warm_start(warm: str, workdir: str) -> str:
    for name in ("tokenizer", os.path.join("checkpoints", "sft")):
        shutil.copytree(os.path.join(warm, name), os.path.join(workdir, name))
    return workdir


@pytest.fixture
def even_reward(monkeypatch):
    monkeypatch.setitem(rewards.REWARDS, "answer_is_even", _answer_is_even)


def test_async_run_learns_within_the_staleness_bound_and_resumes(tmp_path, warm_start, even_reward):
    """Asynchronous GRPO (max_staleness 2, TIS cap 2) from the shared warm start: the per-step lags follow the
    schedule (never above 2, flushed at the checkpoints every 14 steps); the training reward (the final answer
    is even, as test_train's synchronous learning test) rises within 30 steps; interrupted after the step-28
    checkpoint and resumed, steps 29 and 30 equal the uninterrupted run's (the in-flight batches regenerated)."""
    config = _learning_config(max_staleness=2)
    config.checkpoint.every = 14
    full = _from_warm_start(warm_start, str(tmp_path / "full"))
    job.run(config, full)
    records = _rl_records(full)
    lags = [records[s]["async/staleness"] for s in range(1, 31)]
    assert lags == [0, 1] + [2] * 12 + [0, 1] + [2] * 12 + [0, 1]  # v(s) = max(s - 2, 14 * floor(s / 14))
    rewards_by_step = [records[s]["reward"] for s in range(1, 31)]
    first, last = np.mean(rewards_by_step[:5]), np.mean(rewards_by_step[-5:])
    assert last > first + 0.2, rewards_by_step
    resumed = str(tmp_path / "resumed")  # as if interrupted after step 28: the checkpoints up to 28
    shutil.copytree(full, resumed, ignore=lambda d, names: ["30"] if d.endswith(os.path.join("checkpoints", "rl")) else [])
    os.remove(os.path.join(resumed, "metrics.jsonl"))
    job.run(config, resumed)
    assert sorted(_rl_records(resumed)) == [29, 30]
    for step in (29, 30):
        assert _comparable(_rl_records(resumed)[step]) == _comparable(records[step]), step
