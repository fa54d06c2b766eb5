"""The sampler's side of a rollout: completions drawn for prompts, as host arrays by `Rows` field, before any
scoring (`train.rollouts` scores them): `sample_completions` (G per prompt, in calls of whole groups), the tree
rollouts of `config.tree` (`tree_completions`), DeepSearch's search trees of `config.deepsearch`
(`search_completions`) and ARRoL's pruned rollouts of `config.pruning`
(`pruned_completions`)."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from rl4llm import models
from rl4llm import sampling
from rl4llm.config import validation as config_lib
from rl4llm.rl import pruning as pruning_lib
from rl4llm.sampling import mcts
from rl4llm.sampling import tree as sampling_tree
from rl4llm.train.setup import Setup

# The stream of the generation key that decodes ARRoL's kept rollouts after the checkpoint (config.pruning).
_PRUNED_CONTINUATION_STREAM = 5000


def generate(setup: Setup, params, prompt_tokens, prompt_mask, key, sampling_cfg, prompt_index=None, row_offset=0,
             entropy_stats=None) -> sampling.Rollout:
    """`sampling.generate`, on the sampler mesh when the run has a mesh (`Layout.generate`)."""
    if setup.layout is None:
        return sampling.generate(setup.model_cfg, params, prompt_tokens, prompt_mask, key, sampling_cfg, prompt_index,
                                 row_offset=row_offset, entropy_stats=entropy_stats)
    return setup.layout.generate(params, prompt_tokens, prompt_mask, key, sampling_cfg, prompt_index, row_offset,
                                 entropy_stats)


def prompts_per_call(config, num_prompts: int) -> int:
    """Prompts the sampler takes per call: `sampling.rows_per_call` / `rl.num_generations` (whole groups), or all
    `num_prompts` of the call at once when rows_per_call is 0."""
    return config.sampling.rows_per_call // config.rl.num_generations or num_prompts


def sample_completions(config, setup: Setup, params, prompt_tokens, prompt_mask, counts: np.ndarray, key,
                       sampling_cfg, entropy_stats=None) -> dict:
    """`counts[i]` completions of each prompt i of [B, P] (in order), drawn with `sampling_cfg` (and HAPO's
    `entropy_stats` with an adaptive temperature: the rows' per-token `temperatures` then come back too), as host arrays
    [sum(counts), ...] by Rows field. The prompts go to the sampler K = `prompts_per_call` at a time, the last call filled up with copies
    of the last prompt (their rows dropped), so that every call runs the one compiled program of K prompts x g rows
    (`sampling.rows_per_call`; validation makes the counts all g then). Call c starts at row c*K*g of the whole
    rollout (`sampling.generate`'s row_offset: each row draws from its own key stream), so the rows are those one
    call of all B prompts gives, up to float rounding of the different batch shapes. Every call is dispatched before
    the first is read back, and only one call's KV cache (K*g rows) is live at a time."""
    b, k = len(counts), prompts_per_call(config, len(counts))
    calls = -(-b // k)
    order = np.minimum(np.arange(calls * k), b - 1)  # prompts by call; the last call padded with the last prompt
    rollouts = []
    for c in range(calls):
        chunk = order[c * k:(c + 1) * k]
        prompt_index = np.repeat(np.arange(k, dtype=np.int32), counts[chunk])
        tokens, mask = prompt_tokens[chunk], prompt_mask[chunk]
        offset = int(counts[order[:c * k]].sum())
        if config.sampling.shared_prefix_prefill:  # each prompt prefilled once, its KV cache forked to its rows
            rollouts.append(generate(setup, params, tokens, mask, key, sampling_cfg, prompt_index, offset,
                                     entropy_stats))
        else:
            rollouts.append(generate(setup, params, tokens[prompt_index], mask[prompt_index], key, sampling_cfg,
                                     row_offset=offset, entropy_stats=entropy_stats))
    parts = [_completions(r) for r in rollouts]
    return {f: np.concatenate([p[f] for p in parts])[:int(counts.sum())] for f in parts[0]}


@functools.partial(jax.jit, static_argnames="model_cfg")
def checkpoint_features(model_cfg, params, tokens, attention_mask):
    """The policy's final-norm hidden state at each row's last real token of `tokens` [N, L] (left-padded prompt,
    then the completion so far, right-padded) -> [N, E] float32: ARRoL's quality head reads it."""
    hidden, _ = models.forward(model_cfg, params, tokens, models.positions_from_mask(attention_mask), attention_mask)
    last = tokens.shape[1] - 1 - jnp.argmax(attention_mask[:, ::-1], axis=-1)
    return jnp.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0].astype(jnp.float32)


def pruned_completions(config, setup: Setup, params, prompt_tokens, prompt_mask, counts: np.ndarray, key,
                       quality_head) -> tuple[dict, dict]:
    """ARRoL's online rollout pruning (config.pruning; `rl.pruning`): `oversample` x counts[i] rollouts of each prompt
    decoded to `checkpoint_tokens` (`sample_completions` at that budget), their quality q = σ(head(h)) from the
    policy's hidden state there (`checkpoint_features`), each group's counts[i] kept by `pruning.balanced_keep`, and
    only the kept ones decoded on to `sampling.max_new_tokens`: after [prompt | their first tokens] (a prefill of
    that prefix, then the same sampler, drawing from the key stream fold_in(key, `_PRUNED_CONTINUATION_STREAM`)), so
    a kept rollout is a sample of the whole completion from the policy. Rows that stopped before the checkpoint are
    kept as they are. Departure: ARRoL reads the hidden states its sampler already holds; here they are recomputed
    by one forward of the oversampled rows' [prompt | first tokens]. -> (host arrays by Rows field, with
    `quality_features` [sum(counts), E]; metrics `pruning/*`)."""
    pr, budget = config.pruning, config.sampling.max_new_tokens
    sampled_counts = counts * pr.oversample
    first = sample_completions(config, setup, params, prompt_tokens, prompt_mask, sampled_counts, key,
                               dataclasses.replace(setup.rollout_cfg, max_new_tokens=pr.checkpoint_tokens))
    prompt_of = np.repeat(np.arange(len(counts)), sampled_counts)  # host arrays: one transfer in, one out
    tokens = np.concatenate([prompt_tokens[prompt_of], first["completion_tokens"]], axis=1).astype(np.int32)
    mask = np.concatenate([prompt_mask[prompt_of], first["completion_mask"]], axis=1).astype(np.int32)
    features = np.asarray(jax.device_get(checkpoint_features(setup.model_cfg, params, tokens, mask)))
    logits = pruning_lib.quality_logits(jax.device_get(quality_head), features)  # the small head, on the host
    quality = 1.0 / (1.0 + np.exp(-logits))
    starts = np.concatenate([[0], np.cumsum(sampled_counts)[:-1]])
    kept = np.concatenate([start + pruning_lib.balanced_keep(quality[start:start + n][None], int(c), pr.target)[0]
                           for start, n, c in zip(starts, sampled_counts, counts)])
    rest = sample_completions(config, setup, params, tokens[kept], mask[kept].astype(bool),
                              np.ones(kept.size, int), jax.random.fold_in(key, _PRUNED_CONTINUATION_STREAM),
                              dataclasses.replace(setup.rollout_cfg, max_new_tokens=budget - pr.checkpoint_tokens))
    stopped = first["finished"][kept]  # decoded to their stop token already: the continuation is not theirs
    completions = {f: np.concatenate([first[f][kept], np.where(stopped[:, None], fill, rest[f])], axis=1)
                   for f, fill in (("completion_tokens", setup.rollout_cfg.pad_id), ("completion_mask", False),
                                   ("logprobs", 0.0))}
    completions["finished"] = stopped | rest["finished"]
    completions["quality_features"] = features[kept]
    dropped = np.setdiff1d(np.arange(quality.size), kept)
    metrics = {
        "pruning/sampled_rows": float(quality.size),
        "pruning/kept_rows": float(kept.size),
        "pruning/stopped_at_checkpoint": float(first["finished"].mean()),
        "pruning/kept_quality": float(quality[kept].mean()),
        "pruning/dropped_quality": float(quality[dropped].mean()) if dropped.size else 0.0,
        "pruning/decoded_tokens": float(first["completion_mask"].sum() + rest["completion_mask"][~stopped].sum()),
    }
    return completions, metrics


def _completions(rollout: sampling.Rollout) -> dict:
    """A rollout's completions as host arrays by Rows field, and its tokens' `temperatures` when it has them."""
    fields = ("completion_tokens", "completion_mask", "logprobs", "finished")
    fields += ("temperatures",) if rollout.temperatures is not None else ()
    return dict(zip(fields, jax.device_get(tuple(getattr(rollout, f) for f in fields))))


def temperature_metrics(temperatures, mask) -> dict:
    """The sampling temperatures of the completion tokens under HAPO's adaptive temperature (`temperatures` [N, T]
    host, None without it): temperature/{mean, min, max, std} over the tokens of `mask`."""
    if temperatures is None or not mask.any():
        return {}
    t = temperatures[mask > 0]
    return {"temperature/mean": float(t.mean()), "temperature/min": float(t.min()), "temperature/max": float(t.max()),
            "temperature/std": float(t.std())}


def tree_completions(config, setup: Setup, params, prompt_tokens, prompt_mask, key) -> tuple[dict, dict]:
    """Each prompt's group sampled as one EPTree (`sampling.tree.generate_tree`, config.tree): host arrays by Rows
    field (with the tree's `tree_nodes`) and the step's tree metrics (`tree_metrics`)."""
    shape = config_lib.tree_shape(config)
    params = setup.layout.sampler_params(params) if setup.layout else params
    out = sampling_tree.generate_tree(setup.model_cfg, params, jnp.asarray(prompt_tokens), jnp.asarray(prompt_mask),
                                      key, setup.rollout_cfg, shape)
    completions = _completions(out.rollout)
    completions["tree_nodes"], parent, fork, entropy = jax.device_get(
        (out.tree_nodes, out.parent, out.fork_position, out.entropy))
    return completions, tree_metrics(completions["completion_tokens"], completions["completion_mask"], parent, fork,
                                     entropy, shape.rows_per_prompt)


def search_completions(config, setup: Setup, params, prompt_tokens, prompt_mask, key, correct) -> tuple[dict, dict]:
    """Each prompt's group as the nodes of one DeepSearch tree (`sampling.mcts.search`, config.deepsearch; `correct`
    verifies its terminals): host arrays by Rows field (with `tree_nodes`, `node_q`, `node_terminal`) and the step's
    search metrics (`deepsearch/*`; EPTree's `tree_metrics` would be degenerate here: a child forks at its parent's
    end, never inside it)."""
    shape = config_lib.search_shape(config)
    params = setup.layout.sampler_params(params) if setup.layout else params
    out = mcts.search(setup.model_cfg, params, jnp.asarray(prompt_tokens), jnp.asarray(prompt_mask), key,
                      setup.rollout_cfg, shape, correct)
    fields = ("completion_tokens", "completion_mask", "logprobs", "finished", "tree_nodes", "node_q", "node_terminal")
    return {f: getattr(out, f) for f in fields}, out.metrics


def tree_metrics(tokens: np.ndarray, mask: np.ndarray, parent: np.ndarray, fork: np.ndarray, entropy: np.ndarray,
                 rows_per_prompt: int) -> dict:
    """What the tree search did: `tree/branches` (rows forked from another path), `tree/distinct_branches` (the
    fraction that differ from their parent's completion), `tree/branch_depth` (mean fork position: the tokens a
    branch shares with its parent), `tree/shared_token_frac` (copied prefix tokens / completion tokens),
    `tree/fork_entropy` (mean entropy of the sampling distribution at the fork points, in the source paths) against
    `tree/token_entropy` (mean over all completion tokens) and `tree/rows_per_prompt`."""
    branch = np.flatnonzero(parent >= 0)
    differs = [(tokens[r] != tokens[parent[r]]).any() or (mask[r] != mask[parent[r]]).any() for r in branch]
    return {
        "tree/fork_entropy": float(entropy[parent[branch], fork[branch]].mean()) if branch.size else 0.0,
        "tree/token_entropy": float(entropy[mask > 0].mean()) if mask.any() else 0.0,
        "tree/branches": float(branch.size),
        "tree/distinct_branches": float(np.mean(differs)) if branch.size else 0.0,
        "tree/branch_depth": float(fork[branch].mean()) if branch.size else 0.0,
        "tree/shared_token_frac": float(fork[branch].sum() / max(mask.sum(), 1)),
        "tree/rows_per_prompt": float(rows_per_prompt),
    }
