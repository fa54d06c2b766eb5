"""Name -> function registries for advantage estimators and policy losses.

Adding a method = one function in `advantages.py` / `losses.py` + one line in the dict below.

Calling convention
------------------
Every registered function takes the *standard inputs* it needs by parameter name and declares its
own hyper-parameters as keyword arguments with defaults (the paper's / verl's defaults). The trainer
never calls a registered function directly: it calls the adapter returned by `get_advantage(name)` /
`get_policy_loss(name)`, passing ALL standard inputs it has plus the config's hyper-parameter dict.
The adapter forwards to the function only the standard inputs it declares; hyper-parameters are all
forwarded, so a misspelt hyper-parameter raises a TypeError naming it.

Advantages — the trainer calls::

    get_advantage(name)(scores, group_ids, mask, num_groups=G, lengths=None,
                        [rewards=..., values=..., baseline_scores=..., reward_components=...,
                         seq_metric=...,] **config.rl.advantage_kwargs)

    scores[N] outcome reward, group_ids[N] ints in [0, G), mask[N, T], G static;
    lengths[N] (default Σ_t mask), rewards[N, T] token-level rewards (default: scores on the last valid
    token, verl's convention; pass them to include e.g. a KL-in-reward penalty),
    values[N, T] critic values, baseline_scores[N] (ReMax greedy reward), reward_components[N, K]
    (GDPO multi-reward), seq_metric[N] (CANON split metric), process_rewards[N, T] (PRIME implicit PRM, or a process
    judge's step rewards: `rl.process`),
    tree_nodes[N, T+1] (the node of each position of a tree rollout's rows, `rl.tree`: TreeRL, Tree-OPO, CURE),
    node_q[N], node_terminal[N] bool (each row's search-tree node: its backed-up q and whether it is terminal,
    `sampling.mcts`: DeepSearch),
    hinted[N] bool (the row was sampled after a hint, `selection.hints`: ADHint).
    Multi-turn estimators (`rl.multi_turn`: mt_grpo, igpo, gtpo, bilevel_gae) also take the turn layout:
    turn_id[N, T] (−1 off action tokens), turn_end[N, K], turn_valid[N, K], turn_rewards[N, K] (outcome
    excluded; it is `scores`) and gt_logprobs[N, K+1] (IGPO); `mask` is then the multi-turn loss mask.
    `bnpo` with reward_components is BNPO's per-component decomposition.
    Returns advantages [N] or [N, T] (losses broadcast [N] over tokens). Estimators in
    `RETURNS_VALUE_TARGETS` (critic methods: "gae") return `(advantages[N, T], returns[N, T])`.

Policy losses — the trainer calls::

    get_policy_loss(name)(logp, old_logp, advantages, mask,
                          agg_mode=agg_mode_for(name, config.rl.agg_mode), agg_weights=..., is_weights=...,
                          [key=..., entropy=..., proxy_logp=..., target_advantages=..., off_policy_mask=...,]
                          **config.rl.loss_kwargs)

    and gets `(loss, metrics)`. `agg_weights[N, T]` (optional) are `aggregation_weights(full_mask,
    agg_mode_for(name, mode))` sliced to the micro-batch; `is_weights[N, T]` (optional) are e.g.
    truncated-IS weights (`losses.truncated_is_weights`). Some losses fix their aggregation (verl: gspo,
    sapo, geo_mean; and kimi); build the weights with `agg_mode_for(name, configured_mode)`.
    Extra inputs: key (PRNG key: clip_cov), entropy[N, T] (token entropy of the current policy:
    entropy-aware losses), proxy_logp[N, T] (Lp-Reg), target_advantages (gbpo: from
    `advantages.gbpo_targets(scores, group_ids, num_groups=G)`), off_policy_mask[N, T] (1 on the tokens of
    off-policy traces mixed into the groups: `off_policy.luffy`, or the hint's tokens: `adhint.adhint_loss`, or
    HeRL's guided responses: `off_policy.herl`; None = all on-policy), sampler_logp[N, T] (the log-probs the
    sampler reported: the behaviour policy's, whatever the updates per step; `off_policy.herl`'s guided tokens). A
    loss that declares an extra input the trainer does not pass fails with a TypeError naming it.

Whole-minibatch token statistics — losses in `TOKEN_STATISTICS` select or weight tokens by statistics of
the batch (covariance ranks, quantiles, max/min, entropy scores). `get_token_statistics(name)` takes the
same inputs and hyper-parameters as the loss adapter (the loss's defaults fill the unset ones) and
returns the per-token `token_stats[N, T]`; computed on the whole minibatch (with the current policy's
log-probs / entropies) and passed to each micro-batch's loss call as `token_stats=` (sliced), it makes
the loss and its gradient independent of the micro-batching (see the learner).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import jax
import jax.numpy as jnp

from rl4llm.rl import adhint, advantages, entropy, losses, multi_turn, off_policy, preference, process, tree

ADVANTAGES: dict[str, Callable[..., Any]] = {
    "grpo": advantages.grpo,
    "dr_grpo": functools.partial(advantages.grpo, normalize_std=False),
    "rloo": advantages.rloo,
    "reinforce_plus_plus": advantages.reinforce_plus_plus,
    "reinforce_plus_plus_baseline": advantages.reinforce_plus_plus_baseline,
    "dler": advantages.dler,
    "remax": advantages.remax,
    "opo": advantages.opo,
    "gpg": advantages.gpg,
    "lite_ppo": advantages.lite_ppo,
    "bnpo": advantages.bnpo,
    "gdpo": advantages.gdpo,
    "mapo": advantages.mapo,
    "canon": advantages.canon,
    "canon_length": advantages.canon_length,
    "grpo_passk": advantages.grpo_passk,
    "hapo": advantages.hapo,
    "gae": advantages.gae,
    "prime": advantages.prime,
    "process_grpo": process.process_grpo,  # GRPO + return-to-go of a process judge's step rewards (task.step_reward)
    "gbpo": advantages.grpo,  # GBPO's weights are GRPO advantages; its loss also needs `gbpo_targets`
    "treerl": tree.treerl,  # tree rollouts (config.tree): node values over the leaves through each segment
    "tree_opo": tree.tree_opo,  # tree rollouts: r − α·V(prefix) over the prefix's subtree, on the row's own tokens
    "cure": tree.cure,  # CURE's critical-token trees (config.tree.criterion="critical"): GRPO on own tokens
    "deepsearch": tree.deepsearch,  # DeepSearch's MCTS nodes (config.deepsearch): tanh-clipped q − mean terminal q
    "ettrl": tree.ettrl,  # ETTRL Adv-Res: GRPO × (1 + (H̄_g − H_i)/H̄_g), H = response mean token entropy
    "adhint": adhint.adhint_advantages,  # GRPO, hinted successes scaled by the hint's difficulty posterior (hinted)
    "spo": preference.spo_advantages,  # SPO: each completion's win rate in its group − ½ (the verifier as preference)
    # Multi-turn agents (turn-level credit; the trajectory-level baseline is "grpo"): `rl.multi_turn`.
    "mt_grpo": multi_turn.mt_grpo,
    "igpo": multi_turn.igpo,
    "gtpo": multi_turn.gtpo,
    "bilevel_gae": multi_turn.bilevel_gae,
}

POLICY_LOSSES: dict[str, Callable[..., Any]] = {
    "ppo_clip": losses.ppo_clip,
    "vanilla": losses.ppo_clip,  # verl's name
    "gspo": losses.gspo,
    "sapo": losses.sapo,
    "cispo": losses.cispo,
    "reinforce": losses.reinforce,
    "gpg": losses.reinforce,
    "gmpo": losses.gmpo,
    "geo_mean": losses.gmpo,  # verl's name
    "clip_cov": losses.clip_cov,
    "kl_cov": losses.kl_cov,
    "gbpo": losses.gbpo,
    "kimi": losses.kimi,
    "lp_reg": losses.lp_reg,
    "hapo": losses.hapo,
    "steer": losses.steer,
    # mixed on-/off-policy groups (rl.off_policy_traces): they need off_policy_mask to see the traces
    "luffy": off_policy.luffy,
    "rl_plus": off_policy.rl_plus,
    "herl": off_policy.herl,  # HeRL's guided responses: f(π_θ/π_b) with π_b their behaviour probability under guidance
    "adhint": adhint.adhint_loss,  # hints in the completion: hint tokens weighted by π_θ, masked when π < τ or A < 0
}

# Per-token statistics of the whole minibatch that a loss's token selection / weighting depends on
# (the loss's `token_stats` input): name -> function of standard inputs and the loss's hyper-parameters.
TOKEN_STATISTICS: dict[str, Callable[..., Any]] = {
    "clip_cov": losses.clip_cov_selection,
    "kl_cov": losses.kl_cov_selection,
    "lp_reg": losses.lp_reg_selection,
    "hapo": entropy.normalized_entropy_scores,
    "steer": entropy.steer_token_weights,
}

RETURNS_VALUE_TARGETS: frozenset[str] = frozenset({"gae", "bilevel_gae"})

# Losses whose aggregation is fixed by the method (verl ignores `loss_agg_mode` for these).
FORCED_AGG_MODE: dict[str, str] = {
    "gspo": "seq-mean-token-mean",
    "sapo": "seq-mean-token-mean",
    "gmpo": "seq-mean-token-mean",
    "geo_mean": "seq-mean-token-mean",
    "kimi": "seq-mean-token-sum",
}

# The standard inputs of advantage estimators (every other parameter is a hyper-parameter): the ones every rollout
# source provides, those only the single-turn source provides (ReMax's greedy baseline, the reward pipeline's
# components, CANON's split metric, PRIME's dense rewards) and those only the multi-turn source provides (the turn
# layout, IGPO's ground-truth log-probs). `train.inputs` holds a provider for each.
COMMON_ADVANTAGE_INPUTS = ("scores", "group_ids", "mask", "num_groups", "lengths", "rewards", "values")
SINGLE_TURN_ADVANTAGE_INPUTS = ("baseline_scores", "reward_components", "seq_metric", "process_rewards",
                                "tree_nodes", "node_q", "node_terminal", "hinted")
MULTI_TURN_ADVANTAGE_INPUTS = ("turn_rewards", "turn_id", "turn_end", "turn_valid", "gt_logprobs")
ADVANTAGE_INPUTS = COMMON_ADVANTAGE_INPUTS + SINGLE_TURN_ADVANTAGE_INPUTS + MULTI_TURN_ADVANTAGE_INPUTS
# The standard inputs of policy losses; the learner provides every one (`train.learner`).
LOSS_INPUTS = (
    "logp", "old_logp", "advantages", "mask", "agg_mode", "agg_weights", "is_weights",
    "key", "entropy", "proxy_logp", "target_advantages", "token_stats", "off_policy_mask", "sampler_logp",
)


def _lookup(table: dict[str, Callable[..., Any]], name: str, what: str) -> Callable[..., Any]:
    if name not in table:
        raise ValueError(f"unknown {what} {name!r}; known: {', '.join(sorted(table))}")
    return table[name]


def _forward(fn: Callable[..., Any], standard: tuple[str, ...], kwargs: dict[str, Any]) -> Any:
    """Call `fn` with every hyper-parameter and only the standard inputs it declares."""
    params = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in kwargs.items() if k in params or k not in standard})


def last_token_rewards(scores: jax.Array, mask: jax.Array) -> jax.Array:  # [N], [N, T] -> [N, T]
    """Outcome reward placed on the last valid token of each row (verl reward-manager convention)."""
    positions = jnp.arange(mask.shape[-1])
    last = jnp.max(jnp.where(mask != 0, positions, -1), axis=-1)  # [N]; -1 if no valid token
    return jnp.where(positions[None, :] == last[:, None], scores[:, None], 0.0).astype(jnp.result_type(scores, jnp.float32))


def get_advantage(name: str) -> Callable[..., Any]:
    """The adapter for advantage estimator `name` (see the module docstring for what to pass)."""
    fn = _lookup(ADVANTAGES, name, "advantage estimator")
    params = inspect.signature(fn).parameters

    def call(scores, group_ids, mask, *, num_groups: int, lengths=None, **kwargs):
        if lengths is None and "lengths" in params:
            lengths = jnp.sum(mask, axis=-1)
        if kwargs.get("rewards") is None and "rewards" in params:
            kwargs["rewards"] = last_token_rewards(scores, mask)
        inputs = dict(scores=scores, group_ids=group_ids, mask=mask, num_groups=num_groups, lengths=lengths)
        return _forward(fn, ADVANTAGE_INPUTS, {**inputs, **kwargs})

    return call


def get_policy_loss(name: str) -> Callable[..., Any]:
    """The adapter for policy loss `name` (see the module docstring for what to pass)."""
    fn = _lookup(POLICY_LOSSES, name, "policy loss")

    def call(logp, old_logp, advantages, mask, *, agg_mode: str = "token-mean", agg_weights=None,
             is_weights=None, **kwargs):
        inputs = dict(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask, agg_mode=agg_mode,
                      agg_weights=agg_weights, is_weights=is_weights)
        return _forward(fn, LOSS_INPUTS, {**inputs, **kwargs})

    return call


def get_token_statistics(loss_name: str) -> Callable[..., Any]:
    """The adapter computing loss `loss_name`'s `token_stats[N, T]` (a `TOKEN_STATISTICS` entry).

    Call it like the loss adapter (standard inputs by name plus the config's hyper-parameters); the
    loss's own defaults fill the hyper-parameters that are not given, and the statistics function gets
    only the inputs and hyper-parameters it declares. The result carries no gradient.
    """
    _lookup(POLICY_LOSSES, loss_name, "policy loss")
    fn = _lookup(TOKEN_STATISTICS, loss_name, "loss with whole-minibatch token statistics")
    loss_params = inspect.signature(POLICY_LOSSES[loss_name]).parameters
    defaults = {k: p.default for k, p in loss_params.items() if p.default is not inspect.Parameter.empty}
    params = inspect.signature(fn).parameters

    def call(**kwargs):
        merged = {**defaults, **kwargs}
        return jax.lax.stop_gradient(fn(**{k: v for k, v in merged.items() if k in params}))

    return call


def _declared(fn: Callable[..., Any], standard: tuple[str, ...]) -> frozenset[str]:
    return frozenset(p for p in inspect.signature(fn).parameters if p in standard)


def advantage_inputs(name: str) -> frozenset[str]:
    """The standard inputs (`ADVANTAGE_INPUTS`) that advantage estimator `name` declares."""
    return _declared(_lookup(ADVANTAGES, name, "advantage estimator"), ADVANTAGE_INPUTS)


def policy_loss_inputs(name: str) -> frozenset[str]:
    """The standard inputs (`LOSS_INPUTS`) that policy loss `name` declares."""
    return _declared(_lookup(POLICY_LOSSES, name, "policy loss"), LOSS_INPUTS)


def agg_mode_for(loss_name: str, configured_mode: str) -> str:
    """The aggregation mode loss `loss_name` actually uses given the configured one."""
    _lookup(POLICY_LOSSES, loss_name, "policy loss")
    return FORCED_AGG_MODE.get(loss_name, configured_mode)
