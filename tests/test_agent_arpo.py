"""ARPO entropy-triggered branching in the batched multi-turn rollout (sampling.multi_turn.BranchingConfig): branch
copies share their parent's record, KV-cache row and (cloned) env state up to the branch point and then go their own
way; every group ends with its N rollouts; with β = α = 0 nothing branches; an agent RL step runs with ARPO."""
from __future__ import annotations

import copy
import functools

import jax
import numpy as np
import pytest

from rl4llm import config as config_lib
from rl4llm.sampling import multi_turn
from rl4llm.train import logprobs as logprobs_lib
from tests.test_multi_turn import SAMPLING, _Result, model_cfg, params, tokenizer

N, M, GROUPS = 4, 2, 3  # rows per group, initial rollouts per group, groups
MT = multi_turn.MultiTurnConfig(max_turns=4, max_context=320, max_obs_tokens=6, obs_bucket=4, record_bucket=8,
                                turn_components=("reward", "valid_action"), outcome_components=("correct",))


class ToolEnv:
    """An action ending with "]" of odd length calls the "echo" tool, an even one calls nothing; the observation
    depends on the whole history (so an env that is not the parent's clone would show other text); the episode
    ends after an action whose length is a multiple of 4, or at the turn cap. Records what it saw."""

    action_stop_strings = ("]",)

    def __init__(self, seed: int):
        self.seed = seed
        self.actions: list[str] = []
        self.observations: list[str] = []

    def step(self, action_text: str) -> _Result:
        self.actions.append(action_text)
        obs = "ok" + "z" * ((sum(map(len, self.actions)) + self.seed) % 5) + ":"
        self.observations.append(obs)
        tool = "echo" if len(action_text) % 2 else ""
        return _Result(obs, 0.0, len(action_text) % 4 == 0, {"valid_action": action_text.endswith("]"),
                                                             "tool_name": tool})

    def outcome(self) -> dict:
        return {"correct": float(len(self.actions) % 2)}

    def clone(self) -> "ToolEnv":
        return copy.deepcopy(self)


@functools.cache
def arpo_rollout(branch_probability: float, entropy_weight: float):
    envs = [ToolEnv(seed=i // N) for i in range(N * GROUPS)]
    prompts = ["go" + "a" * (i // N) + ":" for i in range(N * GROUPS)]
    branching = multi_turn.BranchingConfig(initial_rollouts=M, entropy_weight=entropy_weight,
                                           branch_probability=branch_probability, entropy_tokens=4, entropy_top_k=3)
    traj = multi_turn.rollout(model_cfg(), params(), tokenizer(), envs, prompts, np.arange(N * GROUPS) // N,
                              jax.random.key(5), SAMPLING, MT, prompt_bucket=4, branching=branching)
    return jax.device_get(traj), envs, prompts


def _actions(traj, row) -> list[list[int]]:
    return [ids for kind, _, ids in multi_turn.turn_segments(traj, row) if kind == "action"]


def test_branch_copies_share_the_parents_record_and_env_state_up_to_the_branch():
    traj, envs, _ = arpo_rollout(1.0, 0.0)  # β = 1: every tool call branches while the group has free rows
    tok = tokenizer()
    copies = np.flatnonzero(traj.parent_id >= 0)
    assert len(copies) >= 3 and (traj.branch_turn[copies] >= 1).all()
    for row in copies:
        parent, k = int(traj.parent_id[row]), int(traj.branch_turn[row])
        assert traj.group_ids[parent] == traj.group_ids[row] and row % N >= M  # a free row of the parent's group
        # The shared prefix: prompt, the parent's first k actions and their observations, token for token, with
        # the parent's behaviour log-probs, turn ids and masks.
        shared = int(traj.turn_end[parent, k - 1]) + 1
        shared += len(multi_turn.truncate_middle(tok.encode(envs[parent].observations[k - 1]), MT.max_obs_tokens))
        for field in ("tokens", "behaviour_logp", "loss_mask", "turn_id", "obs_turn_id", "attention_mask"):
            np.testing.assert_array_equal(getattr(traj, field)[row, :shared], getattr(traj, field)[parent, :shared])
        np.testing.assert_array_equal(traj.turn_reward[row, :k], traj.turn_reward[parent, :k])
        # Branching happens only after a tool call (an odd-length action here).
        assert len(envs[parent].actions[k - 1]) % 2 == 1
        # The copy's env is the parent's clone at the branch point: the same history up to turn k ...
        assert envs[row].actions[:k] == envs[parent].actions[:k]
        assert envs[row].observations[:k] == envs[parent].observations[:k]
    # ... and then each env saw exactly its own row's actions and produced the observations in its record (a
    # shared, non-cloned env would hold both branches' later actions).
    for row, env in enumerate(envs):
        assert [tok.decode(ids) for ids in _actions(traj, row)] == env.actions
        obs = [ids for kind, _, ids in multi_turn.turn_segments(traj, row) if kind == "obs"]
        truncated = [multi_turn.truncate_middle(tok.encode(o), MT.max_obs_tokens) for o in env.observations]
        assert obs == truncated[:len(obs)]
    # The branches went their own way after the branch point.
    assert any(_actions(traj, row)[int(traj.branch_turn[row]):] != _actions(traj, int(traj.parent_id[row]))[
        int(traj.branch_turn[row]):] for row in copies)


@pytest.mark.parametrize("setting", [(1.0, 0.0), (0.0, 0.0)], ids=["always_branch", "never_branch"])
def test_every_row_reproduces_a_full_reprefill_and_every_group_has_n_rollouts(setting):
    """The sampler's log-probs of every row (branch copies continue from a copied KV-cache row; fresh rollouts start
    rounds late, after holes) equal ONE forward pass over the row's compact context; all N rows of every group
    played (no row left unstarted or truncated)."""
    traj, envs, _ = arpo_rollout(*setting)
    t = traj.tokens.shape[1]
    logp, _ = logprobs_lib.completion_logprobs(model_cfg(), params(), traj.tokens, traj.attention_mask, t - 1)
    mask = traj.loss_mask[:, 1:]
    np.testing.assert_allclose(np.where(mask, logp, 0.0), traj.behaviour_logp[:, 1:], atol=2e-5, rtol=0)
    assert np.bincount(traj.group_ids).tolist() == [N] * GROUPS
    assert (traj.num_turns >= 1).all() and not traj.truncated.any()
    assert all(len(env.actions) == n for env, n in zip(envs, traj.num_turns))


def test_no_branch_with_zero_probability_and_weight_then_free_rows_start_fresh():
    traj, envs, prompts = arpo_rollout(0.0, 0.0)  # clip(u − 0·ΔH, 0, 1) <= 0 never holds
    assert (traj.parent_id == -1).all() and (traj.branch_turn == 0).all()
    tok = tokenizer()
    # The free rows ran whole episodes of their own from the prompt.
    for row in range(N * GROUPS):
        assert multi_turn.turn_segments(traj, row)[0] == ("prompt", -1, tok.encode_prompt(prompts[row]))
    assert len({tuple(map(tuple, _actions(traj, r))) for r in range(N * GROUPS)}) > GROUPS * M


def _step_entropies(traj, num_tokens: int, top_k: int) -> np.ndarray:
    """H[b, k] = Σ_{first num_tokens action tokens of turn k} Σ_{top-k} −p·log p / log|V|, from one full forward
    over each row's context (temperature 1)."""
    from rl4llm.models import apply

    mask = traj.attention_mask.astype(np.int32)
    logits = apply(model_cfg(), params(), traj.tokens, np.maximum(np.cumsum(mask, -1) - 1, 0), mask)[0]
    top = np.asarray(jax.lax.top_k(jax.nn.log_softmax(logits, -1), top_k)[0])  # [B, T, k]
    per_token = -(np.exp(top) * top).sum(-1) / np.log(model_cfg().vocab_size)  # [B, T], predicting token t + 1
    h = np.zeros(traj.turn_valid.shape)
    for b, k in zip(*np.nonzero(traj.turn_valid)):
        start, end = traj.turn_start[b, k], traj.turn_end[b, k]
        h[b, k] = per_token[b, start - 1:min(end, start + num_tokens - 1)].sum()
    return h


def test_branch_decisions_follow_the_entropy_rise_since_the_rows_first_step():
    """β = 0, α = 10⁶: a row that called a tool branches iff its step entropy rose since its first step (its own first
    step after a branch, for a copy; so never on that first step, where ΔH = 0) and its group still has a free row
    (granted in row order; a fresh row starts once its group's tree ended, with every row taken). The entropies are
    recomputed from a full forward over the record."""
    traj, envs, _ = arpo_rollout(0.0, 1e6)
    h = _step_entropies(traj, num_tokens=4, top_k=3)
    copies = np.flatnonzero(traj.parent_id >= 0)
    branched = {(int(traj.parent_id[c]), int(traj.branch_turn[c]) - 1) for c in copies}
    decisions = 0
    for row in range(N * GROUPS):
        first = int(traj.branch_turn[row])  # the row's first own step (0 for rows that started at the prompt)
        group = np.flatnonzero(traj.group_ids == traj.group_ids[row])
        for k in range(first, int(traj.num_turns[row]) - 1):  # turns followed by an observation
            if len(envs[row].actions[k]) % 2 == 0:  # no tool call
                assert (row, k) not in branched
                continue
            fresh = traj.parent_id[row] < 0 and row % N >= M
            free = 0 if fresh else N - M - sum(
                int(traj.branch_turn[c]) - 1 < k or (int(traj.branch_turn[c]) - 1 == k and traj.parent_id[c] < row)
                for c in copies if c in group)
            rise = h[row, k] - h[row, first]
            if (row, k) in branched:
                assert rise > 0 and free > 0
            elif rise > 1e-4:  # u − 10⁶·ΔH <= 0 for every u: only a full group stops it
                assert free == 0
            decisions += 1
    assert len(branched) >= 1 and decisions > len(branched)


def test_branching_config_and_agent_config_errors_name_the_field():
    from tests.test_multi_turn import agent_config

    with pytest.raises(ValueError, match="beam_size"):
        multi_turn.BranchingConfig(initial_rollouts=2, beam_size=1)
    with pytest.raises(ValueError, match="initial_rollouts=4 must be < the rows of each group"):
        multi_turn.rollout(model_cfg(), params(), tokenizer(), [ToolEnv(0)] * 4, ["go:"] * 4, [0] * 4,
                           jax.random.key(0), SAMPLING, MT, branching=multi_turn.BranchingConfig(initial_rollouts=4))
    c = agent_config()
    c.agent.arpo.initial_rollouts = 2  # = num_generations
    c.agent.arpo.branch_probability = 1.5
    c.agent.arpo.entropy_tokens = 0
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.parse(c)
    for field in ("config.agent.arpo.initial_rollouts=2", "config.agent.arpo.branch_probability=1.5",
                  "config.agent.arpo.entropy_tokens=0"):
        assert field in str(e.value), field


def test_kg_search_agent_rl_step_runs_with_arpo(tmp_path):
    """configs/agent_kg_search.py on the nano model (1-hop questions, 2 turns) with ARPO: 2 of the 4 rollouts of a
    task start, then one SFT step and one GRPO step; every task keeps its 4 rollouts. (The untrained policy rarely
    writes a parsable search, so its free rows mostly start fresh: the branch mechanics are tested above.)"""
    from configs import agent_kg_search
    from rl4llm.train import job
    from rl4llm.train import metrics as metrics_lib

    c = agent_kg_search.get_config()
    c.model.preset = "nano"
    c.agent.kg_search.max_hops, c.agent.kg_search.max_turns = 1, 2
    c.agent.eval_tasks = 2
    c.agent.arpo.initial_rollouts = 2
    c.sft.steps, c.sft.batch_size, c.sft.warmup_steps = 1, 2, 0
    c.rl.steps, c.rl.num_prompts, c.rl.num_generations = 1, 2, 4
    c.eval.every, c.log_every, c.checkpoint.every = 1, 1, 1
    summary = job.run(c, str(tmp_path))
    (record,) = metrics_lib.read_metrics(str(tmp_path), "rl")
    assert summary["rl_steps"] == 1 and np.isfinite(record["loss/pg"])
    assert record["arpo/unstarted"] == 0
    assert record["arpo/branches"] + record["arpo/fresh"] == 2 * (4 - 2)
