"""DeepSearch's replay buffer with solution caching (Wu et al. 2025, arXiv 2509.25454; read in the official code,
smiles724/DeepSearch: `deepsearch/register_replay_buffer.py` and `deepsearch/rollout/sglang_mcts_wrapper.py`).

The official code registers, between two training rounds, every question whose rollouts in the earlier round were
correct at a rate 0 < acc <= 0.25 together with its correct responses (the cached solutions). In the later round a
question in the buffer is not searched: it gets n direct rollouts of the whole response budget, the first
min(n, m) of them replaced by its m cached solutions, all verified (+1 correct, -1 otherwise); the other questions
are searched as usual.

Here the buffer is a traces file (`config.deepsearch.replay_path`, format `rl4llm.data.trace_file`; `python -m
experiments.export_traces --source=replay` registers one from a checkpoint's samples, `trace_file.replay_records`),
and a step (`search_or_replay`), with R = E·n rows per prompt:

  - the prompts not in the buffer are searched alone (`completions.search_completions` on that sub-batch), their
    node ids moved to their rows' places in the step (`shift_nodes`);
  - a prompt in the buffer gets R direct rollouts (`completions.sample_completions`, its own key stream), rows
    0 .. min(R, m) − 1 of its group replaced by its first cached solutions (re-encoded + eos) whose log-probs are
    the sampling params' (teacher-forced at the rollout temperature: verl's recomputed old log-probs, so the first
    update's ratio is 1 as for a sampled row); every row is a terminal node of its own (`flat_nodes`: its whole
    completion is its step) with q = +1 if the verifier accepts it, else −1, so Tree-GRPO gives it q − the group's
    mean q.

Logged: `deepsearch/replayed_prompts` (prompts of the step found in the buffer), `deepsearch/cached_rows` (rows
that are cached solutions). With no prompt of a step in the buffer the step is exactly the plain search.
Departures: the official buffer is built from the earlier round's MCTS rollouts, here from any checkpoint's direct
samples; the official run's overlong-buffer penalty on the buffered rows is not applied; the advantage of a
buffered group is Tree-GRPO's mean-only one (the official estimator for these groups was not read); each buffered
prompt's rows are re-verified every step (the cached ones are correct by registration, unless the verifier
changed).
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from rl4llm.config import validation as config_lib
from rl4llm.data import trace_file
from rl4llm.train import batches
from rl4llm.train import completions as completions_lib
from rl4llm.train import logprobs as logprobs_lib
from rl4llm.train.setup import Setup

_REPLAY_STREAM = 4003  # the buffered prompts' direct rollouts, independent of the search's draws


def flat_nodes(rows: np.ndarray, t_max: int) -> np.ndarray:
    """`tree_nodes` [len(rows), T+1] of rows that are each a terminal child of the root drawn from position 0 (the
    `rl.tree` encoding: node(r, ·) = r·(T+1) + 1 on every column, so `rl.tree.own_tokens` is 1 on all its tokens)."""
    return np.repeat((np.asarray(rows) * (t_max + 1) + 1)[:, None], t_max + 1, axis=1).astype(np.int32)


def shift_nodes(tree_nodes: np.ndarray, groups: np.ndarray, rows_per_prompt: int, t_max: int) -> np.ndarray:
    """A sub-batch's `tree_nodes` [len(groups)·R, T+1] (ids over its own rows) with its group j at the step's group
    groups[j]: every id of a group's rows moves by (groups[j] − j)·R·(T+1) (ids are row·(T+1) + offset)."""
    moved = (np.asarray(groups) - np.arange(len(groups))) * rows_per_prompt * (t_max + 1)
    return (tree_nodes + np.repeat(moved, rows_per_prompt)[:, None]).astype(np.int32)


@functools.partial(jax.jit, static_argnames=("model_cfg", "completion_len", "temperature"))
def _teacher_forced(model_cfg, params, tokens, attention_mask, completion_len: int, temperature: float):
    return logprobs_lib.completion_logprobs(model_cfg, params, tokens, attention_mask, completion_len,
                                            temperature=temperature)[0]


def replayed_rows(config, setup: Setup, params, prompt_tokens, prompt_mask, cached: list, key, verify) -> dict:
    """The buffered prompts' groups (module docstring) as host arrays by Rows field: R direct rollouts of each prompt
    [B, P] with its `cached[i]` solutions in its first rows, node fields of one terminal node per row (ids over these
    B·R rows). `verify(rows, tokens, mask)` -> [m] bool as in `sampling.mcts.search`."""
    r, t_max = config.rl.num_generations, config.sampling.max_new_tokens
    rows = {field: np.array(value) for field, value in completions_lib.sample_completions(  # writable copies
        config, setup, params, prompt_tokens, prompt_mask, np.full(len(cached), r), key, setup.rollout_cfg).items()}
    index = np.array([i * r + j for i, c in enumerate(cached) for j in range(min(r, len(c)))], int)
    if index.size:
        texts = [c[j] for c in cached for j in range(min(r, len(c)))]
        tokens, mask = batches.encode_completions(setup.tokenizer, texts, t_max)
        params = setup.layout.sampler_params(params) if setup.layout else params
        joined, attention = batches.join_sequences(prompt_tokens[index // r], prompt_mask[index // r], tokens, mask)
        logp = _teacher_forced(setup.model_cfg, params, joined, attention, t_max, setup.rollout_cfg.temperature or 1.0)
        rows["completion_tokens"][index], rows["completion_mask"][index] = tokens, mask > 0
        rows["logprobs"][index] = np.where(mask > 0, np.asarray(jax.device_get(logp)), 0.0)
        rows["finished"][index] = True
    all_rows = np.arange(len(cached) * r)
    correct = np.asarray(verify(all_rows, rows["completion_tokens"], rows["completion_mask"]), bool)
    return {**rows, "tree_nodes": flat_nodes(all_rows, t_max), "node_q": np.where(correct, 1.0, -1.0).astype(np.float32),
            "node_terminal": np.ones(len(all_rows), bool)}


def search_or_replay(config, setup: Setup, params, prompts: list, prompt_tokens, prompt_mask, key, verifier_for
                     ) -> tuple[dict, dict]:
    """The step's groups (module docstring): searched, or replayed when the prompt is in `setup.search_replay`;
    `verifier_for(groups)` -> the `verify` of those prompts' rows (`rollouts.search_verifier`). Host arrays by Rows
    field [B·R, ...] in prompt order, and the metrics."""
    buffer = setup.search_replay or {}
    cached = [buffer.get(trace_file.prompt_key(p), ()) for p in prompts]
    replayed = np.flatnonzero([len(c) > 0 for c in cached])
    if not replayed.size:
        everything = np.arange(len(prompts))
        return completions_lib.search_completions(config, setup, params, prompt_tokens, prompt_mask, key,
                                                  verifier_for(everything))
    r, t_max = config_lib.search_shape(config).rows_per_prompt, config.sampling.max_new_tokens
    searched = np.setdiff1d(np.arange(len(prompts)), replayed)
    parts, metrics = [], {}
    if searched.size:
        rows, metrics = completions_lib.search_completions(config, setup, params, prompt_tokens[searched],
                                                           prompt_mask[searched], key, verifier_for(searched))
        parts.append((searched, {**rows, "tree_nodes": shift_nodes(rows["tree_nodes"], searched, r, t_max)}))
    rows = replayed_rows(config, setup, params, prompt_tokens[replayed], prompt_mask[replayed],
                         [cached[i] for i in replayed], jax.random.fold_in(key, _REPLAY_STREAM),
                         verifier_for(replayed))
    parts.append((replayed, {**rows, "tree_nodes": shift_nodes(rows["tree_nodes"], replayed, r, t_max)}))
    metrics = {**metrics, "deepsearch/replayed_prompts": float(replayed.size),
               "deepsearch/cached_rows": float(sum(min(r, len(cached[i])) for i in replayed))}
    return place(parts, len(prompts) * r, r), metrics


def place(parts: list, num_rows: int, rows_per_prompt: int) -> dict:
    """Rows by field [num_rows, ...] from `parts` of (groups [g], rows by field [g·R, ...]): group j of a part at the
    step's group groups[j]."""
    merged = {}
    for groups, rows in parts:
        at = (np.asarray(groups)[:, None] * rows_per_prompt + np.arange(rows_per_prompt)).reshape(-1)
        for field, value in rows.items():
            merged.setdefault(field, np.zeros((num_rows, *value.shape[1:]), value.dtype))[at] = value
    return merged
