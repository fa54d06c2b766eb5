"""Multi-turn episodes for the agent rollout source (`train.agent`): batched rollouts of env groups, IGPO's
ground-truth log-probs, the learner's and the critic's views of a trajectory record, G-RA's gated turn rewards,
and the episodes' metrics (success, action validity, tool success, ARPO branching)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from rl4llm import sampling
from rl4llm.rl import multi_turn as turn_kernels
from rl4llm.rl import registry
from rl4llm.sampling import multi_turn
from rl4llm.train import learner as learner_lib
from rl4llm.train import logprobs as logprobs_lib
from rl4llm.train.companions import critic as critic_lib

@functools.lru_cache(maxsize=None)
def logprob_program(model_cfg, temperature: float, chunk_size: int):
    """Jitted `(params, tokens [N, L], attention [N, L], completion_len) -> (logp, entropy) [N, completion_len]`
    (`logprobs.completion_logprobs`), one per model and settings (runs in one process share its compilations)."""
    return jax.jit(functools.partial(logprobs_lib.completion_logprobs, model_cfg, temperature=temperature,
                                     chunk_size=chunk_size), static_argnames=("completion_len",))


def run_episodes(setup, params, tasks, group_size: int, env_seed: int, key,
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


def ground_truth_logprobs(setup, params, traj: multi_turn.Trajectories, answers: list[str],
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


def learner_batch(traj: multi_turn.Trajectories, advantages, old_logp, *, over_turn_mask: bool = False,
                  pair_scores=None) -> learner_lib.LearnerBatch:
    """The learner's view of a trajectory record: the whole context is the sequence and every token after the
    first is a "completion" position, with completion_mask = loss_mask (policy tokens only: prompt,
    observations and padding get no loss, KL or entropy) and the record's turn ids (EPO, DMPO and SDPO read them).
    `pair_scores` [B] (a multi-turn pair loss: the episodes' returns) become the batch's scores, with the record's
    groups: the learner pairs each group's best and worst episode by them.

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
        scores=None if pair_scores is None else jnp.asarray(pair_scores, jnp.float32),
        group_ids=None if pair_scores is None else traj.group_ids,
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


def episode_returns(config, outcome: np.ndarray, turn_rewards: np.ndarray, turn_valid: np.ndarray) -> np.ndarray:
    """Each episode's return R = outcome + Σ_k turn rewards over its turns [B] (the order of a multi-turn pair
    loss's pairs); with G-RA (`config.agent.gated_rewards`) the turn rewards count only where the outcome reaches
    `config.agent.reward_gate` (`rl.multi_turn.gated_reward_accumulation`'s return)."""
    gate = config.agent.reward_gate if config.agent.gated_rewards else -np.inf
    _, total = turn_kernels.gated_reward_accumulation(outcome, turn_rewards, turn_valid, threshold=gate)
    return np.asarray(total)


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
