"""TreeRL's tree advantages (Hou et al. 2025, "TreeRL: LLM Reinforcement Learning with On-Policy Tree Search",
ACL 2025; THUDM/TreeRL): per-token process advantages from a tree of rollouts that share prefixes.

Tree encoding (`tree_nodes[N, T+1]` int32, what `rl4llm.sampling.tree` returns for its rows)
--------------------------------------------------------------------------------------------
Each row is one leaf's whole path [prompt | completion]. Column 0 is the row's *tree node* (the root of the initial
path it descends from; TreeRL's tree-level node, which has no tokens when a branch forks at position 0); column
1 + t is the node (segment) holding completion token t. Node ids are ints in [0, N·(T+1)), unique in the batch
(nodes of different prompts never share an id), and the same id marks the same node in every row that passes
through it (a node occupies the same columns in all of them). Along a row a node is one run of equal ids; the
node's parent is the node of the column just before its run, and the run that starts at column 0 has the group's
root (the prompt: every row of `group_ids`) as its parent. Columns past the completion (mask 0) get advantage 0;
their ids must continue the row's last node or be the row's own (never another row's node: they would count the
row as one of its leaves).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rl4llm.rl.advantages import group_mean, to_members


def _node_values(scores: jax.Array, nodes: jax.Array):  # [N], [N, C]
    """V(k) = mean reward of the leaves (rows) through node k and |L(k)| their number, at every column [N, C], and
    where each run of a node starts. A row is counted once per node: at the first column of the node's run."""
    n, c = nodes.shape
    first = jnp.concatenate([jnp.ones((n, 1), bool), nodes[:, 1:] != nodes[:, :-1]], axis=1)
    ids = nodes.reshape(-1)
    weight = first.reshape(-1).astype(jnp.float32)
    leaves = jax.ops.segment_sum(weight, ids, num_segments=n * c)
    total = jax.ops.segment_sum(weight * jnp.repeat(scores, c), ids, num_segments=n * c)
    value = total / jnp.maximum(leaves, 1.0)
    return value[ids].reshape(n, c), leaves[ids].reshape(n, c), first


def treerl(
    scores: jax.Array,  # [N] leaf rewards
    group_ids: jax.Array,  # [N]
    mask: jax.Array,  # [N, T]
    tree_nodes: jax.Array,  # [N, T+1] int32 (module docstring)
    *,
    num_groups: int,
) -> jax.Array:  # [N, T]
    """TreeRL process advantages: every token gets the reward of the node (segment) holding it,

        V(s) = mean_{l ∈ L(s)} r(l)          L(s): the leaves (rows) whose path passes through node s
        GA(s) = V(s) − V(root),  LA(s) = V(s) − V(parent(s)),  R(s) = (GA(s) + LA(s)) / sqrt(|L(s)|)

    root = the prompt's group (all its rows), a tree node's parent is the root (TreeRL's virtual root over the M
    trees). This is the paper's formula (§3.2), as a verl port of TreeRL's tree code writes it
    (`path_from_root_to_node`: adv = (global_adv + local_adv) / sqrt(terminal_in_subtree), raw 0/1 leaf rewards,
    root.state_value = mean of all leaves, the token rewards passed to the loss as they are,
    `compute_process_advantage`): the tokens of a shared node appear in each of its |L(s)| rows, so sqrt(|L|)
    tempers their total weight. Without branching every row is one node under the root: R = 2·(r − mean_g r),
    twice Dr.GRPO's advantage.

    Departures from THUDM/TreeRL's own (OpenRLHF) code, which reaches its advantages through switches: no
    leave-one-out normalisation of leaf rewards (`leaf_normalize`), no step/token mean subtraction
    (`normalize_all_steps`), sqrt(|L|) divides GA + LA (its `weighted_value_style=sqrt` divides accumulated leaf
    sums), no "fill in" of zero local advantages (`fill_in_paths`), and every leaf is trained on
    (`use_all_terminals`; the paper's runs train on 16 of the 30 EPTree leaves, one correct leaf kept first).
    Node statistics are segment sums over the N·(T+1) possible ids (a scatter: `group_sum`'s dense one-hot
    contraction would be [N·(T+1), N·(T+1)]). Returns advantages [N, T], 0 where mask is 0.
    """
    scores = jnp.asarray(scores, jnp.result_type(scores, jnp.float32))
    value, leaves, first = _node_values(scores, tree_nodes)
    column = jnp.arange(tree_nodes.shape[1])[None, :]
    run_start = jax.lax.cummax(jnp.where(first, column, 0), axis=1)  # [N, C]
    root = to_members(group_mean(scores, group_ids, num_groups), group_ids, num_groups)[:, None]  # [N, 1]
    parent_value = jnp.where(run_start > 0,
                             jnp.take_along_axis(value, jnp.maximum(run_start - 1, 0), axis=1), root)
    reward = (2.0 * value - root - parent_value) / jnp.sqrt(jnp.maximum(leaves, 1.0))
    return reward[:, 1:] * mask
