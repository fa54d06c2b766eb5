"""Multi-turn agent training: SFT warm start on the env's scripted expert trajectories, then RL on the env.

The rollout source of the job (`train.job`) when `config.agent.env` names an env (`rl4llm.envs.ENVS`); the job's
stages (SFT, the RL loop and step: Orbax checkpoints and resume, learner step, PPO epochs / minibatches,
companions, controllers) are the single-turn run's, with the agent's batches, rollouts and evaluation:

* SFT: each example is an episode of the env's scripted expert (with probability `agent.expert_noise` a turn is
  played by the env's exploration policy instead: it stays in the context, without loss). The sequence is
  encoded exactly as a rollout encodes it (prompt, then each action's tokens and each observation encoded alone),
  and the loss is on the expert's action tokens, plus `agent.sft_observation_weight` x the next-token loss on the
  observation tokens (an auxiliary world-model loss: observations echo and list entity names, which teaches the
  model to copy names from its context; RL never puts loss on observations).
* RL step (`collect`, then `step.learn_on_rollouts`): `num_prompts` tasks x `num_generations`
  envs (a group shares task and env seed), batched multi-turn rollouts (`sampling.multi_turn.rollout`), the
  outcome score `agent.outcome_reward` and per-turn rewards `agent.turn_reward` (weighted sums of the env's
  components), IGPO's teacher-forced ground-truth log-probs when the estimator needs them, advantages by
  registry name (`grpo` = trajectory-level; `mt_grpo`, `igpo`, `gtpo`: turn-level, `rl.multi_turn`), and a
  LearnerBatch whose completion mask is the loss mask over the whole multi-turn context. With a multi-turn pair
  loss (`config.preference.loss` = dmpo | sdpo, `train.preference_step`) the batch also carries each episode's
  return (`episodes.episode_returns`) and group: the learner pairs each task's best and worst episode and the
  advantages are not read.
  Critics (`bilevel_gae`: RAGEN's turn- then token-level GAE; `gae`: token-level over the whole context, the outcome
  on the last action token, turn rewards unused): the main job's value model (`train.companions.critic`, `config.critic`) reads
  the record, and a CriticBatch of returns on the policy tokens trains it.
* Evaluation: greedy episodes on the env's held-out tasks: success rate, action validity, tool success.
"""

from __future__ import annotations

import dataclasses
import time
import types

import jax
import jax.numpy as jnp
import numpy as np

from rl4llm import envs as envs_lib
from rl4llm import sampling
from rl4llm.config import validation as config_lib
from rl4llm.envs import base as env_base
from rl4llm.rewards import combine as combine_lib
from rl4llm.rl import registry
from rl4llm.sampling import multi_turn
from rl4llm.train import batches
from rl4llm.train import episodes
from rl4llm.train import inputs as inputs_lib
from rl4llm.train import setup as setup_lib
from rl4llm.train import step as step_lib
from rl4llm.train.companions import critic as critic_lib
from rl4llm.train.programs import several_updates_per_step
from rl4llm.train.setup import RL_DATA_OFFSET


@dataclasses.dataclass(frozen=True)
class AgentSetup(setup_lib.Setup):
    """What the agent stages share, built once from the config. A `setup.Setup` (so the main job's stages run on
    it: `model_cfg`, `tokenizer`, `rollout_cfg`; its single-turn task, eval examples and reward pipeline are None)
    with the env's task source, policies and the multi-turn settings."""

    source: env_base.TaskSource = None
    explore: env_base.Policy = None
    greedy_cfg: sampling.SamplingConfig = None
    mt_cfg: multi_turn.MultiTurnConfig = None
    eval_tasks: tuple = ()
    turn_weights: tuple = ()  # ((component index, weight), ...) into mt_cfg.turn_components
    outcome_weights: tuple = ()  # ((component index, weight), ...) into mt_cfg.outcome_components
    logprob_fn: object = None  # `episodes.logprob_program`: (params, tokens [N, L], attention [N, L], completion_len)
    branching: multi_turn.BranchingConfig | None = None  # ARPO rollouts (config.agent.arpo); None = plain


def _weights(spec: str, names: tuple[str, ...]) -> tuple:
    return tuple((names.index(name), w) for name, w in combine_lib.parse_weights(spec).items())


def build_setup(config, workdir: str) -> AgentSetup:
    """Env task source, tokenizer (trained on expert transcripts, cached in the workdir), model and sampler configs."""
    agent = config.agent
    entry = envs_lib.ENVS[agent.env]
    env_cfg = envs_lib.build_config(agent.env, getattr(agent, agent.env), config.seed)
    source = entry.source(env_cfg)
    tokenizer = setup_lib.model_tokenizer(config, workdir, types.SimpleNamespace(name=agent.env, source=source))
    model_cfg = setup_lib.model_config(config, tokenizer.vocab_size)
    rollout_cfg = sampling.SamplingConfig(
        max_new_tokens=agent.max_action_tokens, temperature=config.sampling.temperature,
        top_k=config.sampling.top_k, top_p=config.sampling.top_p, min_p=config.sampling.min_p,
        stop_token_ids=tokenizer.stop_token_ids, pad_id=tokenizer.pad_id)
    env = source.env()
    mt_cfg = multi_turn.MultiTurnConfig(
        max_turns=env.max_turns, max_context=agent.max_context, max_obs_tokens=agent.max_obs_tokens,
        obs_bucket=agent.obs_bucket, record_bucket=agent.record_bucket,
        turn_components=tuple(env.turn_reward_keys), outcome_components=tuple(env.outcome_keys))
    logprob_fn = episodes.logprob_program(model_cfg, config.sampling.temperature or 1.0, config.rl.logprob_chunk_size)
    arpo = agent.arpo
    branching = None if arpo.initial_rollouts == 0 else multi_turn.BranchingConfig(
        initial_rollouts=arpo.initial_rollouts, entropy_weight=arpo.entropy_weight,
        branch_probability=arpo.branch_probability, beam_size=arpo.beam_size, entropy_tokens=arpo.entropy_tokens,
        entropy_top_k=arpo.entropy_top_k)
    return AgentSetup(
        task=None, eval_examples=(), eval_spec=None, score_fn=None, rewards=None, tokenizer=tokenizer,
        model_cfg=model_cfg, source=source, explore=entry.explore(env_cfg),
        rollout_cfg=rollout_cfg,
        greedy_cfg=dataclasses.replace(rollout_cfg, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0),
        mt_cfg=mt_cfg, eval_tasks=tuple(source.test_tasks(agent.eval_tasks)),
        turn_weights=_weights(agent.turn_reward, mt_cfg.turn_components),
        outcome_weights=_weights(agent.outcome_reward, mt_cfg.outcome_components), logprob_fn=logprob_fn,
        branching=branching)


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
    return batches.pad_training_sequences(rows, setup.tokenizer.pad_id, setup.mt_cfg.record_bucket)


def _old_logprobs(config, setup: AgentSetup, params, traj) -> jax.Array:  # [B, T]
    """PPO's "old" log-probs of the record's tokens: with several updates per step the rollout policy's, by the
    learner's program; else the sampler's."""
    if not several_updates_per_step(config):
        return traj.behaviour_logp
    logp, _ = setup.logprob_fn(params, traj.tokens, traj.attention_mask, completion_len=traj.tokens.shape[1] - 1)
    return jnp.pad(logp, ((0, 0), (1, 0)))


def collect(config, setup: AgentSetup, programs, state, step: int, *, selection=None,
            params_version: int | None = None) -> step_lib.RolloutBatch:
    """The learner's inputs of agent RL step `step` (a pure function of the state and step; reads the state).
    With a critic (`critic_lib.enabled`): its values of the record (`record_values`) go to the estimator with the
    turn layout, and its returns, on the policy tokens, to the critic's updates (`critic_batch`). `programs` are read
    through the setup's own log-prob program; `params_version` as the single-turn source's (synchronous only).
    Tasks are drawn uniformly: there is no prompt-selection state (`selection` is None)."""
    del programs, selection
    rl = config.rl
    step_key = jax.random.fold_in(jax.random.wrap_key_data(state.key), step)
    t0 = time.time()
    tasks = setup.source.train_tasks(RL_DATA_OFFSET + step, rl.num_prompts)
    traj = episodes.run_episodes(setup, state.params, tasks, rl.num_generations, step * rl.num_prompts, step_key,
                        setup.rollout_cfg, setup.branching)
    host = jax.device_get(traj)
    outcome = episodes.weighted(host.outcome, setup.outcome_weights)  # [B]
    turn_rewards = episodes.weighted(host.turn_reward, setup.turn_weights) * host.turn_valid  # [B, K]
    episode_return = episodes.episode_returns(config, outcome, turn_rewards, host.turn_valid)  # DMPO / SDPO's order
    scores, turn_rewards, gate_metrics = episodes.gate_turn_rewards(config, outcome, turn_rewards, host.turn_valid)
    inputs = dict(turn_rewards=jnp.asarray(turn_rewards), turn_id=traj.turn_id, turn_end=traj.turn_end,
                  turn_valid=traj.turn_valid)
    if "gt_logprobs" in registry.advantage_inputs(rl.advantage):
        answers = [task.answer for task in tasks for _ in range(rl.num_generations)]
        inputs["gt_logprobs"] = episodes.ground_truth_logprobs(setup, state.params, traj, answers,
                                                               config.agent.answer_template)
    if critic_lib.enabled(config):  # bilevel_gae, gae: the critic's values of the rollout
        inputs["values"] = episodes.record_values(setup.model_cfg, state.extra("critic").params, state.params, traj)
    t_gen = time.time() - t0
    mask = traj.loss_mask.astype(jnp.float32)
    advantages, returns = inputs_lib.advantages(
        jnp.asarray(scores), traj.group_ids, mask, name=rl.advantage, num_groups=rl.num_prompts,
        kwargs=tuple(sorted(inputs_lib.advantage_kwargs(config).items())),
        **{k: v for k, v in inputs.items() if k in registry.advantage_inputs(rl.advantage)})
    old_logp = _old_logprobs(config, setup, state.params, traj)
    grouped = outcome.reshape(rl.num_prompts, rl.num_generations)
    host_metrics = {
        **episodes.episode_metrics(episodes.episode_arrays(host)),
        **gate_metrics,
        "reward": float(scores.mean()),
        "reward_std": float(scores.std()),
        "generated_tokens": float(host.loss_mask.sum()),
        "turn_reward": float(turn_rewards.sum() / max(host.turn_valid.sum(), 1)),
        "solve_none_frac": float(np.mean(grouped.max(-1) <= 0)),
        "solve_all_frac": float(np.mean(grouped.min(-1) >= 1)),
        "episode_return": float(episode_return.mean()),
    }
    if setup.branching is not None:
        host_metrics.update(episodes.branching_metrics(host, setup.branching.initial_rollouts, rl.num_prompts))
    if config.agent.over_turn_mask:  # the fraction of trajectories whose loss is masked
        host_metrics["over_turn_masked_frac"] = float(np.mean(host.over_turn | host.truncated))
    critic = None
    if returns is not None:
        critic = episodes.critic_batch(traj, inputs["values"], returns)
        host_metrics.update(critic_lib.value_metrics(inputs["values"], returns, mask))
    batch = episodes.learner_batch(traj, advantages, old_logp, over_turn_mask=config.agent.over_turn_mask,
                                   pair_scores=episode_return if config_lib.uses_pairwise_objective(config) else None)
    return step_lib.RolloutBatch(step=step, params_version=step if params_version is None else params_version,
                                 batch=batch, critic_batch=critic, prm_batch=None, current_kl=None,
                                 host_metrics=host_metrics, t_gen=t_gen)


def evaluate(config, setup: AgentSetup, params, key) -> dict:
    """Greedy episodes of the held-out tasks, `num_prompts x num_generations` envs per rollout (the last batch
    padded with repeats, so one compiled shape): eval/success, eval/valid_action, eval/tool_success,
    eval/num_turns, ... and eval/greedy_accuracy (= success, the main job's headline key)."""
    tasks, batch_size = list(setup.eval_tasks), config.rl.num_prompts * config.rl.num_generations
    arrays = []
    for start in range(0, len(tasks), batch_size):
        chunk = tasks[start:start + batch_size]
        padded = chunk + [chunk[-1]] * (batch_size - len(chunk))
        traj = episodes.run_episodes(setup, params, padded, 1, 0, key, setup.greedy_cfg)
        arrays.append({k: v[:len(chunk)] for k, v in episodes.episode_arrays(traj).items()})
    metrics = episodes.episode_metrics({k: np.concatenate([a[k] for a in arrays]) for k in arrays[0]})
    out = {f"eval/{k}": v for k, v in metrics.items()}
    out["eval/greedy_accuracy"] = out["eval/success"]
    return out


def describe(config, setup: AgentSetup) -> str:
    """The job's opening line: the env, the model and the devices."""
    return f"agent env {config.agent.env}: model {setup.model_cfg}; devices: {jax.devices()}"


def summary(sft_eval: dict, rl_eval: dict) -> dict:
    """The headline numbers of summary.json: the success rate after the warm start and after RL."""
    return {"sft_success": sft_eval["eval/success"], "rl_success": rl_eval["eval/success"]}


def summary_table(summary: dict) -> str:
    """Success, action validity, tool success and turns, after the warm start and after RL."""
    rows = [f"{'':12s}{'success':>10s}{'valid':>10s}{'tool_ok':>10s}{'turns':>8s}"]
    for name, ev in (("warm start", summary["sft_eval"]), ("after RL", summary["rl_eval"])):
        rows.append(f"{name:12s}{ev['eval/success']:>10.3f}{ev['eval/valid_action']:>10.3f}"
                    f"{ev.get('eval/tool_success', float('nan')):>10.3f}{ev['eval/num_turns']:>8.2f}")
    return "\n".join(rows)
