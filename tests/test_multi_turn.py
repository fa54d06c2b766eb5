"""Multi-turn rollouts (rl4llm.sampling.multi_turn) and the agent trainer: exact token bookkeeping, observation
masking in the learner, incremental prefill vs a full re-prefill, and a short agent run with resume."""
from __future__ import annotations

import dataclasses
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
from rl4llm.sampling import SamplingConfig
from rl4llm.sampling import multi_turn
from rl4llm.tokenizers import sentencepiece_tokenizer
from rl4llm.train import agent
from rl4llm.train import episodes
from rl4llm.train import job
from rl4llm.train import learner as learner_lib
from rl4llm.train import logprobs as logprobs_lib
from rl4llm.train import optim

ALPHABET = "abcdefghijklmnopqrstuvwxyz<>/]0123456789 :=?!"


@dataclasses.dataclass
class _Result:
    obs_text: str
    reward: float
    done: bool
    info: dict


class EchoEnv:
    """A tiny env of ragged turns: an action ends with "]"; the observation's length depends on the action's
    length; the episode ends after an action whose length is a multiple of 3 (or at the turn cap). Records what it saw."""

    action_stop_strings = ("]",)

    def __init__(self, seed: int):
        self.seed = seed
        self.actions: list[str] = []
        self.observations: list[str] = []

    def step(self, action_text: str) -> _Result:
        self.actions.append(action_text)
        obs = "ok" + "z" * ((len(action_text) + self.seed) % 7) + ":"
        self.observations.append(obs)
        valid = action_text.endswith("]")
        return _Result(obs, float(valid), len(action_text) % 3 == 0, {"valid_action": valid})

    def outcome(self) -> dict:
        return {"correct": float(len(self.actions) % 2)}


@functools.cache
def tokenizer(tmp_dir: str = "/tmp/rl4llm_test_multi_turn") -> sentencepiece_tokenizer.Tokenizer:
    path = sentencepiece_tokenizer.train_tokenizer([ALPHABET], f"{tmp_dir}/echo")
    return sentencepiece_tokenizer.Tokenizer.load(path)


@functools.cache
def model_cfg() -> ModelConfig:
    return ModelConfig(vocab_size=tokenizer().vocab_size, hidden_size=32, num_layers=2, num_heads=4,
                       num_kv_heads=2, head_dim=8, intermediate_size=64, tie_embeddings=False)


@functools.cache
def params():
    """Perturbed init so next-token distributions are far from uniform; the "]" logit is raised a little so
    actions have ragged lengths (some stop early, some run to the cap)."""
    flat, unravel = ravel_pytree(init_params(model_cfg(), jax.random.key(0)))
    p = unravel(flat + 0.3 * jax.random.normal(jax.random.key(1), flat.shape))
    stop = tokenizer().encode("]")[0]
    p["lm_head"] = p["lm_head"].at[:, stop].add(0.15)
    return p


SAMPLING = SamplingConfig(max_new_tokens=6, temperature=1.0, stop_token_ids=(3,), pad_id=0)
MT = multi_turn.MultiTurnConfig(max_turns=4, max_context=160, max_obs_tokens=6, obs_bucket=4, record_bucket=8,
                                turn_components=("reward", "valid_action"), outcome_components=("correct",))
NUM_ENVS = 8


@functools.cache
def rollout_and_envs():
    envs = [EchoEnv(seed=i // 2) for i in range(NUM_ENVS)]
    prompts = ["go" + "a" * (i % 3) + ":" for i in range(NUM_ENVS)]
    traj = multi_turn.rollout(model_cfg(), params(), tokenizer(), envs, prompts, [i // 2 for i in range(NUM_ENVS)],
                              jax.random.key(3), SAMPLING, MT, prompt_bucket=4)
    return jax.device_get(traj), envs, prompts


def test_batch_is_ragged_not_vacuous():
    traj, envs, _ = rollout_and_envs()
    assert len(set(traj.num_turns.tolist())) > 1  # different numbers of turns
    lengths = {len(a) for e in envs for a in e.actions}
    assert len(lengths) > 2  # ragged action lengths
    assert traj.turn_reward[..., 1].any() and not traj.turn_reward[..., 1].all()  # some actions end with "]"


def test_turn_segments_concatenate_to_tokens_and_match_what_the_env_saw():
    traj, envs, prompts = rollout_and_envs()
    tok = tokenizer()
    for row, env in enumerate(envs):
        segments = multi_turn.turn_segments(traj, row)
        real = traj.tokens[row][traj.attention_mask[row]].tolist()
        assert sum((ids for _, _, ids in segments), []) == real
        assert segments[0] == ("prompt", -1, tok.encode_prompt(prompts[row]))
        actions = [s for s in segments if s[0] == "action"]
        obs = [s for s in segments if s[0] == "obs"]
        assert [tok.decode(ids) for _, _, ids in actions] == env.actions
        assert [k for _, k, _ in actions] == list(range(len(env.actions)))
        # Every observation but the terminal one is in the context, encoded alone and middle-truncated.
        assert [ids for _, _, ids in obs] == [multi_turn.truncate_middle(tok.encode(o), MT.max_obs_tokens)
                                             for o in env.observations[:len(obs)]]
        assert len(obs) == len(actions) - 1
        assert [kind for kind, _, _ in segments[1:]] == ["action", "obs"] * len(obs) + ["action"]
        assert int(traj.num_turns[row]) == len(env.actions)
        assert traj.over_turn[row] == (len(env.actions) == MT.max_turns and len(env.actions[-1]) % 3 != 0)


def test_turn_ids_starts_and_ends_for_ragged_turns():
    traj, envs, _ = rollout_and_envs()
    for row, env in enumerate(envs):
        position = 0
        for kind, turn, ids in multi_turn.turn_segments(traj, row):
            span = np.arange(position, position + len(ids))
            if kind == "action":
                assert traj.turn_start[row, turn] == span[0] and traj.turn_end[row, turn] == span[-1]
                assert (traj.turn_id[row, span] == turn).all() and traj.loss_mask[row, span].all()
                assert (traj.behaviour_logp[row, span] < 0).all()
            else:
                assert (traj.turn_id[row, span] == -1).all() and not traj.loss_mask[row, span].any()
                assert (traj.behaviour_logp[row, span] == 0).all()
                assert (traj.obs_turn_id[row, span] == turn).all()
            position += len(ids)
        k = len(env.actions)
        assert traj.turn_valid[row].tolist() == [True] * k + [False] * (MT.max_turns - k)
        assert (traj.turn_id[row, position:] == -1).all() and not traj.attention_mask[row, position:].any()
        expected = [[float(a.endswith("]"))] * 2 for a in env.actions] + [[0.0, 0.0]] * (MT.max_turns - k)
        np.testing.assert_array_equal(traj.turn_reward[row], expected)
        assert traj.outcome[row, 0] == k % 2


def test_incremental_prefill_equals_full_reprefill():
    """The sampler's log-probs (prefill, per-token cache writes, observation segments appended to the cache at
    shared slots with holes) equal those of ONE forward pass over each row's compact context."""
    traj, _, _ = rollout_and_envs()
    t = traj.tokens.shape[1]
    logp, _ = logprobs_lib.completion_logprobs(model_cfg(), params(), traj.tokens, traj.attention_mask, t - 1)
    mask = traj.loss_mask[:, 1:]
    np.testing.assert_allclose(np.where(mask, logp, 0.0), traj.behaviour_logp[:, 1:], atol=2e-5, rtol=0)
    assert mask.sum() > 40 and np.abs(traj.behaviour_logp).max() > 0.5


def test_appended_segment_logits_equal_full_forward_logits():
    """Next-token logits after an appended observation (the cache path) == full forward at that position."""
    tok = tokenizer()
    rows = [tok.encode_prompt("goa:"), tok.encode_prompt("go:")]
    obs = [tok.encode("okzz:"), tok.encode("ok:")]
    cfg = model_cfg()
    cache = multi_turn.init_cache(cfg, 2, 32)
    logits = jnp.zeros((2, cfg.vocab_size))
    prompt_tokens, prompt_mask = multi_turn._pad_segments(rows, 0, 8)
    cache, logits, positions = multi_turn.append_tokens(cfg, params(), cache, logits, jnp.zeros(2, jnp.int32),
                                                        prompt_tokens, prompt_mask, jnp.int32(0))
    obs_tokens, obs_mask = multi_turn._pad_segments(obs, 0, 8)
    cache, logits, positions = multi_turn.append_tokens(cfg, params(), cache, logits, positions, obs_tokens,
                                                        obs_mask, jnp.int32(8))
    for row in range(2):
        full = jnp.asarray([rows[row] + obs[row]])
        expected = multi_turn.unembed(cfg, params(), multi_turn.forward(
            cfg, params(), full, jnp.arange(full.shape[1])[None], jnp.ones_like(full))[0][0, -1])
        np.testing.assert_allclose(logits[row], expected, atol=2e-5, rtol=0)
    assert positions.tolist() == [len(rows[0]) + len(obs[0]), len(rows[1]) + len(obs[1])]


def test_stop_sequence_hand_cases():
    table = jnp.asarray(multi_turn.stop_sequence_table(((7, 8), (9,))))
    assert table.tolist() == [[7, 8], [-1, 9]]
    tokens = jnp.asarray([[1, 7, 8, 0], [7, 9, 0, 0], [8, 1, 0, 0]])
    assert multi_turn.ends_with_stop_sequence(tokens, jnp.int32(2), table).tolist() == [True, False, False]
    assert multi_turn.ends_with_stop_sequence(tokens, jnp.int32(1), table).tolist() == [False, True, False]
    # Position 0 alone: "8" is the end of (7, 8) but nothing precedes it in this turn.
    assert multi_turn.ends_with_stop_sequence(tokens, jnp.int32(0), table).tolist() == [False, False, False]
    assert multi_turn.truncate_middle(list(range(7)), 4) == [0, 1, 5, 6]
    assert multi_turn.truncate_middle(list(range(7)), 3) == [0, 1, 6]


# -------------------------------------------------------------------------------- observation masking


def _learner_batch(traj, advantages, seed=0):
    """The agent trainer's learner batch of a trajectory record (completion = every token after the first)."""

    return episodes.learner_batch(traj, advantages, old_logp=traj.behaviour_logp)


@functools.cache
def _learner():
    cfg = learner_lib.LearnerConfig(loss="ppo_clip", loss_kwargs=(), agg_mode="token-mean", kl_coef=0.1,
                                    kl_kind="k3", entropy_coef=0.01, temperature=1.0, micro_batch_size=0,
                                    logprob_chunk_size=16, use_old_logp=True)
    optimizer = optim.make_optimizer(1e-3, 0, 0.0, 0.0)
    return learner_lib.make_learner_step(model_cfg(), cfg, optimizer), optimizer


def _update(traj, advantages):
    step, optimizer = _learner()
    p = params()
    ref = jax.tree.map(lambda x: x * 0.9, p)
    state = learner_lib.TrainState(params=jax.tree.map(jnp.copy, p), opt_state=optimizer.init(p), ref_params=ref,
                                   key=jax.random.key_data(jax.random.key(0)))
    state, metrics = step(state, _learner_batch(traj, advantages), jax.random.key(0))
    return ravel_pytree(state.params)[0], jax.device_get(metrics)


def test_observation_tokens_get_no_loss_kl_or_entropy():
    """The update and every loss / KL / entropy metric are unchanged when (a) everything the batch holds at
    non-policy positions (advantages, old and sampler log-probs) is replaced by noise, and (b) an extra
    observation segment is appended after each row's last action (its tokens change the recomputed
    log-probs, KL and entropy at those positions, which must all be masked out)."""
    traj, _, _ = rollout_and_envs()
    rng = np.random.default_rng(0)
    advantages = np.where(traj.loss_mask, rng.normal(size=traj.tokens.shape), 0.0).astype(np.float32)
    base_params, base = _update(traj, advantages)

    noise = lambda x: np.where(traj.loss_mask, x, rng.normal(size=x.shape) * 5).astype(np.float32)  # noqa: E731
    noisy = traj.replace(behaviour_logp=noise(traj.behaviour_logp))
    params_a, metrics_a = _update(noisy, noise(advantages))

    tokens, attention = np.array(traj.tokens), np.array(traj.attention_mask)
    obs_turn = np.array(traj.obs_turn_id)
    for row in range(tokens.shape[0]):
        end = int(attention[row].sum())
        segment = tokenizer().encode("okz")[: tokens.shape[1] - end]  # what fits after the row's last action
        tokens[row, end:end + len(segment)] = segment
        attention[row, end:end + len(segment)] = True
        obs_turn[row, end:end + len(segment)] = int(traj.num_turns[row]) - 1
    assert (attention.sum(1) > np.asarray(traj.attention_mask).sum(1)).mean() > 0.5  # most rows got a segment
    appended = traj.replace(tokens=tokens, attention_mask=attention, obs_turn_id=obs_turn)
    params_b, metrics_b = _update(appended, advantages)
    for key in ("loss/pg", "loss/kl", "kl", "entropy", "grad_norm", "logp_gap_sampler_learner"):
        np.testing.assert_allclose(metrics_a[key], base[key], rtol=1e-5, atol=1e-7, err_msg=key)
        np.testing.assert_allclose(metrics_b[key], base[key], rtol=1e-5, atol=1e-7, err_msg=key)
    np.testing.assert_allclose(params_a, base_params, atol=1e-6)
    np.testing.assert_allclose(params_b, base_params, atol=1e-6)
    assert base["kl"] > 0 and base["entropy"] > 0  # the KL and entropy terms are on


# ------------------------------------------------------------------------------------------- agent trainer


def test_igpo_ground_truth_logprobs_are_the_teacher_forced_answer_after_each_turn():
    """ℓ[b, k] = mean log π(answer tokens | context before turn k + template prefix), by a direct full forward."""
    import types

    from rl4llm.models import apply

    traj, _, _ = rollout_and_envs()
    tok = tokenizer()
    setup = types.SimpleNamespace(
        tokenizer=tok, mt_cfg=MT,
        logprob_fn=jax.jit(functools.partial(logprobs_lib.completion_logprobs, model_cfg()),
                           static_argnames=("completion_len",)))
    answers = [f"{i}{i}" for i in range(NUM_ENVS)]
    gt = np.asarray(episodes.ground_truth_logprobs(setup, params(), traj, answers, "<a>{}]"))
    assert gt.shape == (NUM_ENVS, MT.max_turns + 1)
    full_logits = jax.jit(lambda seq, mask: apply(model_cfg(), params(), seq, jnp.cumsum(mask, -1) - 1, mask)[0][0])
    width = 128  # one compiled shape: each sequence right-padded (masked)
    for b in range(NUM_ENVS):
        k_b = int(traj.num_turns[b])
        assert (gt[b, k_b:] == 0).all()
        for k in range(k_b):
            context = traj.tokens[b, :traj.turn_start[b, k]].tolist() + tok.encode("<a>")
            answer = tok.encode(answers[b])
            seq = context + answer + tok.encode("]")
            logits = full_logits(jnp.asarray([seq + [0] * (width - len(seq))]), jnp.asarray([
                [1] * len(seq) + [0] * (width - len(seq))]))
            logp = jax.nn.log_softmax(logits[len(context) - 1:len(context) + len(answer) - 1], -1)
            expected = np.mean([logp[j, a] for j, a in enumerate(answer)])
            np.testing.assert_allclose(gt[b, k], expected, atol=2e-5)


def agent_config(**overrides):
    """A guess-the-number agent job that compiles and runs in seconds (nano model, 2 x 2 episodes per step)."""
    from configs import agent_guess_number

    c = agent_guess_number.get_config()
    c.model.preset = "nano"
    c.agent.guess_number.max_number = 15
    c.agent.guess_number.min_width = 4
    c.agent.guess_number.max_width = 8
    c.agent.guess_number.max_turns = 4
    c.agent.guess_number.test_fraction = 0.3
    c.agent.max_context = 192
    c.agent.max_obs_tokens = 16
    c.agent.eval_tasks = 4
    c.sft.steps = 2
    c.sft.batch_size = 4
    c.rl.steps = 2
    c.rl.num_prompts = 2
    c.rl.num_generations = 2
    c.eval.every = 2
    c.log_every = 1
    c.checkpoint.every = 1
    c.update_from_flattened_dict({f"rl.{k}": v for k, v in overrides.items()})
    return c


def test_sft_examples_train_only_the_experts_actions():

    config = agent_config()
    config.agent.expert_noise = 0.5
    config = config_lib.parse(config)
    setup = agent.build_setup(config, "/tmp/rl4llm_test_multi_turn/agent_sft")
    tokens, attention, loss = jax.device_get(agent.sft_batch(config, setup, 0))
    rng = np.random.default_rng([config.seed, 0])
    tok = setup.tokenizer
    explored = 0
    for row, task in enumerate(setup.source.train_tasks(0, config.sft.batch_size)):
        turns, trained = agent.expert_episode(setup, task, 0.5, rng)
        explored += trained.count(False)
        expected_text = task.prompt + "".join(a + o for a, o in turns[:-1]) + turns[-1][0]
        assert tok.decode(tokens[row][attention[row] > 0].tolist()) == expected_text
        trained_text = tok.decode(tokens[row, 1:][loss[row] > 0].tolist())
        assert trained_text == "".join(a for (a, _), t in zip(turns, trained) if t)
    assert explored > 0  # some turns were the exploration policy's: in the context, not trained


def test_igpo_agent_run_resumes_exactly(tmp_path):
    from rl4llm.train import metrics as metrics_lib

    def records(workdir):
        return {r["step"]: {k: v for k, v in r.items() if not k.startswith(("time/", "tokens_per_s", "step_s"))}
                for r in metrics_lib.read_metrics(workdir, "rl")}

    config = agent_config(advantage="igpo")
    full, resumed = str(tmp_path / "full"), str(tmp_path / "resumed")
    job.run(config, full)
    # The run as interrupted after RL step 1: its workdir with the SFT stage and RL checkpoint 1 only.
    shutil.copytree(full, resumed)
    shutil.rmtree(os.path.join(resumed, "checkpoints", "rl", "2"))
    os.remove(os.path.join(resumed, "metrics.jsonl"))
    summary = job.run(config, resumed)
    assert summary["rl_steps"] == 2 and sorted(records(resumed)) == [2]
    assert records(resumed)[2] == records(full)[2]
    assert {"eval/success", "eval/valid_action", "success", "num_turns", "loss/pg"} <= set(records(full)[2])


AGENT_RECIPES = ("agent_guess_number", "agent_kg_search")  # test_recipes checks every recipe file is run somewhere


def test_kg_search_recipe_runs_an_rl_step_with_turn_rewards(tmp_path):
    """configs/agent_kg_search.py on the nano model: one SFT step, one MT-GRPO step on G-RA gated turn rewards,
    a held-out evaluation."""
    from configs import agent_kg_search
    from rl4llm.train import metrics as metrics_lib

    c = agent_kg_search.get_config()
    c.model.preset = "nano"
    c.rl.advantage = "mt_grpo"
    c.agent.eval_tasks = 2
    c.sft.steps, c.sft.batch_size, c.sft.warmup_steps = 1, 2, 0
    c.rl.steps, c.rl.num_prompts, c.rl.num_generations = 1, 2, 2
    c.eval.every, c.log_every, c.checkpoint.every = 1, 1, 1
    c.agent.gated_rewards = True
    summary = job.run(c, str(tmp_path))
    (record,) = metrics_lib.read_metrics(str(tmp_path), "rl")
    assert summary["rl_steps"] == 1 and np.isfinite(record["loss/pg"])
    assert {"eval/success", "eval/valid_action", "num_turns", "g_ra/gate_open_frac"} <= set(record)


@pytest.mark.parametrize("advantage", ["mt_grpo", "grpo"])
def test_gated_rewards_by_hand(advantage):
    """G-RA (δ = 1): the turn rewards of the trajectory whose outcome is below the gate are zeroed; a turn-level
    estimator gets them per turn, a trajectory-level one the score outcome + Σ gated turn rewards."""

    c = agent_config(advantage=advantage)
    c.agent.gated_rewards = True
    outcome = np.array([1.0, 0.0])
    turn_rewards = np.array([[0.5, 0.25, 0.0], [1.0, 1.0, 0.0]])
    valid = np.array([[True, True, False], [True, True, False]])
    scores, turns, metrics = episodes.gate_turn_rewards(c, outcome, turn_rewards, valid)
    if advantage == "mt_grpo":
        np.testing.assert_allclose(scores, [1.0, 0.0])
        np.testing.assert_allclose(turns, [[0.5, 0.25, 0.0], [0.0, 0.0, 0.0]])
    else:
        np.testing.assert_allclose(scores, [1.75, 0.0])
        np.testing.assert_allclose(turns, turn_rewards)
    assert metrics == {"g_ra/gate_open_frac": 0.5, "g_ra/gated_turn_reward": 0.75 / 4}
    c.agent.gated_rewards = False
    scores, turns, metrics = episodes.gate_turn_rewards(c, outcome, turn_rewards, valid)
    assert scores is outcome and turns is turn_rewards and metrics == {}


def test_agent_config_errors_name_the_field():
    c = agent_config(advantage="prime")
    c.agent.turn_reward = "tool_succes:1"
    c.agent.max_context = 0
    c.agent.guess_number.max_turns = 1
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.parse(c)
    message = str(e.value)
    for field in ("config.rl.advantage='prime'", "config.agent.max_context=0", "guess_number", "max_turns=1"):
        assert field in message, field
    for advantage in ("grpo", "mt_grpo", "igpo", "gtpo"):
        config_lib.parse(agent_config(advantage=advantage))
    # inputs only the single-turn loop computes: ReMax's greedy baseline, PRIME's process rewards, CANON's entropies
    for advantage, needs in (("remax", "baseline_scores"), ("prime", "process_rewards"), ("canon", "seq_metric")):
        with pytest.raises(config_lib.ConfigError, match=f"config.rl.advantage='{advantage}': needs {needs}, "
                                                                 "which the agent loop does not provide"):
            config_lib.parse(agent_config(advantage=advantage))
