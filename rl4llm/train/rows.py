"""Host-side rollout rows of one RL step (`Rows`) and the operations prompt selection composes them with: take,
concatenate (prompts re-padded on the left), replace whole groups (`replace_groups`)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np


@dataclasses.dataclass
class Rows:
    """Host-side rollout rows [n, ...] with their rewards; prompts left-padded to a multiple of the bucket."""

    prompt_tokens: np.ndarray  # [n, P] int32
    prompt_mask: np.ndarray  # [n, P] bool
    completion_tokens: np.ndarray  # [n, T] int32
    completion_mask: np.ndarray  # [n, T] bool
    logprobs: np.ndarray  # [n, T] float32 sampler (behaviour) log-probs
    finished: np.ndarray  # [n] bool
    scores: np.ndarray  # [n] float32 combined reward
    main: np.ndarray  # [n] float32 main (correctness) reward
    components: np.ndarray  # [n, K] float32
    hint_chars: np.ndarray  # [n] int32 reference-solution characters in the prompt
    fresh: np.ndarray  # [n] bool: generated this step (False: replayed)
    off_policy: np.ndarray  # [n] bool: an off-policy trace (the task's reference solution, rl.off_policy_traces)
    hint_tokens: np.ndarray  # [n] int32: leading completion tokens that are the hint, not sampled (Guide), else 0
    tree_nodes: np.ndarray | None = None  # [n, T+1] int32: tree rollouts' node ids (config.tree; rl.tree), else None
    node_q: np.ndarray | None = None  # [n] float32: the row's search-tree node's backed-up q (config.deepsearch), else None
    node_terminal: np.ndarray | None = None  # [n] bool: the row's search-tree node is terminal (config.deepsearch)
    solutions: np.ndarray | None = None  # [n] object: the row's example's reference solution (ReLIFT), else None
    process_scores: np.ndarray | None = None  # [n] float32: the process judge's score (task.flaw_judge; PROF), else None
    # [n, T] float32: each judged segment's label (or the learned PRM's score) on its last token (step rewards)
    step_scores: np.ndarray | None = None
    step_ends: np.ndarray | None = None  # [n, T] bool: the tokens that end a judged segment (task.step_reward), else None
    quality_features: np.ndarray | None = None  # [n, E] float32: the policy's hidden state at ARRoL's checkpoint, else None


def off_policy_tokens(rows: Rows) -> np.ndarray:
    """[n, T] bool: the completion tokens the policy did not sample: every token of an off-policy trace row and the
    hint's leading tokens of a row trained with its hint in the completion (`hints.hint_in_completion`)."""
    position = np.arange(rows.completion_tokens.shape[1])[None, :]
    return (rows.completion_mask > 0) & (rows.off_policy[:, None] | (position < rows.hint_tokens[:, None]))


def take(rows: Rows, idx: np.ndarray) -> Rows:
    """Rows `idx` (in that order)."""
    return Rows(**{f.name: _take(getattr(rows, f.name), idx) for f in dataclasses.fields(Rows)})


def _take(x: np.ndarray | None, idx: np.ndarray) -> np.ndarray | None:
    return None if x is None else x[idx]


def _left_pad(x: np.ndarray, width: int, value) -> np.ndarray:
    return np.concatenate([np.full((x.shape[0], width - x.shape[1]), value, x.dtype), x], axis=1)


def concat(parts: Sequence[Rows], pad_id: int) -> Rows:
    """Rows of all parts in order; prompts re-padded on the left to the widest part."""
    width = max(p.prompt_tokens.shape[1] for p in parts)
    out = {}
    for f in dataclasses.fields(Rows):
        arrays = [getattr(p, f.name) for p in parts]
        if any(a is None for a in arrays):  # an optional field (tree_nodes) is kept only when every part has it
            out[f.name] = None
            continue
        if f.name == "prompt_tokens":
            arrays = [_left_pad(a, width, pad_id) for a in arrays]
        elif f.name == "prompt_mask":
            arrays = [_left_pad(a, width, False) for a in arrays]
        out[f.name] = np.concatenate(arrays, axis=0)
    return Rows(**out)


def replace_groups(rows: Rows, hinted: Rows, targets: np.ndarray, sources: np.ndarray, g: int, pad_id: int) -> Rows:
    """`rows` with groups `targets` replaced by groups `sources` of `hinted` (G rows each)."""
    merged = concat([rows, hinted], pad_id)
    order = np.arange(rows.scores.size)
    offset = rows.scores.size
    for t, s in zip(targets, sources):
        order[t * g : (t + 1) * g] = offset + s * g + np.arange(g)
    return take(merged, order)
