"""A critic in the multi-turn agent loop (rl4llm.train.agent with rl.advantage="bilevel_gae" / "gae"):
the critic's values read at the right record positions, RAGEN's bi-level GAE on them, returns and advantages only
on policy tokens, critic and policy both trained, and an exact resume with the critic's state."""
from __future__ import annotations

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm import models
from rl4llm.models import value_head
from rl4llm.models.decoder import forward, positions_from_mask
from rl4llm.rl import advantages as advantages_lib
from rl4llm.rl import multi_turn as multi_turn_rl
from rl4llm.rl import registry
from rl4llm.train import agent
from rl4llm.train import episodes
from rl4llm.train import job
from rl4llm.train import optim
from rl4llm.train import setup as setup_lib
from rl4llm.train import state as state_lib
from rl4llm.train import checkpointing
from rl4llm import config as config_lib
from rl4llm.train.companions import critic as critic_lib
from rl4llm.train import metrics as metrics_lib
from tests.test_multi_turn import agent_config

LAM, TURN_GAMMA = 0.5, 0.9  # lam < 1: returns bootstrap from the values (with lam = 1 and no reward they are all 0)


def critic_config(critic_checkpoint: str = "", *, shared_trunk: bool = True):
    """bilevel_gae on the nano guess_number job: no SFT step (RL from the random init, evaluated as the warm start),
    2 RL steps at full learning rate, a checkpoint after each; every record max_context wide (one learner shape: one compilation of each step). The end-to-end runs use
    a shared-trunk critic (one joint step to compile); the separate critic is checked at collection."""
    c = agent_config(advantage="bilevel_gae")
    c.sft.steps = 0
    c.rl.warmup_steps = 0
    c.agent.record_bucket = c.agent.max_context
    c.rl.advantage_kwargs.lam = LAM
    c.rl.advantage_kwargs.turn_gamma = TURN_GAMMA
    c.critic.shared_trunk = shared_trunk
    c.critic.checkpoint = critic_checkpoint
    return c


def _records(workdir):
    return {r["step"]: {k: v for k, v in r.items() if not k.startswith(("time/", "tokens_per_s", "step_s"))}
            for r in metrics_lib.read_metrics(workdir, "rl")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A full run and the same run resumed from its RL checkpoint 1, and the path of a separate critic. Critics
    start from checkpoints with a random head (a zero head gives V = 0 and, with the nano model's all-invalid
    actions, all-zero advantages)."""
    root = tmp_path_factory.mktemp("agent_critic")
    full, resumed = str(root / "full"), str(root / "resumed")
    setup = agent.build_setup(config_lib.parse(critic_config()), full)  # trains and caches the tokenizer in `full`
    key_trunk, key_head = jax.random.split(jax.random.key(7))
    head = {"kernel": 0.3 * jax.random.normal(key_head, (setup.model_cfg.hidden_size,)), "bias": jnp.float32(0.2)}
    value_head.save_critic(str(root / "head"), {"head": head})
    value_head.save_critic(str(root / "separate"), {"trunk": models.init_params(setup.model_cfg, key_trunk),
                                                    "head": head})
    config = critic_config(str(root / "head"))
    job.run(config, full)
    # The run as interrupted after RL step 1: its workdir with the SFT stage and RL checkpoint 1 only.
    shutil.copytree(full, resumed)
    shutil.rmtree(os.path.join(resumed, "checkpoints", "rl", "2"))
    os.remove(os.path.join(resumed, "metrics.jsonl"))
    job.run(config, resumed)
    return config_lib.parse(config), setup, full, resumed, str(root / "separate")


def _templates(config, setup):
    """The policy params' shapes and `config`'s initial critic state (CriticState, from config.critic.checkpoint)."""
    params = models.init_params(setup.model_cfg, jax.random.key(0))
    return params, critic_lib.init_critic_state(config, setup.model_cfg, params, critic_lib.make_critic_optimizer(config))


def _restore(workdir, stage, step, name, target):
    ckpt = checkpointing.Checkpointer(os.path.join(workdir, "checkpoints", stage))
    if name == "params":
        entry, _ = ckpt.restore_entry(step, name, target)
    else:  # a companion's state: TrainState.extras[name]
        entry = ckpt.restore_entry(step, "extras", {name: target})[0][name]
    ckpt.close()
    return entry


def _changed(a, b) -> bool:
    return any(not np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_critic_and_policy_are_both_trained(runs):
    config, setup, full, _, _ = runs
    params_t, critic_t = _templates(config, setup)
    sft = _restore(full, "sft", config.sft.steps, "params", params_t)
    policy = [_restore(full, "rl", s, "params", params_t) for s in (1, 2)]
    heads = [_restore(full, "rl", s, "critic", critic_t).params["head"] for s in (1, 2)]
    assert _changed(sft, policy[0]) and _changed(policy[0], policy[1])
    assert _changed(critic_t.params["head"], heads[0]) and _changed(heads[0], heads[1])
    for record in _records(full).values():
        assert record["critic/vf_loss"] > 0 and record["critic/grad_norm"] > 0 and record["grad_norm"] > 0


def test_resume_continues_exactly_with_the_critic(runs):
    config, setup, full, resumed, _ = runs
    records = _records(resumed)
    assert sorted(records) == [2] and records[2] == _records(full)[2]
    assert {"critic/vf_loss", "critic/values_mean", "critic/vf_explained_var", "loss/pg"} <= set(records[2])
    params_t, critic_t = _templates(config, setup)
    for name, target in (("params", params_t), ("critic", critic_t)):
        a, b = (_restore(w, "rl", 2, name, target) for w in (full, resumed))
        assert not _changed(a, b), name


def _values_by_hand(setup, critic_params, policy_params, tokens, attention):  # [B, T]
    """V[b, t] = w·h[b, t-1] + bias: the trunk's final hidden state just before token t; V[:, 0] = 0."""
    trunk = critic_params.get("trunk", policy_params)
    hidden, _ = forward(setup.model_cfg, trunk, tokens, positions_from_mask(attention), attention)
    values = hidden @ critic_params["head"]["kernel"] + critic_params["head"]["bias"]
    return np.pad(np.asarray(values)[:, :-1], ((0, 0), (1, 0)))


@pytest.mark.parametrize("shared_trunk", [True, False])
def test_estimators_get_the_critics_values_at_the_record_positions(runs, shared_trunk):
    """RL step 1 collected from checkpoint 1's policy (with the run's shared-trunk critic, or a separate one): the
    advantages, returns and rollout values are bilevel_gae (and gae) of the critic's values computed by hand, and
    zero off the loss mask."""
    run_config, setup, full, _, separate = runs
    params_t, critic_t = _templates(run_config, setup)
    params = _restore(full, "rl", 1, "params", params_t)
    config = run_config if shared_trunk else config_lib.parse(critic_config(separate, shared_trunk=False))
    critic = _restore(full, "rl", 1, "critic", critic_t) if shared_trunk else _templates(config, setup)[1]
    optimizer = optim.make_optimizer(config.rl.learning_rate, 0, 0.0, 1.0)  # unused by the collection
    state = state_lib.init_rl_state(config, params, optimizer, jax.random.key(config.seed)).with_extras(critic=critic)
    rollouts = agent.collect(config, setup, None, state, 1)
    batch, cb = rollouts.batch, rollouts.critic_batch
    # The same episodes again (the step's key and tasks), for the turn layout.
    step_key = jax.random.fold_in(jax.random.wrap_key_data(state.key), 1)
    tasks = setup.source.train_tasks(setup_lib.RL_DATA_OFFSET + 1, config.rl.num_prompts)
    traj = jax.device_get(episodes.run_episodes(setup, state.params, tasks, config.rl.num_generations,
                                                     config.rl.num_prompts, step_key, setup.rollout_cfg))
    np.testing.assert_array_equal(traj.tokens, batch.tokens)
    loss = traj.loss_mask.astype(np.float32)  # [B, T]
    off = loss[:, 1:] == 0
    assert (traj.obs_turn_id >= 0).sum() > 0 and off.sum() > 0  # observation tokens are in the record

    values = _values_by_hand(setup, critic.params, params, traj.tokens, traj.attention_mask.astype(np.int32))
    assert values[loss > 0].std() > 0.05  # the critic's values vary: a misaligned read would show
    scores = episodes.weighted(traj.outcome, setup.outcome_weights)
    turn_rewards = episodes.weighted(traj.turn_reward, setup.turn_weights) * traj.turn_valid
    layout = dict(turn_rewards=turn_rewards, turn_id=traj.turn_id, turn_end=traj.turn_end, turn_valid=traj.turn_valid)

    def bilevel(v):
        return multi_turn_rl.bilevel_gae(scores, loss, v, **layout, lam=LAM, turn_gamma=TURN_GAMMA)

    adv, returns = bilevel(values)
    np.testing.assert_allclose(batch.advantages, np.asarray(adv)[:, 1:] * loss[:, 1:], atol=1e-5)
    np.testing.assert_allclose(cb.returns, np.asarray(returns)[:, 1:] * loss[:, 1:], atol=1e-5)
    np.testing.assert_allclose(cb.old_values, values[:, 1:] * loss[:, 1:], atol=1e-5)
    np.testing.assert_array_equal(cb.completion_mask, loss[:, 1:])  # the value loss's mask: no loss on observations
    shifted, _ = bilevel(np.roll(values, 1, axis=1))  # values read one position late: other advantages
    assert not np.allclose(batch.advantages, np.asarray(shifted)[:, 1:] * loss[:, 1:], atol=1e-3)
    # Zero off the loss mask (prompt, observations, padding); not vacuous on it.
    for name, x in (("advantages", batch.advantages), ("returns", cb.returns), ("old_values", cb.old_values)):
        assert np.all(np.asarray(x)[off] == 0), name
        assert np.abs(np.asarray(x)[~off]).max() > 1e-3, name
    if not shared_trunk:
        return
    # Plain token-level GAE over the whole context: outcome on the last action token, same values.
    gae_config = critic_config(config.critic.checkpoint)
    gae_config.rl.advantage = "gae"
    gae_config.rl.advantage_kwargs.turn_gamma = None
    gae = agent.collect(config_lib.parse(gae_config), setup, None, state, 1)
    expected, expected_returns = advantages_lib.gae(registry.last_token_rewards(jnp.asarray(scores), loss), values,
                                                    loss, lam=LAM)
    np.testing.assert_allclose(gae.batch.advantages, np.asarray(expected)[:, 1:] * loss[:, 1:], atol=1e-5)
    np.testing.assert_allclose(gae.critic_batch.returns, np.asarray(expected_returns)[:, 1:] * loss[:, 1:], atol=1e-5)


def test_agent_critic_config_validation():
    for advantage in ("bilevel_gae", "gae"):
        config_lib.parse(agent_config(advantage=advantage))
    c = agent_config(advantage="bilevel_gae")
    c.rl.advantage_kwargs.turn_gamma = 1.5
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.advantage_kwargs\.turn_gamma=1\.5: must lie"):
        config_lib.parse(c)
