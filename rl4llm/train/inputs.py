"""The advantage estimator's standard inputs (`registry.ADVANTAGE_INPUTS`) of a single-turn step: one table, input
name -> (when it is needed, its provider), decided once per run (`providers`), and the estimator call
(`advantages`). A provider reads the step's `StepData` and returns (named products, host metrics); the products are
the estimator's inputs and what the step's companions consume (the PRM's batch, the measured KL)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rl4llm.config import validation as config_lib
from rl4llm.rewards import combine as combine_lib
from rl4llm.rl import aggregation
from rl4llm.rl import kl as kl_lib
from rl4llm.rl import prime as prime_rewards
from rl4llm.rl import process as process_rl
from rl4llm.rl import registry
from rl4llm.train import learner as learner_lib
from rl4llm.train import rollouts
from rl4llm.train.companions import critic as critic_lib
from rl4llm.train.companions import prime as prime_lib
from rl4llm.train.companions import rm_cotraining

# Stream of fold_in(step_key, ·) of ReMax's greedy rollout (which draws nothing, but gets its own key); minibatch
# shuffles use 1 + epoch and learner updates 1000 + update index (`train.step`).
_GREEDY_BASELINE_STREAM = 999


@dataclasses.dataclass(frozen=True)
class StepData:
    """What the providers of one single-turn step read: the config and programs, the state (read-only), the step's
    scored rollout and its token layout."""

    config: Any
    setup: Any  # train.setup.Setup
    programs: Any  # train.programs.RLPrograms
    state: Any  # train.learner.TrainState
    step: int
    step_key: jax.Array
    scores: np.ndarray  # [N] host rewards
    components: np.ndarray  # [N, K] reward components
    mask: jax.Array  # [N, T] float32 completion mask
    tokens: jax.Array  # [N, P+T]
    attention_mask: jax.Array  # [N, P+T]
    group_ids: jax.Array  # [N]
    behaviour: Any  # the rollout policy's (logp, entropy[, proxy_logp]) [N, T] (`programs.behaviour_fn`), or None
    off_policy: np.ndarray  # [N, T] bool: tokens the policy did not sample (`rows.off_policy_tokens`)
    tree_nodes: np.ndarray | None = None  # [N, T+1] node ids of tree rollouts (config.tree), else None
    node_q: np.ndarray | None = None  # [N] the search-tree nodes' backed-up q (config.deepsearch), else None
    node_terminal: np.ndarray | None = None  # [N] bool: the row's search-tree node is terminal, else None
    step_scores: np.ndarray | None = None  # [N, T] the step scores on the step ends (task.step_reward), else None
    step_ends: np.ndarray | None = None  # [N, T] bool: the tokens that end a judged step, else None
    hinted: np.ndarray | None = None  # [N] bool: rows sampled after a hint (`Rows.hint_chars` > 0)


def _reward_components(d: StepData):
    """The reward pipeline's components [N, K] (GDPO, BNPO with extra rewards)."""
    return {"reward_components": jnp.asarray(d.components)}, {}


def _baseline_scores(d: StepData):
    """ReMax's baseline: the reward of each prompt's greedy completion, over its group (`rollouts.greedy_baseline`)."""
    baseline = rollouts.greedy_baseline_scores(d.config, d.setup, d.state.params, d.step,
                                               jax.random.fold_in(d.step_key, _GREEDY_BASELINE_STREAM),
                                               rm_cotraining.params(d.config, d.state))
    return {"baseline_scores": jnp.asarray(baseline)}, {"greedy_baseline_reward": baseline.mean()}


def _kl_rewards(d: StepData):
    """KL in the reward (verl use_kl_in_reward): token rewards r_t = outcome on the last token − β·KL_t; outcome
    estimators then score Σ_t r_t. Also the measured KL (the adaptive controller's input)."""
    rl = d.config.rl
    ref_logp = d.programs.behaviour_fn(learner_lib.reference_params(d.state), d.tokens, d.attention_mask)[0]
    kl_coef = rl.kl_coef if d.state.extra("kl_coef") is None else d.state.extra("kl_coef")
    rewards, current_kl = kl_lib.kl_in_reward(registry.last_token_rewards(jnp.asarray(d.scores), d.mask),
                                              d.behaviour[0], ref_logp, d.mask, coef=kl_coef, kind=rl.kl_kind)
    return {"rewards": rewards, "scores": jnp.sum(rewards, axis=-1), "current_kl": current_kl}, {"kl": current_kl}


def _seq_metric(d: StepData):
    """CANON's split metric: each response's mean token entropy under the rollout policy [N]."""
    return {"seq_metric": aggregation.masked_mean(d.behaviour[1], d.mask, axis=-1)}, {}


def _values(d: StepData):
    """PPO: the critic's values of the rollout [N, T], once per step."""
    critic = d.state.extra("critic")
    return {"values": d.programs.values_fn(critic.params, d.state.params, d.tokens, d.attention_mask)}, {}


def _implicit_prm_rewards(d: StepData):
    """PRIME: dense rewards β·(log π_φ − log π_ref) [N, T] of the implicit PRM, and the PRM's batch (its update on
    the outcome labels comes with the learner's, `train.step`)."""
    prm_logp, ref_logp = d.programs.prm_logprobs_fn(d.state.extra("prm"), d.tokens, d.attention_mask)
    process = prime_rewards.implicit_process_rewards(prm_logp, ref_logp, d.mask, beta=d.config.prime.beta)
    prm_batch = prime_lib.PRMBatch(tokens=d.tokens, attention_mask=d.attention_mask, completion_mask=d.mask,
                                   ref_logp=ref_logp, labels=jnp.clip(jnp.asarray(d.scores, jnp.float32), 0.0, 1.0))
    # PRIME's mechanism acting: the dense rewards are non-zero once the PRM has moved from its reference
    metrics = {"prime/process_reward_abs": jnp.sum(jnp.abs(process) * d.mask) / jnp.maximum(jnp.sum(d.mask), 1.0)}
    return {"process_rewards": process, "prm_batch": prm_batch}, metrics


def _step_rewards(d: StepData):
    """Process rewards from the step scores (`config.task.step_reward`: `rl.process.STEP_REWARDS`) on the step-end
    tokens [N, T] — the process judge's labels, or a learned PRM's scores (`config.task.step_reward_model`) — and how
    the mechanism acts: the mean |reward| on a step end, the mean step score (`sound_step_frac`: the share of sound
    steps under the judge; the PRM's mean score with a PRM, the judge's share then being `prm/judge_sound_frac`),
    steps and thoughts per response."""
    task = d.config.task
    scores, ends = jnp.asarray(d.step_scores), jnp.asarray(d.step_ends)
    kwargs = {"eta": task.step_reward_eta} if task.step_reward == "prm_clip" else {}
    rewards = process_rl.STEP_REWARDS[task.step_reward](scores, ends, **kwargs)
    num_ends = jnp.maximum(jnp.sum(ends), 1)
    metrics = {
        "process/reward_abs": jnp.sum(jnp.abs(rewards)) / num_ends,
        "process/sound_step_frac": jnp.sum(jnp.where(ends, scores, 0.0)) / num_ends,
        "process/steps_per_response": jnp.mean(jnp.sum(ends, axis=-1)),
        "process/thoughts_per_response": jnp.mean(process_rl.count_thoughts(scores, ends)),
    }
    return {"process_rewards": rewards}, metrics


def _process_rewards(d: StepData):
    """The estimator's dense rewards: the process judge's step rewards (`config.task.step_reward`) or else PRIME's
    implicit PRM's."""
    return _step_rewards(d) if d.config.task.step_reward != "none" else _implicit_prm_rewards(d)


def _tree_nodes(d: StepData):
    """TreeRL: the node of each position of the tree rollouts' rows [N, T+1] (`sampling.tree`)."""
    return {"tree_nodes": jnp.asarray(d.tree_nodes)}, {}


def _search_nodes(d: StepData):
    """DeepSearch: each row's search-tree node, its backed-up q and whether it is terminal [N] (`sampling.mcts`)."""
    return {"node_q": jnp.asarray(d.node_q, jnp.float32), "node_terminal": jnp.asarray(d.node_terminal)}, {}


def _hinted(d: StepData):
    """ADHint: the rows sampled after a hint [N] (`selection.hints`)."""
    return {"hinted": jnp.asarray(d.hinted)}, {}


class Provider(NamedTuple):
    needed: Callable  # (config) -> bool
    provide: Callable  # (StepData) -> (products, host metrics)
    host: bool = False  # runs on the host before the step's device passes (counted in the generation time)


def _declared(name: str) -> Callable:
    return lambda config: name in registry.advantage_inputs(config.rl.advantage)


# Standard input -> provider, in the order they run. The remaining standard inputs (scores, group_ids, mask,
# num_groups) come with every step.
PROVIDERS: dict[str, Provider] = {
    "reward_components": Provider(config_lib.uses_reward_components, _reward_components, host=True),
    "baseline_scores": Provider(_declared("baseline_scores"), _baseline_scores, host=True),
    "rewards": Provider(lambda config: config.rl.kl_in_reward, _kl_rewards),
    "seq_metric": Provider(_declared("seq_metric"), _seq_metric),
    "values": Provider(critic_lib.enabled, _values),
    "process_rewards": Provider(_declared("process_rewards"), _process_rewards),
    "tree_nodes": Provider(_declared("tree_nodes"), _tree_nodes, host=True),
    "node_q": Provider(_declared("node_q"), _search_nodes, host=True),  # with node_terminal
    "hinted": Provider(_declared("hinted"), _hinted, host=True),
}


def providers(config) -> tuple[tuple[str, Provider], ...]:
    """The providers this run's step calls (decided once, from the config and the registry)."""
    return tuple((name, p) for name, p in PROVIDERS.items() if p.needed(config))


def provide(active, data: StepData, *, host: bool) -> tuple[dict, dict]:
    """Runs the `active` providers of one kind (host or device); -> (products, host metrics)."""
    products, metrics = {}, {}
    for _, p in active:
        if p.host == host:
            out, m = p.provide(data)
            products.update(out)
            metrics.update(m)
    return products, metrics


@functools.partial(jax.jit, static_argnames=("name", "num_groups", "kwargs"))
def advantages(scores, group_ids, mask, *, name: str, num_groups: int, kwargs: tuple, **inputs):
    """Advantages [N, T] (zero outside the mask) from the registered estimator `name`, and the value
    targets (returns [N, T] of estimators in `registry.RETURNS_VALUE_TARGETS`, else None).

    `inputs`: optional standard inputs (rewards [N, T], values [N, T], baseline_scores [N], reward_components
    [N, K], process_rewards [N, T], seq_metric [N], tree_nodes [N, T+1], node_q [N], node_terminal [N], hinted [N]) for
    estimators that declare
    them.
    """
    out = registry.get_advantage(name)(scores, group_ids, mask, num_groups=num_groups, **inputs, **dict(kwargs))
    adv, returns = out if name in registry.RETURNS_VALUE_TARGETS else (out, None)
    adv = adv[:, None] if adv.ndim == 1 else adv
    return jnp.broadcast_to(adv, mask.shape) * mask, returns


def advantage_kwargs(config) -> dict:
    """The estimator's hyper-parameters: those set in `config.rl.advantage_kwargs`, and for an estimator with
    per-component `weights` (GDPO) that gets the reward components, w = (1, w_1, ..., w_{K-1}) of the main and
    extra rewards of `config.task.extra_rewards` (the weights of the combined reward)."""
    kwargs = dict(config.rl.advantage_kwargs)
    estimator = inspect.signature(registry.ADVANTAGES[config.rl.advantage])
    if config_lib.uses_reward_components(config) and "weights" in estimator.parameters:
        kwargs["weights"] = (1.0, *combine_lib.parse_weights(config.task.extra_rewards).values())
    return kwargs
