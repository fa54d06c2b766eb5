"""Tree rollouts for single-turn reasoning: TreeRL's entropy-guided tree search, EPTree (Hou et al. 2025, "TreeRL:
LLM Reinforcement Learning with On-Policy Tree Search", §3.1; THUDM/TreeRL `EntropyGuidedChainLocalManager`).

Per prompt: M initial paths are sampled from the prompt (each the root path of its own tree); then, L times, each
tree's N most uncertain tokens (over the own tokens of every path of the tree) become fork points, and T branches
are decoded from each: a branch keeps its source path's tokens before the fork point (their KV-cache slots forked
with `models.fork_rows`, nothing re-prefilled) and re-draws the token at the fork point onward. Every path is a leaf
and one output row (its whole completion: the shared prefix copied, then its own tokens), so a prompt has

    R = M · (1 + L · N · T) rows       (static: `TreeShape.rows_per_prompt`; TreeRL's (6, 2, 1, 2) gives 30)

in this order: its M initial paths, then iteration 1's M·N·T branches (tree m, fork point n, branch t), then
iteration 2's, ... `TreeRollout.tree_nodes` encodes the tree for `rl4llm.rl.tree.treerl` (its module docstring).

As the official code: uncertainty = −log p of the sampled token (its "entropy", `get_max_entropy_tokens`), from
the sampler log-probs; top-N per tree over all its paths' own tokens (per-node top-N, then the tree's top-N; ties
go to the earlier row and position, `lax.top_k`, where the official descending tuple sort picks the later); a
position may be picked again in a later iteration (more siblings at that fork); fewer candidates than N: the best
one is repeated (its later `get_max_entropy_tokens`). Departures: a branch's own first token (the one its fork
re-drew) is not a candidate (the official tree gives such a fork an empty node, which this encoding has no
column for; forks at position 0 of an initial path, the same case at the tree's root, are kept); no text-based
candidate mask (the official code skips tokens after the words "answer" / "conclusion"); every leaf is returned.

The same tree serves two other papers through `TreeShape.criterion` (`FORK_CRITERIA`): ETTRL's ETMR (Liu et al.
2025, arXiv 2508.11356: M trees, each forked at its N highest-Shannon-entropy tokens into B branches, R = M(1 + BN))
and CURE's critical-token re-concatenation (arXiv 2508.11016; bytedance/CURE: each of n1 responses
forked once at a token drawn uniformly from its top-20 entropies, n2 continuations re-generated from prompt ⊕
response[:t*]: TreeShape(n1, 1, n2, 1, "critical")). CURE re-prefills the re-concatenated prompt; here the branch
forks the response's KV cache at t*, the same computation (tests/test_tree_methods.py checks it against a forward
over the re-concatenated prompt). The candidate filter of the official code (not a special token, decodes to more
than one visible character) is replaced by: not a stop token, not position 0.

Decoding: `generate`'s loop advances every row at one shared step; a branch continues from its own fork point, so
`_decode` keeps a position per row (each row's cache slot is prompt width + its position, one vmapped forward per
step) and returns the cache for the next iteration's forks. Token draws use `sample_tokens` with the key
fold_in(fold_in(key, iteration), decode step); the critical-token draw uses fold_in(fold_in(key, iteration),
2^30). Log-probs follow `sampling.sampler`'s convention; entropies are those of `token_entropy`.
"""
from __future__ import annotations

import dataclasses
import functools

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from rl4llm.models import KVCache, ModelConfig, Params, fork_rows, forward, init_cache, positions_from_mask, unembed
from rl4llm.sampling.sampler import Rollout, SamplingConfig, sample_tokens


# How a tree's fork points are chosen among the own tokens of its paths (`fork_points`):
#   "surprise": the N largest −log p of the sampled tokens (TreeRL's EPTree, its `get_max_entropy_tokens`);
#   "entropy":  the N largest Shannon entropies H_t = −Σ_v p_t(v) log p_t(v) of the sampling distributions (ETTRL's
#               ETMR, arXiv 2508.11356);
#   "critical": N drawn uniformly without replacement from the `top_k` largest entropies, position 0 and stop
#               tokens excluded (CURE's critical tokens, arXiv 2508.11016, bytedance/CURE
#               `get_critic_key_token_mask`: one of the top-20).
FORK_CRITERIA = ("surprise", "entropy", "critical")
# fold_in stream of the critical-token draw of an iteration (decode steps use 0 .. T-1 of the same iteration key)
_PICK_STREAM = 1 << 30


@dataclasses.dataclass(frozen=True)
class TreeShape:
    """EPTree's (M, N, L, T) and the fork-point criterion; frozen (a static argument of `generate_tree`).
    branch_points = 0 or iterations = 0 gives M independent paths per prompt."""

    initial_paths: int  # M
    branch_points: int  # N: fork points per tree per iteration
    branches: int  # T: branches decoded from each fork point
    iterations: int  # L
    criterion: str = "surprise"  # FORK_CRITERIA
    top_k: int = 20  # "critical": the candidates (largest entropies) the N fork points are drawn from (CURE: 20)

    def __post_init__(self):
        for name, low in (("initial_paths", 1), ("branch_points", 0), ("branches", 1), ("iterations", 0),
                          ("top_k", 1)):
            if getattr(self, name) < low:
                raise ValueError(f"TreeShape.{name} must be >= {low}, got {getattr(self, name)}.")
        if self.criterion not in FORK_CRITERIA:
            raise ValueError(f"TreeShape.criterion must be one of {FORK_CRITERIA}, got {self.criterion!r}.")
        if self.criterion == "critical" and self.top_k < self.branch_points:
            raise ValueError(f"TreeShape.top_k={self.top_k}: the N = {self.branch_points} critical tokens are drawn "
                             "without replacement from the top_k candidates; needs top_k >= branch_points.")

    @property
    def new_per_tree(self) -> int:
        """Branches a tree gains per iteration: N · T."""
        return self.branch_points * self.branches

    @property
    def rows_per_prompt(self) -> int:
        """R = M · (1 + L · N · T)."""
        return self.initial_paths * (1 + self.iterations * self.new_per_tree)

    def local_row(self, iteration: int, tree: int, index: int) -> int:
        """A prompt's row of path `index` of `tree` made in `iteration` (0: the initial path, index 0)."""
        if iteration == 0:
            return tree
        m, k = self.initial_paths, self.new_per_tree
        return m + (iteration - 1) * m * k + tree * k + index

    def made_in(self, iteration: int) -> np.ndarray:
        """[M, paths per tree] a prompt's rows made in `iteration` (0: [M, 1], the initial paths; else [M, N·T])."""
        per_tree = 1 if iteration == 0 else self.new_per_tree
        return np.array([[self.local_row(iteration, m, j) for j in range(per_tree)]
                         for m in range(self.initial_paths)], np.int32)

    def tree_rows(self, iteration: int) -> np.ndarray:
        """[M, 1 + iteration·N·T] a prompt's rows of each tree after `iteration` iterations."""
        return np.concatenate([self.made_in(i) for i in range(iteration + 1)], axis=1)


class TreeRollout(flax.struct.PyTreeNode):
    """The rows of a tree rollout ([B·R], prompt-major; `TreeShape` gives the order within a prompt).

    rollout:       the rows as a `Rollout` (prompts repeated; completion = the path's whole completion).
    entropy:       [B·R, T] float32, the Shannon entropy of the distribution each token was drawn from
                   (softmax(logits / temperature), before top-k/top-p/min-p; temperature 0: of the logits); 0 past
                   the completion. A branch's inherited tokens carry its parent's.
    tree_nodes:    [B·R, T+1] int32, the node of each position (`rl4llm.rl.tree`): column 0 the tree node, column
                   1 + t the segment holding token t; id = o·(T+1) + 1 + s for the segment of row o's own tokens
                   that starts at position s, the tree node's id is its first segment's unless a branch forked at
                   position 0 (then o·(T+1)).
    parent:        [B·R] int32, the row a branch was forked from (-1: an initial path).
    fork_position: [B·R] int32, the first token a branch drew itself (0 for initial paths); tokens before it are
                   its parent's.
    """

    rollout: Rollout
    entropy: jax.Array
    tree_nodes: jax.Array
    parent: jax.Array
    fork_position: jax.Array


class _Paths(flax.struct.PyTreeNode):
    """Decoding state of every row [B·R, ...] (rows not decoded yet hold their prompt's prefill)."""

    cache: KVCache
    tokens: jax.Array  # [R, T] int32
    logprobs: jax.Array  # [R, T] float32
    entropy: jax.Array  # [R, T] float32: of the distribution each token was drawn from
    emitted: jax.Array  # [R, T] bool
    finished: jax.Array  # [R] bool
    owner: jax.Array  # [R, T] int32: the row whose own draw token t is
    parent: jax.Array  # [R] int32
    fork: jax.Array  # [R] int32


def _step_logits(model_cfg: ModelConfig, params: Params, cache: KVCache, token, slot, position):
    """Feeds one token per row at the row's own cache slot and RoPE position ([n] each): next-token logits [n, V]
    and the updated cache (`forward` on each row as a batch of one)."""
    def one_row(row_cache, tok, row_slot, row_position):
        batch = jax.tree.map(lambda x: x[None], row_cache)
        hidden, batch = forward(model_cfg, params, tok.reshape(1, 1), row_position.reshape(1, 1),
                                jnp.ones((1, 1), bool), cache=batch, cache_index=row_slot)
        return unembed(model_cfg, params, hidden[0, 0]), jax.tree.map(lambda x: x[0], batch)

    return jax.vmap(one_row)(cache, token, slot, position)


def token_entropy(logits: jax.Array, cfg: SamplingConfig) -> jax.Array:  # [n, V] -> [n]
    """H = −Σ_v p(v) log p(v), p = softmax(logits / τ) (τ = cfg.temperature, 1 when greedy): the entropy of the
    distribution `sample_tokens` draws from before its filters (verl's `entropy_from_logits` of the
    temperature-scaled logits, which CURE's critical tokens rank)."""
    log_p = jax.nn.log_softmax(logits.astype(jnp.float32) / (cfg.temperature if cfg.temperature > 0 else 1.0), -1)
    return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)


def _decode(model_cfg: ModelConfig, params: Params, rows: _Paths, last_prompt_token, prompt_len, width: int,
            key, cfg: SamplingConfig, until=None) -> _Paths:
    """Decodes each row from its fork position to a stop token or the budget T (`rows` [n]: a batch of paths), or
    to position `until` [n] (exclusive; one reasoning step of `sampling.mcts`) when given.

    Step k feeds token pos−1 (the prompt's last token at pos 0) at slot width + pos − 1, RoPE position prompt_len +
    pos − 1, and draws token pos with fold_in(key, k); pos = fork + k on a live row."""
    t_max = cfg.max_new_tokens
    stop_ids = jnp.asarray(cfg.stop_token_ids, jnp.int32)
    index = jnp.arange(rows.tokens.shape[0])
    end = jnp.minimum(t_max if until is None else until, t_max)

    def body(state):
        k, pos, done, paths = state
        prev = jnp.where(pos > 0, paths.tokens[index, jnp.maximum(pos - 1, 0)], last_prompt_token)
        logits, cache = _step_logits(model_cfg, params, paths.cache, prev, width + pos - 1, prompt_len + pos - 1)
        token, logprob = sample_tokens(logits, jax.random.fold_in(key, k), cfg)
        entropy = token_entropy(logits, cfg)
        live, at = ~done, jnp.minimum(pos, t_max - 1)
        paths = paths.replace(
            cache=cache,
            tokens=paths.tokens.at[index, at].set(jnp.where(live, token, paths.tokens[index, at])),
            logprobs=paths.logprobs.at[index, at].set(jnp.where(live, logprob, paths.logprobs[index, at])),
            entropy=paths.entropy.at[index, at].set(jnp.where(live, entropy, paths.entropy[index, at])),
            emitted=paths.emitted.at[index, at].set(live | paths.emitted[index, at]),
            finished=paths.finished | (live & jnp.isin(token, stop_ids)))
        done = done | (live & (jnp.isin(token, stop_ids) | (pos + 1 >= end)))
        return k + 1, pos + live, done, paths

    def keep_going(state):
        return (state[0] < t_max) & ~jnp.all(state[2])

    done = jnp.zeros(rows.fork.shape, bool)
    return jax.lax.while_loop(keep_going, body, (jnp.int32(0), rows.fork, done, rows))[3]


def _truncate(rows: _Paths, fork: jax.Array, new_ids: jax.Array, parent: jax.Array, pad_id: int) -> _Paths:
    """Forked copies `rows` cut at their fork positions: tokens from `fork` on are cleared (re-drawn), the earlier
    tokens keep their owner; the kept rows become rows `new_ids` with parent `parent`."""
    before = jnp.arange(rows.tokens.shape[1])[None, :] < fork[:, None]
    return rows.replace(
        tokens=jnp.where(before, rows.tokens, pad_id), logprobs=jnp.where(before, rows.logprobs, 0.0),
        entropy=jnp.where(before, rows.entropy, 0.0), emitted=rows.emitted & before,
        finished=jnp.zeros_like(rows.finished),
        owner=jnp.where(before, rows.owner, new_ids[:, None]), parent=parent, fork=fork)


def fork_points(paths: _Paths, tree_rows: np.ndarray, shape: TreeShape, key, stop_ids=()
                ) -> tuple[jax.Array, jax.Array]:
    """Each tree's N fork points: (source row, position) [B, M, N] among the own tokens (position >= the row's
    fork, a branch's first own token excluded) of the tree's rows `tree_rows` [B, M, J], by `shape.criterion`
    (`FORK_CRITERIA`). Ties go to the earlier row and position (`lax.top_k`). Fewer candidates than N: the best
    one is repeated; none ("critical" on paths of one token): position 0 of the tree's first row (CURE's
    fallback, a re-draw from the prompt). "critical" draws with `key` and excludes position 0 and `stop_ids`."""
    t_max = paths.tokens.shape[1]
    position = jnp.arange(t_max)[None, :]
    own = (position > paths.fork[:, None]) | ((position == 0) & (paths.parent[:, None] < 0))
    candidate = own & paths.emitted
    score = -paths.logprobs if shape.criterion == "surprise" else paths.entropy
    if shape.criterion == "critical":
        candidate &= (position > 0) & ~jnp.isin(paths.tokens, jnp.asarray(stop_ids, jnp.int32))
    score = jnp.where(candidate, score, -jnp.inf)  # [rows, T]
    flat = score[tree_rows].reshape(*tree_rows.shape[:2], -1)  # [B, M, J·T]
    if shape.criterion == "critical":
        values, index = jax.lax.top_k(flat, min(shape.top_k, flat.shape[-1]))  # the K critical candidates
        draw = jnp.where(jnp.isfinite(values), jax.random.uniform(key, values.shape), -1.0)
        _, pick = jax.lax.top_k(draw, shape.branch_points)  # N of them uniformly, without replacement
        values, index = (jnp.take_along_axis(x, pick, axis=-1) for x in (values, index))
    else:
        values, index = jax.lax.top_k(flat, shape.branch_points)
    index = jnp.where(jnp.isfinite(values), index, index[..., :1])  # too few candidates: repeat the best
    source = jnp.take_along_axis(jnp.asarray(tree_rows), index // t_max, axis=-1)
    return source, index % t_max


def node_ids(owner: jax.Array, parent: jax.Array, fork: jax.Array, root: jax.Array) -> jax.Array:
    """`TreeRollout.tree_nodes` [R, T+1] from each row's token owners [R, T], parent [R], fork position [R] and the
    initial path of its tree `root` [R]: a segment of row o's own tokens runs between consecutive split points of o
    (its own fork and its branches' forks), s(o, t) = the last split point <= t; node(r, 1+t) = o·(T+1) + 1 +
    s(o, t) with o = owner(r, t)."""
    rows, t_max = owner.shape
    child = parent >= 0
    split = jnp.zeros((rows, t_max), bool).at[jnp.where(child, parent, 0), fork].max(child)
    split = split.at[jnp.arange(rows), fork].set(True)
    start = jax.lax.cummax(jnp.where(split, jnp.arange(t_max)[None, :], 0), axis=1)  # [R, T]
    segment = start.reshape(-1)[owner * t_max + jnp.arange(t_max)[None, :]]  # start[owner(r, t), t]
    tokens = owner * (t_max + 1) + 1 + segment
    forked_at_zero = jnp.zeros((rows,), bool).at[jnp.where(child, parent, 0)].max(child & (fork == 0))
    tree = root * (t_max + 1) + jnp.where(forked_at_zero[root], 0, 1)
    return jnp.concatenate([tree[:, None], tokens], axis=1).astype(jnp.int32)


def _initial_paths(model_cfg, params, prompt_tokens, prompt_mask, shape: TreeShape, cfg: SamplingConfig) -> _Paths:
    """Every row [B·R] with its prompt prefilled once and forked (`fork_rows`), nothing decoded yet."""
    b, p = prompt_tokens.shape
    t_max, rows = cfg.max_new_tokens, b * shape.rows_per_prompt
    _, cache = forward(model_cfg, params, prompt_tokens, positions_from_mask(prompt_mask), prompt_mask,
                       cache=init_cache(model_cfg, b, p + t_max), cache_index=0)
    cache = fork_rows(cache, jnp.repeat(jnp.arange(b), shape.rows_per_prompt))
    return _Paths(cache=cache, tokens=jnp.full((rows, t_max), cfg.pad_id, jnp.int32),
                  logprobs=jnp.zeros((rows, t_max), jnp.float32), entropy=jnp.zeros((rows, t_max), jnp.float32),
                  emitted=jnp.zeros((rows, t_max), bool),
                  finished=jnp.zeros((rows,), bool), owner=jnp.repeat(jnp.arange(rows)[:, None], t_max, axis=1),
                  parent=jnp.full((rows,), -1, jnp.int32), fork=jnp.zeros((rows,), jnp.int32))


def _grow(paths: _Paths, ids: np.ndarray, source, fork, parent, decode, key, pad_id: int) -> _Paths:
    """Rows `ids` [n] become copies of rows `source` [n] cut at `fork` [n] with parent `parent` [n], decoded
    (`decode(rows, key)`) from there."""
    branch = _truncate(fork_rows(paths, source), fork, jnp.asarray(ids), parent, pad_id)
    branch = decode(branch, key)
    return jax.tree.map(lambda full, new: full.at[ids].set(new), paths, branch)


@functools.partial(jax.jit, static_argnames=("model_cfg", "sampling_cfg", "shape"))
def generate_tree(model_cfg: ModelConfig, params: Params, prompt_tokens: jax.Array, prompt_mask: jax.Array,
                  key: jax.Array, sampling_cfg: SamplingConfig, shape: TreeShape) -> TreeRollout:
    """EPTree rollouts of prompts [B, P] (left-padded): B·R rows (module docstring), static shapes."""
    cfg, b, width = sampling_cfg, prompt_tokens.shape[0], prompt_tokens.shape[1]
    if cfg.temperature_tau > 0:
        raise ValueError("generate_tree: HAPO's adaptive temperature (temperature_tau > 0) is not supported.")
    r = shape.rows_per_prompt
    prompt_of_row = jnp.repeat(jnp.arange(b), r)
    prompt_mask = prompt_mask.astype(bool)
    prompt_len = prompt_mask.sum(-1).astype(jnp.int32)[prompt_of_row]
    last_token = prompt_tokens[:, -1].astype(jnp.int32)[prompt_of_row]

    def decode(rows, key, ids):
        return _decode(model_cfg, params, rows, last_token[ids], prompt_len[ids], width, key, cfg)

    def rows_of(local: np.ndarray) -> np.ndarray:  # a prompt's rows [M, J] -> the batch's rows [B, M, J]
        return np.arange(b)[:, None, None] * r + local[None]

    paths = _initial_paths(model_cfg, params, prompt_tokens, prompt_mask, shape, cfg)
    initial = rows_of(shape.made_in(0)).reshape(-1)
    zeros = jnp.zeros(initial.shape, jnp.int32)
    paths = _grow(paths, initial, jnp.asarray(initial), zeros, zeros - 1, functools.partial(decode, ids=initial),
                  jax.random.fold_in(key, 0), cfg.pad_id)
    for iteration in range(1, (shape.iterations if shape.new_per_tree else 0) + 1):
        pick_key = jax.random.fold_in(jax.random.fold_in(key, iteration), _PICK_STREAM)
        source, fork = fork_points(paths, rows_of(shape.tree_rows(iteration - 1)), shape, pick_key,
                                   cfg.stop_token_ids)  # [B, M, N]
        new = rows_of(shape.made_in(iteration)).reshape(-1)  # tree m, fork point n, branch t
        source, fork = (jnp.repeat(x.reshape(-1), shape.branches) for x in (source, fork))  # each point T times
        paths = _grow(paths, new, source, fork, source, functools.partial(decode, ids=new),
                      jax.random.fold_in(key, iteration), cfg.pad_id)
    return _tree_rollout(paths, prompt_tokens[prompt_of_row], prompt_mask[prompt_of_row], shape)


def _tree_rollout(paths: _Paths, prompt_tokens, prompt_mask, shape: TreeShape) -> TreeRollout:
    """The decoded rows as a TreeRollout."""
    rows, r = paths.tokens.shape[0], shape.rows_per_prompt
    root = (np.arange(rows) // r) * r + np.tile(_tree_of(shape), rows // r)  # each row's initial path
    rollout = Rollout(prompt_tokens=prompt_tokens.astype(jnp.int32), prompt_mask=prompt_mask,
                      completion_tokens=paths.tokens, completion_mask=paths.emitted, logprobs=paths.logprobs,
                      lengths=paths.emitted.sum(-1).astype(jnp.int32), finished=paths.finished,
                      num_decode_steps=jnp.int32(paths.tokens.shape[1] - 1))
    nodes = node_ids(paths.owner, paths.parent, paths.fork, jnp.asarray(root))
    return TreeRollout(rollout=rollout, entropy=paths.entropy * paths.emitted, tree_nodes=nodes,
                       parent=paths.parent, fork_position=paths.fork)


def _tree_of(shape: TreeShape) -> np.ndarray:
    """[R] the tree (initial path index) of each of a prompt's rows."""
    tree = np.zeros(shape.rows_per_prompt, np.int32)
    rows = shape.tree_rows(shape.iterations)  # [M, R / M]
    tree[rows] = np.arange(shape.initial_paths)[:, None]
    return tree
