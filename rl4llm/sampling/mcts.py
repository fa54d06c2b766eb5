"""DeepSearch's MCTS in training (Wu et al. 2025, "DeepSearch: Overcome the Bottleneck of Reinforcement Learning with
Verifiable Rewards via Monte Carlo Tree Search", arXiv 2509.25454, §3): a search tree over reasoning steps per
prompt, grown within a fixed budget, whose nodes are the rows trained by Tree-GRPO (`rl4llm.rl.tree.deepsearch`).

The search (`search`), per prompt, `SearchShape.expansions` = E rounds (the budget), all prompts in step:

1. selection: round 0 expands the root (the prompt); later rounds the frontier node of highest priority over the
   whole tree (global frontier selection, `frontier_priority` / `select_frontier`, Eq. 6-7), not a per-path UCT
   descent;
2. expansion: the node's KV cache is forked into n = `candidates` rows (`models.fork_rows` through
   `sampling.tree._grow`: the path is never re-prefilled) and each decodes one step of `step_tokens` tokens;
3. verification: a child that drew a stop token, or reached the token budget T (the maximum depth
   d_T = ceil(T / step_tokens)), is terminal and verified by `verify` (q(s_end) = +1 correct, -1 incorrect or
   incomplete, Eq. 4);
4. backup (`backup`, Eq. 3 and 5): every correct new terminal's path, or, when the round made terminals but none
   correct, the most confident negative's (`most_confident_negative`, Eq. 2).

Every node is one output row (its path [prompt | s_1 ... s_j]: the ancestors' tokens copied, then its own step), so a
prompt has R = E·n rows (static), round k's children at rows k·n ... k·n + n - 1. Generated tokens: at most
E·n·step_tokens per prompt (`SearchResult.metrics["deepsearch/generated_tokens"]` counts them).

Departures from the paper (whose code was not available to us; the paper's text was): a step is a fixed
`step_tokens`-token chunk (the paper's steps are the policy's own reasoning steps); an expansion adds the n
one-step children to the tree (the paper's "local UCT selection" among siblings, choosing which candidate to continue
in a rollout to a terminal, is not built: the siblings all stay in the frontier); when the frontier is empty (every
leaf terminal) the root is expanded again, so the budget is always spent; with several correct new terminals each
path is backed up (in row order); the mean entropy H̄(t(s)) of Eq. 2 is the mean token entropy over the path's
tokens (the paper averages per-step entropies, equal when the steps have equal lengths); Q_parent of the root's
children is 0 (the root is never backed up) and Q(s) = q(s)/N(s) is 0 for an unvisited node; a terminal that
reached the token budget without a stop token is verified like any other (the paper's "incomplete" gets −1; here
the verifier decides, and it rarely accepts such text). The replay buffer with cached solutions is
`rl4llm.train.search_replay` (config.deepsearch.replay_path: a buffered prompt is not searched; read in the
official code, smiles724/DeepSearch, for that part only); the progressive pass@K filtering of §4.1-4.2 and the
removal of garbled / repetitive negatives are not built.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from rl4llm.models import ModelConfig, Params
from rl4llm.sampling.sampler import SamplingConfig
from rl4llm.sampling.tree import _decode, _grow, _initial_paths, node_ids


@dataclasses.dataclass(frozen=True)
class SearchShape:
    """The search's budget and heuristics (frozen: a static argument of the expansion program)."""

    candidates: int  # n: children per expansion
    expansions: int  # E: expansions per prompt (the budget)
    step_tokens: int  # tokens per reasoning step
    gamma_min: float = 0.1  # γ_min of the depth decay (the paper's 0.1)
    quality: float = 0.4  # λ1 (the paper's default 0.4)
    uncertainty: float = 0.0  # λ2 (the paper's default 0; 0.4 in its ablation)
    depth: float = 0.01  # λ3 (the paper's default 0.01)

    def __post_init__(self):
        for name in ("candidates", "expansions", "step_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"SearchShape.{name} must be >= 1, got {getattr(self, name)}.")

    @property
    def rows_per_prompt(self) -> int:
        """R = E · n."""
        return self.expansions * self.candidates


# ---------------------------------------------------------------------------------------------------------------
# The paper's heuristics, as small pure functions (host numpy).


def depth_decay(i: int, l: int, gamma_min: float) -> float:
    """γ(i, l) = max(i / l, γ_min): the weight of the terminal's q at node i (1-based) of a path of l nodes (Eq. 3)."""
    return max(i / l, gamma_min)


def backup(q: np.ndarray, visits: np.ndarray, path: np.ndarray, q_end: float, gamma_min: float
           ) -> tuple[np.ndarray, np.ndarray]:
    """DeepSearch's heuristic backup (Eq. 5) of a terminal's q(s_end) along its path `path` = [s_1, ..., s_l] (node
    ids, s_l the terminal): for i < l, with g = γ(i, l) (`depth_decay`),

        q(s_i) <- q(s_i) + g·q_end     if q(s_i)·q_end >= 0
                  g·q_end              elif q_end > 0        (a correct path resets a negative node)
                  q(s_i)               elif q(s_i) > 0      (an incorrect path leaves a positive node as it is)

    and every node of the path (the terminal too) gets one visit. The terminal keeps its own q (Eq. 4).
    -> new (q, visits)."""
    q, visits = q.astype(np.float64).copy(), visits.copy()
    l = len(path)
    for i, node in enumerate(path[:-1], start=1):
        g = depth_decay(i, l, gamma_min)
        if q[node] * q_end >= 0:
            q[node] += g * q_end
        elif q_end > 0:
            q[node] = g * q_end
    visits[np.asarray(path)] += 1
    return q, visits


def most_confident_negative(mean_entropy: np.ndarray, incorrect: np.ndarray) -> int:
    """s_neg = argmin_{s incorrect} H̄(t(s)) (Eq. 2): the incorrect terminal whose root-to-leaf path has the lowest
    mean entropy (`mean_entropy` [nodes], `incorrect` [nodes] bool); ties go to the first; -1 if none."""
    if not incorrect.any():
        return -1
    return int(np.argmin(np.where(incorrect, mean_entropy, np.inf)))


def frontier_priority(parent_q: np.ndarray, parent_visits: np.ndarray, entropy: np.ndarray, depth: np.ndarray,
                      max_depth: int, quality: float, uncertainty: float, depth_weight: float) -> np.ndarray:
    """F(s) = λ1·tanh(Q_parent(s)) + λ2·H(π(s | o_s)) + λ3·sqrt(d(s) / d_T) (Eq. 7), Q = q / N the parent's mean
    backed-up value (0 unvisited), H the node's mean token entropy, d its depth (1 for the root's children)."""
    q_mean = np.where(parent_visits > 0, parent_q / np.maximum(parent_visits, 1), 0.0)
    return quality * np.tanh(q_mean) + uncertainty * entropy + depth_weight * np.sqrt(depth / max_depth)


def select_frontier(priority: np.ndarray, frontier: np.ndarray) -> int:
    """s* = argmax_{s ∈ F} F(s) over the frontier F (`frontier` [nodes] bool: no children, not terminal, d < d_T;
    Eq. 6); ties go to the first node; -1 when F is empty."""
    if not frontier.any():
        return -1
    return int(np.argmax(np.where(frontier, priority, -np.inf)))


# ---------------------------------------------------------------------------------------------------------------
# The search.


@dataclasses.dataclass
class _Tree:
    """One prompt's search tree: per node (= row of the prompt) [R]."""

    parent: np.ndarray  # int: the parent node, -1 for the root's children
    depth: np.ndarray  # int: 1 for the root's children
    made: np.ndarray  # bool: created so far
    terminal: np.ndarray  # bool
    correct: np.ndarray  # bool
    q: np.ndarray  # float: backed-up value (terminals: ±1)
    visits: np.ndarray  # int
    children: np.ndarray  # int
    entropy: np.ndarray  # float: the node's own mean token entropy
    path_entropy: np.ndarray  # float: the sum of token entropies along its path
    path_tokens: np.ndarray  # int: tokens along its path

    @classmethod
    def empty(cls, r: int) -> "_Tree":
        z = np.zeros(r)
        return cls(np.full(r, -1), np.zeros(r, int), z > 0, z > 0, z > 0, z.copy(), np.zeros(r, int),
                   np.zeros(r, int), z.copy(), z.copy(), np.zeros(r, int))

    def path(self, node: int) -> np.ndarray:
        """[s_1, ..., node]."""
        out = [node]
        while self.parent[out[-1]] >= 0:
            out.append(int(self.parent[out[-1]]))
        return np.asarray(out[::-1])


@dataclasses.dataclass
class SearchResult:
    """The rows [B·R] (host arrays) and what the search did."""

    completion_tokens: np.ndarray  # [B·R, T] the node's path
    completion_mask: np.ndarray  # [B·R, T] bool
    logprobs: np.ndarray  # [B·R, T] sampler log-probs (the ancestors' on the inherited tokens)
    finished: np.ndarray  # [B·R] bool: drew a stop token
    tree_nodes: np.ndarray  # [B·R, T+1] int32 (`rl.tree` encoding; the row's own step is its own node)
    node_q: np.ndarray  # [B·R] float32 raw backed-up q (terminals ±1)
    node_terminal: np.ndarray  # [B·R] bool
    parent: np.ndarray  # [B·R] the parent's row (-1: a child of the root)
    fork: np.ndarray  # [B·R] the first position the row drew itself
    metrics: dict


@functools.partial(jax.jit, static_argnames=("model_cfg", "cfg", "step_tokens", "width"))
def _expand(model_cfg: ModelConfig, params: Params, paths, ids, source, fork, parent, last_token, prompt_len, key,
            cfg: SamplingConfig, step_tokens: int, width: int):
    """Rows `ids` become copies of rows `source` cut at `fork` (KV cache forked), each decoding one step."""
    decode = functools.partial(_decode, model_cfg, params, last_prompt_token=last_token, prompt_len=prompt_len,
                               width=width, cfg=cfg, until=fork + step_tokens)
    return _grow(paths, ids, source, fork, parent, lambda rows, k: decode(rows, key=k), key, cfg.pad_id)


def _frontier(tree: _Tree, max_depth: int) -> np.ndarray:
    """F = {s made | ξ(s) = 0, s not terminal, d(s) < d_T} (Eq. 6), [R] bool."""
    return tree.made & (tree.children == 0) & ~tree.terminal & (tree.depth < max_depth)


def _select(tree: _Tree, shape: SearchShape, max_depth: int) -> int:
    """The node to expand next (-1: the root): the frontier's best, or the root when the frontier is empty."""
    frontier = _frontier(tree, max_depth)
    parent = np.maximum(tree.parent, 0)
    has_parent = tree.parent >= 0
    priority = frontier_priority(np.where(has_parent, tree.q[parent], 0.0), np.where(has_parent, tree.visits[parent], 0),
                                 tree.entropy, tree.depth, max_depth, shape.quality, shape.uncertainty, shape.depth)
    return select_frontier(priority, frontier)


def _record(tree: _Tree, new: np.ndarray, source: int, own: np.ndarray, entropy: np.ndarray, terminal: np.ndarray,
            correct: np.ndarray, gamma_min: float) -> str:
    """Adds the children `new` of `source` (-1: root) to the tree and backs up; -> "correct", "negative" or ""."""
    tree.made[new], tree.parent[new], tree.terminal[new], tree.correct[new] = True, source, terminal, correct
    tree.depth[new] = 1 if source < 0 else tree.depth[source] + 1
    if source >= 0:
        tree.children[source] += len(new)
    count = own.sum(-1)
    total = (entropy * own).sum(-1)
    tree.entropy[new] = total / np.maximum(count, 1)
    tree.path_entropy[new] = total + (tree.path_entropy[source] if source >= 0 else 0.0)
    tree.path_tokens[new] = count + (tree.path_tokens[source] if source >= 0 else 0)
    tree.q[new] = np.where(terminal, np.where(correct, 1.0, -1.0), 0.0)
    if (terminal & correct).any():
        chosen, kind = new[terminal & correct], "correct"
    else:
        mean = tree.path_entropy[new] / np.maximum(tree.path_tokens[new], 1)
        neg = most_confident_negative(mean, terminal & ~correct)
        chosen, kind = (new[[neg]], "negative") if neg >= 0 else (new[:0], "")
    for node in chosen:
        tree.q, tree.visits = backup(tree.q, tree.visits, tree.path(int(node)), float(tree.q[node]), gamma_min)
    return kind


def search(model_cfg: ModelConfig, params: Params, prompt_tokens: jax.Array, prompt_mask: jax.Array, key: jax.Array,
           cfg: SamplingConfig, shape: SearchShape, verify: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
           ) -> SearchResult:
    """DeepSearch's MCTS for prompts [B, P] (left-padded): B·R rows (module docstring). `verify(rows, tokens, mask)`
    -> [m] bool: whether each terminal row (indices into the B·R rows, with its completion [m, T]) is correct."""
    b, width = prompt_tokens.shape
    r, n, t_max = shape.rows_per_prompt, shape.candidates, cfg.max_new_tokens
    if cfg.temperature_tau > 0:
        raise ValueError("deepsearch: HAPO's adaptive temperature (temperature_tau > 0) is not supported.")
    max_depth = math.ceil(t_max / shape.step_tokens)
    prompt_mask = jnp.asarray(prompt_mask).astype(bool)
    prompt_of_row = np.repeat(np.arange(b), r)
    prompt_len = np.asarray(prompt_mask.sum(-1), np.int32)[prompt_of_row]
    last_token = np.asarray(prompt_tokens)[:, -1].astype(np.int32)[prompt_of_row]
    paths = _initial_paths(model_cfg, params, jnp.asarray(prompt_tokens), prompt_mask, shape, cfg)
    trees = [_Tree.empty(r) for _ in range(b)]
    counts = {"root": 0, "correct": 0, "negative": 0, "frontier": 0}
    for k in range(shape.expansions):
        local = k * n + np.arange(n)
        picks = [_select(tree, shape, max_depth) if k else -1 for tree in trees]
        if k:
            counts["root"] += sum(p < 0 for p in picks)
            counts["frontier"] += sum(int(_frontier(tree, max_depth).sum()) for tree in trees)
        ids = (np.arange(b)[:, None] * r + local[None]).reshape(-1)
        source = np.array([[p0 * r + (p if p >= 0 else loc) for loc in local] for p0, p in enumerate(picks)]).reshape(-1)
        parent = np.repeat([p0 * r + p if p >= 0 else -1 for p0, p in enumerate(picks)], n)
        fork = np.repeat([trees[p0].depth[p] * shape.step_tokens if p >= 0 else 0 for p0, p in enumerate(picks)], n)
        paths = _expand(model_cfg, params, paths, jnp.asarray(ids), jnp.asarray(source), jnp.asarray(fork, jnp.int32),
                        jnp.asarray(parent, jnp.int32), jnp.asarray(last_token[ids]), jnp.asarray(prompt_len[ids]),
                        jax.random.fold_in(key, k), cfg, shape.step_tokens, width)
        tokens, emitted, finished, entropy = (np.asarray(x) for x in jax.device_get(
            (paths.tokens[ids], paths.emitted[ids], paths.finished[ids], paths.entropy[ids])))
        own = emitted & (np.arange(t_max)[None, :] >= fork[:, None])
        terminal = finished | (fork + shape.step_tokens >= t_max)
        correct = np.zeros(len(ids), bool)
        if terminal.any():
            correct[terminal] = np.asarray(verify(ids[terminal], tokens[terminal], emitted[terminal]), bool)
        for p0, tree in enumerate(trees):
            rows = slice(p0 * n, (p0 + 1) * n)
            kind = _record(tree, local, picks[p0], own[rows], entropy[rows], terminal[rows], correct[rows],
                           shape.gamma_min)
            if kind:
                counts[kind] += 1
    return _result(paths, trees, shape, counts, b)


def _result(paths, trees: list[_Tree], shape: SearchShape, counts: dict, b: int) -> SearchResult:
    """The search's rows as host arrays, and its metrics."""
    r = shape.rows_per_prompt
    tokens, emitted, logprobs, finished, owner, fork = (np.asarray(x) for x in jax.device_get(
        (paths.tokens, paths.emitted, paths.logprobs, paths.finished, paths.owner, paths.fork)))
    offset = np.repeat(np.arange(b) * r, r)
    local_parent = np.concatenate([t.parent for t in trees])
    parent = np.where(local_parent >= 0, offset + local_parent, -1)
    root = np.concatenate([[t.path(i)[0] for i in range(r)] for t in trees]) + offset
    nodes = np.asarray(node_ids(jnp.asarray(owner), jnp.asarray(parent), jnp.asarray(fork), jnp.asarray(root)))
    own = emitted & (np.arange(tokens.shape[1])[None, :] >= fork[:, None])
    solved = [bool(t.correct.any()) for t in trees]
    metrics = {
        "deepsearch/expansions": float(b * shape.expansions),
        "deepsearch/generated_tokens": float(own.sum()),
        "deepsearch/shared_token_frac": float(1.0 - own.sum() / max(emitted.sum(), 1)),  # inherited path tokens
        "deepsearch/solved_by_search": float(np.mean(solved)),
        "deepsearch/correct_backups": float(counts["correct"]),
        "deepsearch/negative_backups": float(counts["negative"]),
        "deepsearch/visited_nodes": float(np.mean([(t.visits > 0).sum() for t in trees])),
        "deepsearch/root_reexpansions": float(counts["root"]),
        "deepsearch/frontier_size": counts["frontier"] / max(b * max(shape.expansions - 1, 1), 1),
        "deepsearch/max_depth": float(max(t.depth.max() for t in trees)),
        "deepsearch/terminal_frac": float(np.mean(np.concatenate([t.terminal for t in trees]))),
    }
    return SearchResult(
        completion_tokens=tokens, completion_mask=emitted, logprobs=logprobs, finished=finished, tree_nodes=nodes,
        node_q=np.concatenate([t.q for t in trees]).astype(np.float32),
        node_terminal=np.concatenate([t.terminal for t in trees]), parent=parent, fork=fork, metrics=metrics)
