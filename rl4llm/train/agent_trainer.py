"""Multi-turn agent training: SFT warm start on the env's scripted expert trajectories, then RL on the env.

`run(config, workdir)` is what `experiments/train.py` calls when `config.agent.env` names an env
(`rl4llm.envs.ENVS`). It reuses the main job's stages (`trainer.run_sft`, `trainer.run_rl`: Orbax checkpoints
and resume, metrics writer, learner step, PPO epochs / minibatches, adaptive controllers) with the agent's
batches, RL step and evaluation:

* SFT: each example is an episode of the env's scripted expert (with probability `agent.expert_noise` a turn is
  played by the env's exploration policy instead: it stays in the context, without loss). The sequence is
  encoded exactly as a rollout encodes it (prompt, then each action's tokens and each observation encoded alone),
  and the loss is on the expert's action tokens, plus `agent.sft_observation_weight` x the next-token loss on the
  observation tokens (an auxiliary world-model loss: observations echo and list entity names, which teaches the
  model to copy names from its context; RL never puts loss on observations).
* RL step (`collect_agent_rollouts` then `trainer.learn_on_rollouts`): `num_prompts` tasks x `num_generations`
  envs (a group shares task and env seed), batched multi-turn rollouts (`sampling.multi_turn.rollout`), the
  outcome score `agent.outcome_reward` and per-turn rewards `agent.turn_reward` (weighted sums of the env's
  components), IGPO's teacher-forced ground-truth log-probs when the estimator needs them, advantages by
  registry name (`grpo` = trajectory-level; `mt_grpo`, `igpo`, `gtpo`: turn-level, `rl.multi_turn`), and a
  LearnerBatch whose completion mask is the loss mask over the whole multi-turn context.
  Critics (`bilevel_gae`: RAGEN's turn- then token-level GAE; `gae`: token-level over the whole context, the outcome
  on the last action token, turn rewards unused): the main job's value model (`train.critic`, `config.critic`) reads
  the record, and a CriticBatch of returns on the policy tokens trains it.
* Evaluation: greedy episodes on the env's held-out tasks: success rate, action validity, tool success.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
import types

import jax
import jax.numpy as jnp
import numpy as np

from rl4llm import envs as envs_lib
from rl4llm import sampling
from rl4llm.envs import base as env_base
from rl4llm.rewards import combine as combine_lib
from rl4llm.rl import multi_turn as turn_kernels
from rl4llm.rl import registry
from rl4llm.sampling import multi_turn
from rl4llm.train import config_validation
from rl4llm.train import critic as critic_lib
from rl4llm.train import epo as epo_lib
from rl4llm.train import learner as learner_lib
from rl4llm.train import logprobs as logprobs_lib
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import trainer

# ------------------------------------------------------------------------------------------ setup


@dataclasses.dataclass(frozen=True)
class AgentSetup(trainer.Setup):
    """What the agent stages share, built once from the config. A `trainer.Setup` (so the main job's stages run on
    it: `model_cfg`, `tokenizer`, `rollout_cfg`; its single-turn task, eval examples and reward pipeline are None)
    with the env's task source, policies and the multi-turn settings."""

    source: env_base.TaskSource = None
    explore: env_base.Policy = None
    greedy_cfg: sampling.SamplingConfig = None
    mt_cfg: multi_turn.MultiTurnConfig = None
    eval_tasks: tuple = ()
    turn_weights: tuple = ()  # ((component index, weight), ...) into mt_cfg.turn_components
    outcome_weights: tuple = ()  # ((component index, weight), ...) into mt_cfg.outcome_components
    logprob_fn: object = None  # `logprob_program`: (params, tokens [N, L], attention [N, L], completion_len)
    branching: multi_turn.BranchingConfig | None = None  # ARPO rollouts (config.agent.arpo); None = plain


def _weights(spec: str, names: tuple[str, ...]) -> tuple:
    return tuple((names.index(name), w) for name, w in combine_lib.parse_weights(spec).items())


@functools.lru_cache(maxsize=None)
def logprob_program(model_cfg, temperature: float, chunk_size: int):
    """Jitted `(params, tokens [N, L], attention [N, L], completion_len) -> (logp, entropy) [N, completion_len]`
    (`logprobs.completion_logprobs`), one per model and settings (runs in one process share its compilations)."""
    return jax.jit(functools.partial(logprobs_lib.completion_logprobs, model_cfg, temperature=temperature,
                                     chunk_size=chunk_size), static_argnames=("completion_len",))


def build_agent_setup(config, workdir: str) -> AgentSetup:
    """Env task source, tokenizer (trained on expert transcripts, cached in the workdir), model and sampler configs."""
    agent = config.agent
    entry = envs_lib.ENVS[agent.env]
    env_cfg = envs_lib.build_config(agent.env, agent[agent.env], config.seed)
    source = entry.source(env_cfg)
    tokenizer = trainer.model_tokenizer(config, workdir, types.SimpleNamespace(name=agent.env, source=source))
    model_cfg = trainer.model_config(config, tokenizer.vocab_size)
    rollout_cfg = sampling.SamplingConfig(
        max_new_tokens=agent.max_action_tokens, temperature=config.sampling.temperature,
        top_k=config.sampling.top_k, top_p=config.sampling.top_p,
        stop_token_ids=tokenizer.stop_token_ids, pad_id=tokenizer.pad_id)
    env = source.env()
    mt_cfg = multi_turn.MultiTurnConfig(
        max_turns=env.max_turns, max_context=agent.max_context, max_obs_tokens=agent.max_obs_tokens,
        obs_bucket=agent.obs_bucket, record_bucket=agent.record_bucket,
        turn_components=tuple(env.turn_reward_keys), outcome_components=tuple(env.outcome_keys))
    logprob_fn = logprob_program(model_cfg, config.sampling.temperature or 1.0, config.rl.logprob_chunk_size)
    arpo = agent.arpo
    branching = None if arpo.initial_rollouts == 0 else multi_turn.BranchingConfig(
        initial_rollouts=arpo.initial_rollouts, entropy_weight=arpo.entropy_weight,
        branch_probability=arpo.branch_probability, beam_size=arpo.beam_size, entropy_tokens=arpo.entropy_tokens,
        entropy_top_k=arpo.entropy_top_k)
    return AgentSetup(
        task=None, eval_examples=(), eval_spec=None, score_fn=None, rewards=None, tokenizer=tokenizer,
        model_cfg=model_cfg, source=source, explore=entry.explore(env_cfg),
        rollout_cfg=rollout_cfg, greedy_cfg=dataclasses.replace(rollout_cfg, temperature=0.0, top_k=0, top_p=1.0),
        mt_cfg=mt_cfg, eval_tasks=tuple(source.test_tasks(agent.eval_tasks)),
        turn_weights=_weights(agent.turn_reward, mt_cfg.turn_components),
        outcome_weights=_weights(agent.outcome_reward, mt_cfg.outcome_components), logprob_fn=logprob_fn,
        branching=branching)


# ------------------------------------------------------------------------------------------ SFT


def encode_episode(tokenizer, task: env_base.TaskSpec, turns, trained: list[bool], max_obs_tokens: int,
                   observation_weight: float = 0.0) -> tuple[list[int], list[float]]:
    """An episode's tokens as a rollout writes them (prompt; each action; each observation but the last, encoded
    alone and middle-truncated) and its loss weights: 1 on the tokens of the actions with `trained[k]`,
    `observation_weight` on the observation tokens (SFT's auxiliary next-observation loss), 0 elsewhere."""
    ids, loss = list(tokenizer.encode_prompt(task.prompt)), [0.0]
    loss *= len(ids)
    for k, (action, obs) in enumerate(turns):
        action_ids = tokenizer.encode(action)
        ids += action_ids
        loss += [float(trained[k])] * len(action_ids)
        if k + 1 < len(turns):
            obs_ids = multi_turn.truncate_middle(tokenizer.encode(obs), max_obs_tokens)
            ids += obs_ids
            loss += [observation_weight] * len(obs_ids)
    return ids, loss


def expert_episode(setup: AgentSetup, task: env_base.TaskSpec, noise: float, rng: np.random.Generator):
    """One episode of the noisy expert: (turns, trained) where trained[k] says turn k was the expert's."""
    trained: list[bool] = []

    def policy(task, turns, rng):
        explore = rng.random() < noise
        trained.append(not explore)
        return (setup.explore if explore else setup.source.expert)(task, turns, rng)

    turns = env_base.play(setup.source.env(), task, 0, policy, rng)
    return turns, trained


def sft_batch(config, setup: AgentSetup, step: int):
    """Tokens [N, L], attention mask [N, L] and loss mask [N, L-1] (completion = every token after the first) of
    SFT step `step`: `sft.batch_size` expert episodes of the step's training tasks (a pure function of step)."""
    rng = np.random.default_rng([config.seed, step])
    rows = []
    for task in setup.source.train_tasks(step, config.sft.batch_size):
        turns, trained = expert_episode(setup, task, config.agent.expert_noise, rng)
        rows.append(encode_episode(setup.tokenizer, task, turns, trained, setup.mt_cfg.max_obs_tokens,
                                   config.agent.sft_observation_weight))
    width = sampling.bucket_length(max(len(ids) for ids, _ in rows), setup.mt_cfg.record_bucket)
    tokens = np.full((len(rows), width), setup.tokenizer.pad_id, np.int32)
    attention = np.zeros((len(rows), width), np.int32)
    loss = np.zeros((len(rows), width), np.float32)
    for i, (ids, mask) in enumerate(rows):
        tokens[i, :len(ids)], attention[i, :len(ids)], loss[i, :len(ids)] = ids, 1, mask
    return jnp.asarray(tokens), jnp.asarray(attention), jnp.asarray(loss[:, 1:])


# ------------------------------------------------------------------------------------------- rollouts


def run_episodes(setup: AgentSetup, params, tasks, group_size: int, env_seed: int, key,
                 sampling_cfg: sampling.SamplingConfig, branching: multi_turn.BranchingConfig | None = None
                 ) -> multi_turn.Trajectories:
    """`group_size` envs per task (a group shares the task and the env seed), rolled out together (with ARPO
    `branching`: M per task start, the others are branch copies or later fresh rollouts)."""
    envs, prompts = [], []
    for g, task in enumerate(tasks):
        for _ in range(group_size):
            env = setup.source.env()
            prompts.append(env.reset(task, env_seed + g)[0])
            envs.append(env)
    group_ids = np.repeat(np.arange(len(tasks)), group_size)
    return multi_turn.rollout(setup.model_cfg, params, setup.tokenizer, envs, prompts, group_ids, key, sampling_cfg,
                              setup.mt_cfg, branching=branching)


def weighted(values: np.ndarray, weights: tuple) -> np.ndarray:
    """Σ_j w_j values[..., j] over the configured (component index, weight) pairs: [..., C] -> [...]."""
    return sum((w * values[..., j] for j, w in weights), np.zeros(values.shape[:-1], np.float32))


def ground_truth_logprobs(setup: AgentSetup, params, traj: multi_turn.Trajectories, answers: list[str],
                          template: str) -> jax.Array:
    """IGPO's teacher-forced ℓ[B, K+1]: ℓ[b, k] = mean_j log π(a*_j | context before turn k, template prefix) over
    the tokens of the ground-truth answer a* (`template.format(a*)`: the answer's action, e.g. <answer>a*</answer>),
    for the turns the trajectory has (k < K_b); 0 elsewhere (IGPO does not read them). One batched forward pass,
    no gradient (Wang et al. 2025, "Information Gain-based Policy Optimization")."""
    tokens, turn_start, turn_valid = jax.device_get((traj.tokens, traj.turn_start, traj.turn_valid))
    prefix_text, suffix_text = template.split("{}")
    prefix, suffix = setup.tokenizer.encode(prefix_text), setup.tokenizer.encode(suffix_text)
    rows, spans, where = [], [], []
    for b, k in zip(*np.nonzero(turn_valid)):
        answer = setup.tokenizer.encode(answers[b])
        context = tokens[b, :turn_start[b, k]].tolist() + prefix
        rows.append(context + answer + suffix)
        spans.append((len(context), len(context) + len(answer)))
        where.append((b, k))
    width = sampling.bucket_length(max(map(len, rows)), setup.mt_cfg.record_bucket)
    batch = np.full((len(rows), width), setup.tokenizer.pad_id, np.int32)
    attention = np.zeros((len(rows), width), np.int32)
    answer_mask = np.zeros((len(rows), width - 1), np.float32)  # completion positions (token index - 1)
    for i, (row, (lo, hi)) in enumerate(zip(rows, spans)):
        batch[i, :len(row)], attention[i, :len(row)] = row, 1
        answer_mask[i, lo - 1:hi - 1] = 1.0
    logp, _ = setup.logprob_fn(params, jnp.asarray(batch), jnp.asarray(attention), completion_len=width - 1)
    mean = np.asarray(jnp.sum(logp * answer_mask, -1) / np.maximum(answer_mask.sum(-1), 1.0))
    out = np.zeros((turn_valid.shape[0], turn_valid.shape[1] + 1), np.float32)
    for (b, k), value in zip(where, mean):
        out[b, k] = value
    return jnp.asarray(out)


def learner_batch(traj: multi_turn.Trajectories, advantages, old_logp, *, over_turn_mask: bool = False
                  ) -> learner_lib.LearnerBatch:
    """The learner's view of a trajectory record: the whole context is the sequence and every token after the
    first is a "completion" position, with completion_mask = loss_mask (policy tokens only: prompt,
    observations and padding get no loss, KL or entropy) and the record's turn ids (EPO reads them).

    With `over_turn_mask` (Mini-o3, `rl.multi_turn.over_turn_mask`), the rows of the trajectories cut by the turn
    cap or the context limit (`over_turn | truncated`) get completion mask 0: no loss, KL or entropy, and the
    token-mean is over the other rows' tokens; `advantages`, computed before, kept them in their groups.

    advantages, old_logp: [B, T] over the record's tokens. Returns a LearnerBatch with completion length T - 1.
    """
    mask = traj.loss_mask[:, 1:].astype(jnp.float32)  # [B, T-1]
    if over_turn_mask:
        mask = turn_kernels.over_turn_mask(mask, traj.over_turn | traj.truncated)
    return learner_lib.LearnerBatch(
        tokens=traj.tokens.astype(jnp.int32),
        attention_mask=traj.attention_mask.astype(jnp.int32),
        completion_mask=mask,
        advantages=jnp.asarray(advantages)[:, 1:] * mask,
        old_logp=jnp.asarray(old_logp)[:, 1:],
        sampler_logp=traj.behaviour_logp[:, 1:],
        turn_id=traj.turn_id[:, 1:],
    )


def record_values(model_cfg, critic_params, params, traj: multi_turn.Trajectories) -> jax.Array:  # [B, T]
    """The critic's values on a trajectory record, aligned with its tokens: V[b, t] (t >= 1) is read from the hidden
    state that predicts token t (`value_head` convention, with `learner_batch`'s layout: every token after the first
    is a completion position), V[:, 0] = 0. Meaningful only on the loss mask (observation tokens: finite garbage).
    `params`: the policy's (a shared-trunk critic reads its decoder)."""
    values = critic_lib.make_values_fn(model_cfg, traj.tokens.shape[1] - 1)(
        critic_params, params, traj.tokens.astype(jnp.int32), traj.attention_mask.astype(jnp.int32))  # [B, T-1]
    return jnp.pad(values, ((0, 0), (1, 0)))


def critic_batch(traj: multi_turn.Trajectories, values, returns) -> critic_lib.CriticBatch:
    """The critic's view of a record, in `learner_batch`'s layout (completion mask = loss mask: observation tokens
    get no value loss). values (rollout-time, the clipping centre), returns (value targets): [B, T] over the
    record's tokens, zeroed off the loss mask here."""
    mask = traj.loss_mask[:, 1:].astype(jnp.float32)  # [B, T-1]
    return critic_lib.CriticBatch(
        tokens=traj.tokens.astype(jnp.int32),
        attention_mask=traj.attention_mask.astype(jnp.int32),
        completion_mask=mask,
        old_values=jnp.asarray(values)[:, 1:] * mask,
        returns=jnp.asarray(returns)[:, 1:] * mask,
    )


def episode_arrays(traj: multi_turn.Trajectories) -> dict:
    """The per-episode host arrays of a record that its metrics read (no token axis, so batches concatenate)."""
    t = jax.device_get(traj)
    names, outcome_names = t.turn_reward_names, t.outcome_names
    out = {"success": t.outcome[:, outcome_names.index("correct")], "turn_valid": t.turn_valid,
           "num_turns": t.num_turns, "over_turn": t.over_turn, "truncated": t.truncated,
           "policy_tokens": t.loss_mask.sum(-1), "valid_action": t.turn_reward[..., names.index("valid_action")]}
    if "tool_success" in names:
        out["tool_success"] = t.turn_reward[..., names.index("tool_success")]
    if "format_ok" in outcome_names:
        out["format_ok"] = t.outcome[:, outcome_names.index("format_ok")]
    return out


def episode_metrics(arrays: dict) -> dict:
    """Metrics of a batch of episodes (`episode_arrays`): success rate (outcome "correct"), action validity per
    turn, tool success per tool call (the turns followed by another turn: search-style envs call a tool on every
    turn but the final answer), mean turns, over-turn / truncated fractions, policy tokens per episode."""
    valid = arrays["turn_valid"]
    metrics = {
        "success": float(arrays["success"].mean()),
        "num_turns": float(arrays["num_turns"].mean()),
        "over_turn_frac": float(arrays["over_turn"].mean()),
        "truncated_frac": float(arrays["truncated"].mean()),
        "response_length": float(arrays["policy_tokens"].mean()),
        "valid_action": float((arrays["valid_action"] * valid).sum() / max(valid.sum(), 1)),
    }
    if "tool_success" in arrays:
        calls = valid & (np.arange(valid.shape[1]) < arrays["num_turns"][:, None] - 1)
        metrics["tool_success"] = float((arrays["tool_success"] * calls).sum() / max(calls.sum(), 1))
    if "format_ok" in arrays:
        metrics["format_ok"] = float(arrays["format_ok"].mean())
    return metrics


def branching_metrics(traj: multi_turn.Trajectories, initial_rollouts: int, num_groups: int) -> dict:
    """ARPO rollouts of a step: branch copies (`arpo/branches`), fresh rollouts started after their group's tree
    ended (`arpo/fresh`), rows that never played a turn because the slots ran out (`arpo/unstarted`)."""
    branches = int((traj.parent_id >= 0).sum())
    unstarted = int((traj.num_turns == 0).sum())
    fresh = traj.parent_id.shape[0] - initial_rollouts * num_groups - branches - unstarted
    return {"arpo/branches": float(branches), "arpo/fresh": float(fresh), "arpo/unstarted": float(unstarted)}


def gate_turn_rewards(config, outcome: np.ndarray, turn_rewards: np.ndarray, turn_valid: np.ndarray):
    """(trajectory scores [B], turn rewards [B, K], metrics): G-RA gated reward accumulation when
    `config.agent.gated_rewards` (Sun et al. 2025; `rl.multi_turn.gated_reward_accumulation`, δ =
    `config.agent.reward_gate`): the turn rewards count only in trajectories whose outcome reaches δ. A turn-level
    estimator (one that reads `turn_rewards`) gets the gated turn rewards; a trajectory-level one scores
    R = outcome + Σ_k gated turn rewards. Otherwise the outcome and the turn rewards as they are."""
    if not config.agent.gated_rewards:
        return outcome, turn_rewards, {}
    gated, total = turn_kernels.gated_reward_accumulation(outcome, turn_rewards, turn_valid,
                                                          threshold=config.agent.reward_gate)
    gated, total = np.asarray(gated), np.asarray(total)
    metrics = {"g_ra/gate_open_frac": float(np.mean(outcome >= config.agent.reward_gate)),
               "g_ra/gated_turn_reward": float(gated.sum() / max(turn_valid.sum(), 1))}
    if "turn_rewards" in registry.advantage_inputs(config.rl.advantage):
        return outcome, gated, metrics
    return total, turn_rewards, metrics


def collect_agent_rollouts(config, setup: AgentSetup, state, step: int) -> trainer.RolloutBatch:
    """The learner's inputs of agent RL step `step` (a pure function of the state and step; reads the state).
    With a critic (`critic_lib.uses_critic`): its values of the record (`record_values`) go to the estimator with the
    turn layout, and its returns, on the policy tokens, to the critic's updates (`critic_batch`)."""
    rl = config.rl
    step_key = jax.random.fold_in(jax.random.wrap_key_data(state.key), step)
    t0 = time.time()
    tasks = setup.source.train_tasks(trainer.RL_DATA_OFFSET + step, rl.num_prompts)
    traj = run_episodes(setup, state.params, tasks, rl.num_generations, step * rl.num_prompts, step_key,
                        setup.rollout_cfg, setup.branching)
    host = jax.device_get(traj)
    outcome = weighted(host.outcome, setup.outcome_weights)  # [B]
    turn_rewards = weighted(host.turn_reward, setup.turn_weights) * host.turn_valid  # [B, K]
    scores, turn_rewards, gate_metrics = gate_turn_rewards(config, outcome, turn_rewards, host.turn_valid)
    inputs = dict(turn_rewards=jnp.asarray(turn_rewards), turn_id=traj.turn_id, turn_end=traj.turn_end,
                  turn_valid=traj.turn_valid)
    if "gt_logprobs" in registry.advantage_inputs(rl.advantage):
        answers = [task.answer for task in tasks for _ in range(rl.num_generations)]
        inputs["gt_logprobs"] = ground_truth_logprobs(setup, state.params, traj, answers, config.agent.answer_template)
    if critic_lib.uses_critic(config):  # bilevel_gae, gae: the critic's values of the rollout
        inputs["values"] = record_values(setup.model_cfg, state.critic.params, state.params, traj)
    t_gen = time.time() - t0
    mask = traj.loss_mask.astype(jnp.float32)
    advantages, returns = trainer._advantages(
        jnp.asarray(scores), traj.group_ids, mask, name=rl.advantage, num_groups=rl.num_prompts,
        kwargs=tuple(sorted(trainer.advantage_kwargs(config).items())),
        **{k: v for k, v in inputs.items() if k in registry.advantage_inputs(rl.advantage)})
    old_logp = traj.behaviour_logp
    if trainer.several_updates_per_step(config):  # PPO "old" log-probs of the rollout policy, by the learner
        logp, _ = setup.logprob_fn(state.params, traj.tokens, traj.attention_mask, completion_len=traj.tokens.shape[1] - 1)
        old_logp = jnp.pad(logp, ((0, 0), (1, 0)))
    grouped = outcome.reshape(rl.num_prompts, rl.num_generations)
    host_metrics = {
        **episode_metrics(episode_arrays(host)),
        **gate_metrics,
        "reward": float(scores.mean()),
        "reward_std": float(scores.std()),
        "generated_tokens": float(host.loss_mask.sum()),
        "turn_reward": float(turn_rewards.sum() / max(host.turn_valid.sum(), 1)),
        "solve_none_frac": float(np.mean(grouped.max(-1) <= 0)),
        "solve_all_frac": float(np.mean(grouped.min(-1) >= 1)),
    }
    if setup.branching is not None:
        host_metrics.update(branching_metrics(host, setup.branching.initial_rollouts, rl.num_prompts))
    if config.agent.over_turn_mask:  # the fraction of trajectories whose loss is masked
        host_metrics["over_turn_masked_frac"] = float(np.mean(host.over_turn | host.truncated))
    critic = None
    if returns is not None:
        critic = critic_batch(traj, inputs["values"], returns)
        host_metrics.update(critic_lib.value_metrics(inputs["values"], returns, mask))
    batch = learner_batch(traj, advantages, old_logp, over_turn_mask=config.agent.over_turn_mask)
    return trainer.RolloutBatch(step=step, params_version=step, batch=batch, critic_batch=critic, prm_batch=None,
                                current_kl=None, host_metrics=host_metrics, t_gen=t_gen)


def agent_rl_step(config, setup: AgentSetup, programs: trainer.RLPrograms, state, step: int):
    """One synchronous agent RL step: `collect_agent_rollouts`, then the main job's `learn_on_rollouts` (with EPO,
    at RL step `step`: the phase weight's epoch, logged as epo/phase_weight)."""
    t0 = time.time()
    rollouts = collect_agent_rollouts(config, setup, state, step)
    t1 = time.time()
    if state.epo is not None:
        state = state.replace(epo=state.epo.replace(step=jnp.asarray(step, jnp.int32)))
    state, metrics = trainer.learn_on_rollouts(config, programs, state, rollouts, step)
    t_step = time.time() - t0
    metrics.update(trainer._step_timing(rollouts, t_step - (t1 - t0), t_step))
    if state.epo is not None:
        weight = turn_kernels.epo_phase_weight(step, total_epochs=config.agent.epo.total_epochs)
        metrics["epo/phase_weight"] = float(weight)
    return state, metrics


def init_agent_state(setup: AgentSetup, config, init_params, optimizer, key, critic=None, prm=None):
    """The RL stage's initial TrainState (`trainer.init_rl_state`), with EPO's empty per-turn history of the env's
    turn cap (`train.epo`) when `config.agent.epo.coef > 0`."""
    state = trainer.init_rl_state(config, init_params, optimizer, key, critic, prm)
    return state.replace(epo=epo_lib.init_state(setup.mt_cfg.max_turns)) if config.agent.epo.coef else state


def evaluate(setup: AgentSetup, params, key, batch_size: int) -> dict:
    """Greedy episodes of the held-out tasks, `batch_size` envs per rollout (the last batch padded with repeats,
    so one compiled shape): eval/success, eval/valid_action, eval/tool_success, eval/num_turns, ... and
    eval/greedy_accuracy (= success, the main job's headline key)."""
    tasks = list(setup.eval_tasks)
    arrays = []
    for start in range(0, len(tasks), batch_size):
        chunk = tasks[start:start + batch_size]
        padded = chunk + [chunk[-1]] * (batch_size - len(chunk))
        traj = run_episodes(setup, params, padded, 1, 0, key, setup.greedy_cfg)
        arrays.append({k: v[:len(chunk)] for k, v in episode_arrays(traj).items()})
    metrics = episode_metrics({k: np.concatenate([a[k] for a in arrays]) for k in arrays[0]})
    out = {f"eval/{k}": v for k, v in metrics.items()}
    out["eval/greedy_accuracy"] = out["eval/success"]
    return out


# ------------------------------------------------------------------------------------------ the job


def run(config, workdir: str, *, stop_after_rl_step: int | None = None) -> dict:
    """Runs (or resumes) the agent job in `workdir`: SFT warm start, RL, summary.json (as `trainer.run`)."""
    config_validation.validate(config)
    t0 = time.time()
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
        f.write(config.to_json_best_effort(indent=2))
    setup = build_agent_setup(config, workdir)
    key = jax.random.key(config.seed)
    writer = metrics_lib.MetricsWriter(workdir)
    eval_fn = functools.partial(evaluate, batch_size=config.rl.num_prompts * config.rl.num_generations)
    print(f"agent env {config.agent.env}: model {setup.model_cfg}; devices: {jax.devices()}", flush=True)
    sft_params, sft_eval = trainer.run_sft(config, setup, key, writer, workdir, batch_fn=sft_batch,
                                           evaluate_fn=eval_fn)
    _, rl_eval, rl_steps = trainer.run_rl(config, setup, sft_params, key, writer, workdir,
                                          stop_after_step=stop_after_rl_step, step_fn=agent_rl_step,
                                          evaluate_fn=eval_fn, init_state_fn=functools.partial(init_agent_state, setup))
    writer.close()
    rl_eval = rl_eval or sft_eval
    summary = {
        "sft_eval": sft_eval, "rl_eval": rl_eval, "rl_steps": rl_steps, "wall_seconds": time.time() - t0,
        "sft_success": sft_eval["eval/success"], "rl_success": rl_eval["eval/success"],
        "devices": f"{jax.devices()[0].platform} x{jax.device_count()}",
    }
    with open(os.path.join(workdir, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    rows = [f"{'':12s}{'success':>10s}{'valid':>10s}{'tool_ok':>10s}{'turns':>8s}"]
    for name, ev in (("warm start", sft_eval), ("after RL", rl_eval)):
        rows.append(f"{name:12s}{ev['eval/success']:>10.3f}{ev['eval/valid_action']:>10.3f}"
                    f"{ev.get('eval/tool_success', float('nan')):>10.3f}{ev['eval/num_turns']:>8.2f}")
    print(f"done in {summary['wall_seconds']:.0f} s; summary in {workdir}/summary.json\n" + "\n".join(rows), flush=True)
    return summary
