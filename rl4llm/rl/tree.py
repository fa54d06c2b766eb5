"""Advantages over tree groups (rows that share prefixes, `rl4llm.sampling.tree`): TreeRL's segment advantages (Hou
et al. 2025, "TreeRL: LLM Reinforcement Learning with On-Policy Tree Search", ACL 2025; THUDM/TreeRL), Tree-OPO's
staged advantage (arXiv 2509.09284), CURE's re-concatenated groups (arXiv 2508.11016), ETTRL's entropy-based
advantage reshaping (arXiv 2508.11356) and DeepSearch's Tree-GRPO over MCTS nodes (arXiv 2509.25454;
`rl4llm.sampling.mcts`).

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

`tree_opo` and `cure` also read which row drew each token, from the sampler's ids (`sampling.tree.node_ids`): the
node of a token drawn by row o has id o·(T+1) + 1 + s, so token t of row r is the row's own iff
tree_nodes[r, 1+t] // (T+1) = r (row r = its index in the batch, as the sampler returns the rows); the others are
the prefix it inherited from the path it forked from.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rl4llm.rl.advantages import group_mean, group_sum, grpo, to_members


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


def own_tokens(tree_nodes: jax.Array) -> jax.Array:  # [N, T+1] -> [N, T] float32
    """1 on the tokens a row drew itself, 0 on the prefix it inherited (module docstring: the sampler's ids)."""
    n, c = tree_nodes.shape
    return (tree_nodes[:, 1:] // c == jnp.arange(n)[:, None]).astype(jnp.float32)


TREE_OPO_BASELINES = ("expectation", "optimistic", "pessimistic")


def tree_opo(
    scores: jax.Array,  # [N] leaf rewards
    group_ids: jax.Array,  # [N]
    mask: jax.Array,  # [N, T]
    tree_nodes: jax.Array,  # [N, T+1] int32 (the sampler's ids, module docstring)
    *,
    num_groups: int,
    baseline: str = "expectation",
    alpha: float = 1.0,
) -> jax.Array:  # [N, T]
    """Tree-OPO's staged advantage estimation, its heuristic baselines (Huang, Nguyen & Zimmer 2025, "Tree-OPO:
    Off-policy Monte Carlo Tree-Guided Advantage Optimization for Multistep Reasoning", arXiv 2509.09284, §SAE):
    each row is a completion c_i of a prefix p_i (a stage of the tree), and

        V(p) = stat_{l ∈ L(p)} r(l)        L(p): the leaves (rows) whose path starts with p
        a_i = r_i − α·V(p_i),    A_i = a_i − mean_{j ∈ g(i)} a_j       (mean-centred over the group)

    with stat = mean ("expectation": the empirical success rate of p's subtree), max ("optimistic": a success
    below p) or min ("pessimistic": no failure below p). p_i is the prefix row i was forked after: the prompt for
    the initial paths and a branch forked at position 0 (L = the whole group), else the path up to its fork
    point (L = the rows through the node holding the last inherited token). A_i goes on the row's own tokens, 0 on
    the inherited prefix (the student trains on its completion of the prefix), 0 where mask is 0.

    Departures: the paper's prefixes are a teacher's offline MCTS states completed once by the student; here the
    tree is the policy's own (EPTree forks, on-policy), so V(p) comes from the leaves sampled in the same step.
    The quadratic-program projection (the paper's exact SAE, tree-order constraints) is not built; the heuristic
    baselines are the paper's cheap variants. No std division (the paper mean-centres).
    """
    if baseline not in TREE_OPO_BASELINES:
        raise ValueError(f"tree_opo: baseline must be one of {TREE_OPO_BASELINES}, got {baseline!r}")
    scores = jnp.asarray(scores, jnp.result_type(scores, jnp.float32))
    n, c = tree_nodes.shape
    own = own_tokens(tree_nodes)
    fork = jnp.sum(1.0 - own, axis=1).astype(jnp.int32)  # inherited tokens: the prefix's length
    ids = tree_nodes.reshape(-1)
    per_entry = jnp.repeat(scores, c)
    if baseline == "expectation":
        node_stat = _node_values(scores, tree_nodes)[0]  # [N, C]: V at every column
        group_stat = group_mean(scores, group_ids, num_groups)
    else:
        reduce = jax.ops.segment_max if baseline == "optimistic" else jax.ops.segment_min
        node_stat = reduce(per_entry, ids, num_segments=n * c)[ids].reshape(n, c)
        group_stat = reduce(scores, group_ids, num_segments=num_groups)
    prefix_value = jnp.where(fork > 0, jnp.take_along_axis(node_stat, fork[:, None], axis=1)[:, 0],
                             to_members(group_stat, group_ids, num_groups))
    staged = scores - alpha * prefix_value
    centred = staged - to_members(group_mean(staged, group_ids, num_groups), group_ids, num_groups)
    return centred[:, None] * own * mask


def cure(
    scores: jax.Array,  # [N]
    group_ids: jax.Array,  # [N]
    mask: jax.Array,  # [N, T]
    tree_nodes: jax.Array,  # [N, T+1] int32 (the sampler's ids, module docstring)
    *,
    num_groups: int,
    eps: float = 1e-6,
) -> jax.Array:  # [N, T]
    """CURE's stage-1 advantage (arXiv 2508.11016, "CURE: Critical-token-gUided Re-concatenation for
    Entropy-collapse prevention"; bytedance/CURE `recipe/CURE_First_Stage`): the n1 responses and the n1·n2
    continuations re-generated from prompt ⊕ response[:t*] form one group, normalised jointly (GRPO/DAPO),

        A_i = (r_i − mean_g r) / (std_g r + eps)      on the tokens row i drew, 0 on its re-concatenated prefix

    (the official continuation rows hold the prefix in their prompt, so only the continuation is trained; r_i here
    scores the whole path prefix ⊕ continuation, where the official reward reads the continuation's text only).
    """
    return grpo(scores, group_ids, num_groups=num_groups, eps=eps)[:, None] * own_tokens(tree_nodes) * mask


def ettrl(
    scores: jax.Array,  # [N] (TTRL: 1[answer = the group's majority answer])
    group_ids: jax.Array,  # [N]
    seq_metric: jax.Array,  # [N] each response's mean token entropy under the rollout policy, H_resp(o_i)
    *,
    num_groups: int,
    eps: float = 1e-6,
) -> jax.Array:  # [N]
    """ETTRL's entropy-based advantage reshaping, Adv-Res (Liu et al. 2025, "ETTRL: Balancing Exploration and
    Exploitation in LLM Test-Time Reinforcement Learning Via Entropy Mechanism", arXiv 2508.11356, §EAR):

        Y_i = 1 + (H̄_g − H_i) / H̄_g,     H̄_g = mean_{j ∈ g(i)} H_j,     A'_i = Y_i · A_i^GRPO

    so a response less certain than its group's average (H_i > H̄_g) has its advantage shrunk and a more certain
    one amplified, softening the early pseudo-labels' over-confident updates. Y is not clipped (the formula's;
    Y < 0 iff H_i > 2·H̄_g); a group with H̄_g = 0 gets Y = 1. Y ≡ 1 (equal entropies) is TTRL's GRPO. The
    paper's other variant, Adv-Clip (A clipped to [−β, β]), is not built.
    """
    entropy = jnp.asarray(seq_metric, jnp.float32)
    mean = to_members(group_mean(entropy, group_ids, num_groups), group_ids, num_groups)
    reshape = jnp.where(mean > 0, 1.0 + (mean - entropy) / jnp.where(mean > 0, mean, 1.0), 1.0)
    return reshape * grpo(scores, group_ids, num_groups=num_groups, eps=eps)


def soft_clip_q(q: jax.Array, *, eps_q: float = 1.0, q_max: float = 1.0) -> jax.Array:
    """DeepSearch's q-value soft clipping (arXiv 2509.25454, Eq. 13): q ← tanh(q / ε_q)·q_max, within (−q_max, q_max),
    monotone (the order of the q-values kept), for the intermediate nodes (the paper's ε_q = 1, q_max = 1)."""
    return jnp.tanh(jnp.asarray(q, jnp.float32) / eps_q) * q_max


def deepsearch(
    scores: jax.Array,  # [N] (unused: the search's q-values carry the verifier's outcome)
    group_ids: jax.Array,  # [N]
    mask: jax.Array,  # [N, T]
    tree_nodes: jax.Array,  # [N, T+1] int32 (the sampler's ids, module docstring)
    node_q: jax.Array,  # [N] the backed-up q of each row's node (terminals: q(s_end) = ±1)
    node_terminal: jax.Array,  # [N] bool: the row's node is terminal
    *,
    num_groups: int,
    eps_q: float = 1.0,
    q_max: float = 1.0,
) -> jax.Array:  # [N, T]
    """DeepSearch's Tree-GRPO advantage (Wu et al. 2025, "DeepSearch: Overcome the Bottleneck of RLVR via Monte Carlo
    Tree Search", arXiv 2509.25454, §4.3, Eq. 13 and 15): each row is one node s_j of a prompt's search tree
    (`rl4llm.sampling.mcts`), and on the tokens of its step (the row's own tokens; 0 on the inherited path)

        Â_j = q̃(s_j) − μ_t,    q̃ = tanh(q / ε_q)·q_max for intermediate nodes (`soft_clip_q`), q(s_end) = ±1 for
                                terminals,  μ_t = mean_{s ∈ S_end of the tree} q(s)

    (mean-only, "sequence-level" normalisation: no std division). A tree without terminals has μ_t = 0.
    Departure: μ_t averages q(s_end) ∈ {−1, +1} (Eq. 4's terminal values) where the paper says "the average reward
    of the terminal nodes"; with a 0/1 verifier the two differ by the affine map 2r − 1.
    """
    del scores
    terminal = jnp.asarray(node_terminal).astype(jnp.float32)
    q = jnp.where(terminal > 0, jnp.asarray(node_q, jnp.float32), soft_clip_q(node_q, eps_q=eps_q, q_max=q_max))
    mean = group_sum(q * terminal, group_ids, num_groups) / jnp.maximum(group_sum(terminal, group_ids, num_groups), 1.0)
    return (q - to_members(mean, group_ids, num_groups))[:, None] * own_tokens(tree_nodes) * mask
