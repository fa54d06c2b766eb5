"""TreeRL tree rollouts: the advantage kernel (`rl.tree.treerl`) on hand-built trees and against a transcription of
the official tree code, the EPTree sampler (`sampling.tree.generate_tree`), the config section and a nano run."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm.models import apply, positions_from_mask
from rl4llm.rl import advantages, registry
from rl4llm.rl import tree as tree_lib
from rl4llm.sampling import SamplingConfig, generate, pad_prompts
from rl4llm.sampling.tree import TreeShape, generate_tree, node_ids
from tests.test_sampling import CFG, params  # the perturbed model the sampler tests use

treerl = jax.jit(tree_lib.treerl, static_argnames="num_groups")


# ----------------------------------------------------------------------------------------------------------------
# The kernel on hand-built trees


def test_hand_built_tree():
    """One prompt, two trees. Tree 0: row 0 (reward 1) with rows 1, 2 (reward 0) forked at position 2; tree 1: row 3
    (reward 1, 3 tokens). Nodes: A = row 0's [0, 2) (the tree node, 3 leaves), B / C / D = rows 0 / 1 / 2's [2, 4),
    E = row 3. V(root) = 2/4 = 0.5, V(A) = 1/3, V(B) = 1, V(C) = V(D) = 0, V(E) = 1:
      R(A) = (2·(1/3) − 0.5 − 0.5)/√3 = −0.19245, R(B) = (1 − 0.5) + (1 − 1/3) = 1.16667,
      R(C) = R(D) = (0 − 0.5) + (0 − 1/3) = −0.83333, R(E) = (1 − 0.5) + (1 − 0.5) = 1."""
    a, b, c, d, e = 1, 2, 3, 4, 5
    nodes = jnp.array([[a, a, a, b, b], [a, a, a, c, c], [a, a, a, d, d], [e, e, e, e, 0]], jnp.int32)
    mask = jnp.array([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0]], jnp.float32)
    got = treerl(jnp.array([1.0, 0.0, 0.0, 1.0]), jnp.zeros(4, jnp.int32), mask, nodes, num_groups=1)
    ra, rb, rc = -1 / 3 / math.sqrt(3), 0.5 + 2 / 3, -0.5 - 1 / 3
    want = [[ra, ra, rb, rb], [ra, ra, rc, rc], [ra, ra, rc, rc], [1.0, 1.0, 1.0, 0.0]]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_tree_node_without_tokens_is_the_parent_of_forks_at_position_zero():
    """Row 1 branches from row 0 at position 0: the tree node X (column 0 only, V = mean(1, 0) = 0.5) is the parent
    of both rows' segments; tree 1 (row 2, reward 1) makes V(root) = 2/3 != V(X).
      R(Y) = (1 − 2/3) + (1 − 0.5) = 0.83333, R(Z) = (0 − 2/3) + (0 − 0.5) = −1.16667, R(W) = 2·(1 − 2/3)."""
    x, y, z, w = 7, 8, 9, 10
    nodes = jnp.array([[x, y, y, y], [x, z, z, z], [w, w, w, w]], jnp.int32)
    got = treerl(jnp.array([1.0, 0.0, 1.0]), jnp.zeros(3, jnp.int32), jnp.ones((3, 3)), nodes, num_groups=1)
    np.testing.assert_allclose(got, np.array([[5 / 6] * 3, [-7 / 6] * 3, [2 / 3] * 3]), rtol=1e-6)


def test_without_branching_it_is_twice_dr_grpo():
    """Every row its own tree of one node under the root: R = (r − μ_g) + (r − μ_g) = 2·Dr.GRPO on every token."""
    rng = np.random.default_rng(0)
    n, t = 12, 5
    scores = jnp.asarray(rng.normal(size=n), jnp.float32)
    groups = jnp.asarray(rng.integers(0, 3, n))
    mask = jnp.asarray(rng.random((n, t)) < 0.8, jnp.float32).at[:, 0].set(1.0)
    nodes = jnp.repeat(jnp.arange(n)[:, None] * (t + 1), t + 1, axis=1).astype(jnp.int32)
    got = treerl(scores, groups, mask, nodes, num_groups=3)
    want = 2 * advantages.grpo(scores, groups, num_groups=3, normalize_std=False)[:, None] * mask
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_all_equal_rewards_give_zero_and_jit_equals_eager():
    nodes = jnp.array([[1, 1, 2, 2], [1, 1, 3, 3], [4, 4, 4, 4]], jnp.int32)
    mask = jnp.ones((3, 3))
    zero = treerl(jnp.ones(3), jnp.zeros(3, jnp.int32), mask, nodes, num_groups=1)
    np.testing.assert_array_equal(zero, 0.0)
    scores = jnp.array([0.3, 1.0, 0.0])
    np.testing.assert_allclose(tree_lib.treerl(scores, jnp.zeros(3, jnp.int32), mask, nodes, num_groups=1),
                               treerl(scores, jnp.zeros(3, jnp.int32), mask, nodes, num_groups=1), rtol=1e-6)


def test_registered_and_declares_tree_nodes():
    assert "tree_nodes" in registry.advantage_inputs("treerl")
    nodes = jnp.array([[1, 1, 2], [1, 1, 3]], jnp.int32)
    got = registry.get_advantage("treerl")(jnp.array([1.0, 0.0]), jnp.zeros(2, jnp.int32), jnp.ones((2, 2)),
                                           num_groups=1, tree_nodes=nodes)
    np.testing.assert_allclose(got, [[0.0, 1.0], [0.0, -1.0]], atol=1e-6)  # shared token: V = root, 2 leaves


# ----------------------------------------------------------------------------------------------------------------
# An independent transcription of the official tree code (THUDM/TreeRL `build_into_tree_format`: a path's own
# tokens split at its branches' split indices, `leaf_backpropagate`, `path_from_root_to_node`)


class _Node:
    def __init__(self, positions, parent, leaf=None):
        self.positions, self.parent, self.children, self.leaf = positions, parent, [], leaf
        self.leaves = []


def _official_tree(parent, fork, lengths):
    """The official MCTS-node tree of a prompt's paths (row r: branch of parent[r] at position fork[r])."""
    root, leaves = _Node([], None), {}

    def build(row, attach_to):
        children = sorted((c for c in range(len(parent)) if parent[c] == row), key=lambda c: fork[c])
        splits = [fork[c] for c in children] + [lengths[row]]
        first = _Node(list(range(fork[row], splits[0])), attach_to, row if not children else None)
        current, i = first, 0
        while i < len(children):
            split, group = fork[children[i]], []
            while i < len(children) and fork[children[i]] == split:
                group.append(children[i])
                i += 1
            end = fork[children[i]] if i < len(children) else lengths[row]
            segment = _Node(list(range(split, end)), current, row if i == len(children) else None)
            current.children.append(segment)
            for child in group:
                current.children.append(build(child, current))
            current = segment
        return first

    for row in range(len(parent)):
        if parent[row] < 0:
            root.children.append(build(row, root))

    def collect(node):
        if node.leaf is not None:
            leaves[node.leaf] = node
        for child in node.children:
            collect(child)
    collect(root)
    for row, leaf in leaves.items():
        node = leaf
        while node is not None:
            node.leaves.append(row)
            node = node.parent
    return root, leaves


def official_advantages(scores, parent, fork, lengths, t_max):
    """Per-token TreeRL advantages [R, T] of one prompt's rows: adv = (global + local) / sqrt(|L|) of each node."""
    root, leaves = _official_tree(parent, fork, lengths)
    value = lambda node: np.mean([scores[r] for r in node.leaves])  # noqa: E731
    out = np.zeros((len(scores), t_max))
    for row, node in leaves.items():
        while node.parent is not None:
            adv = (2 * value(node) - value(root) - value(node.parent)) / math.sqrt(len(node.leaves))
            out[row, node.positions] = adv
            node = node.parent
    return out


def _owners(parent, fork, t_max):
    owner = np.repeat(np.arange(len(parent))[:, None], t_max, axis=1)
    for row in range(len(parent)):  # parents come first
        if parent[row] >= 0:
            owner[row, : fork[row]] = owner[parent[row], : fork[row]]
    return owner


def _random_tree(rng, rows, t_max):
    """A random prompt tree under the sampler's rules: a branch forks at an own token of its parent after the
    parent's first own token (an initial path: any token)."""
    parent, fork, lengths = [-1, -1], [0, 0], [int(rng.integers(1, t_max + 1)) for _ in range(2)]
    while len(parent) < rows:
        src = int(rng.integers(len(parent)))
        low = fork[src] + (1 if parent[src] >= 0 else 0)
        if low >= lengths[src]:
            continue
        parent.append(src)
        fork.append(int(rng.integers(low, lengths[src])))
        lengths.append(int(rng.integers(fork[-1] + 1, t_max + 1)))
    return np.array(parent), np.array(fork), np.array(lengths)


@pytest.mark.parametrize("seed", range(6))
def test_kernel_with_sampler_encoding_matches_the_official_tree(seed):
    rng = np.random.default_rng(seed)
    t_max, rows = 7, 9
    parent, fork, lengths = _random_tree(rng, rows, t_max)
    scores = rng.integers(0, 2, rows).astype(np.float32)
    root = np.array([r if parent[r] < 0 else 0 for r in range(rows)])
    for r in range(rows):
        if parent[r] >= 0:
            root[r] = root[parent[r]]
    nodes = node_ids(jnp.asarray(_owners(parent, fork, t_max)), jnp.asarray(parent), jnp.asarray(fork),
                     jnp.asarray(root))
    mask = (np.arange(t_max)[None, :] < lengths[:, None]).astype(np.float32)
    got = treerl(jnp.asarray(scores), jnp.zeros(rows, jnp.int32), jnp.asarray(mask), nodes, num_groups=1)
    np.testing.assert_allclose(got, official_advantages(scores, parent, fork, lengths, t_max), atol=1e-5)


# ----------------------------------------------------------------------------------------------------------------
# The EPTree sampler

T = 8
STOPPING = SamplingConfig(max_new_tokens=T, temperature=1.0, stop_token_ids=tuple(range(0, 50, 7)), pad_id=49)


@functools.cache
def prompts():
    return pad_prompts([[5, 9, 2], [11, 3, 7, 8, 20, 1]], pad_id=0, bucket_multiple=4)


@functools.cache
def tree_rollout(shape: TreeShape, cfg: SamplingConfig = STOPPING, key: int = 0):
    tokens, mask = prompts()
    return generate_tree(CFG, params(), jnp.asarray(tokens), jnp.asarray(mask), jax.random.key(key), cfg, shape)


SHAPE = TreeShape(initial_paths=2, branch_points=2, branches=2, iterations=2)


@pytest.mark.parametrize("shape", [SHAPE, TreeShape(3, 1, 2, 1), TreeShape(4, 0, 2, 3)])
def test_static_row_count(shape):
    out = tree_rollout(shape)
    rows = 2 * shape.initial_paths * (1 + shape.iterations * shape.branch_points * shape.branches)
    assert shape.rows_per_prompt * 2 == rows
    assert out.rollout.completion_tokens.shape == (rows, T)
    assert out.tree_nodes.shape == (rows, T + 1)
    assert out.rollout.prompt_tokens.shape == (rows, prompts()[0].shape[1])
    branches = np.asarray(out.parent) >= 0
    assert branches.sum() == rows - 2 * shape.initial_paths  # every row past the initial paths is a branch


def test_branches_copy_their_parents_prefix_and_redraw_from_the_fork():
    out = tree_rollout(SHAPE)
    r = out.rollout
    tokens, logprobs, mask = (np.asarray(x) for x in (r.completion_tokens, r.logprobs, r.completion_mask))
    parent, fork = np.asarray(out.parent), np.asarray(out.fork_position)
    per_prompt = SHAPE.rows_per_prompt
    for row in np.flatnonzero(parent >= 0):
        p, f = parent[row], fork[row]
        assert p // per_prompt == row // per_prompt and p < row  # same prompt, forked from an earlier path
        assert mask[p, f] and mask[row, f]  # forked at a token of the parent; the branch drew its own there
        np.testing.assert_array_equal(tokens[row, :f], tokens[p, :f])
        np.testing.assert_array_equal(logprobs[row, :f], logprobs[p, :f])
        assert mask[row, :f].all()
    np.testing.assert_array_equal(r.prompt_tokens, np.repeat(prompts()[0], per_prompt, axis=0))
    assert (fork[parent >= 0] > 0).any()  # rows really share prefixes


def test_branch_logprobs_equal_a_teacher_forced_forward():
    """The sampler's log-probs of every row (initial paths and branches decoded from forked caches) equal the
    learner's full forward over [prompt | completion] within 1e-4."""
    r = tree_rollout(SHAPE).rollout
    tokens = jnp.concatenate([r.prompt_tokens, r.completion_tokens], axis=1)
    mask = jnp.concatenate([r.prompt_mask, r.completion_mask], axis=1)
    logits = apply(CFG, params(), tokens, positions_from_mask(mask), mask)[0]
    p = r.prompt_tokens.shape[1]
    logp = jax.nn.log_softmax(logits[:, p - 1:-1], axis=-1)
    forced = jnp.take_along_axis(logp, r.completion_tokens[..., None], axis=-1)[..., 0] * r.completion_mask
    np.testing.assert_allclose(forced, r.logprobs, atol=1e-4)


def test_greedy_tree_rows_equal_the_greedy_sampler():
    """Greedy (temperature 0): the initial paths and every branch (re-drawn by argmax from its forked cache) equal
    `generate`'s greedy completion of the prompt."""
    greedy = SamplingConfig(max_new_tokens=T, temperature=0.0, stop_token_ids=STOPPING.stop_token_ids, pad_id=49)
    out = tree_rollout(SHAPE, greedy)
    tokens, mask = prompts()
    want = generate(CFG, params(), jnp.asarray(tokens), jnp.asarray(mask), jax.random.key(0), greedy)
    index = np.repeat(np.arange(2), SHAPE.rows_per_prompt)
    np.testing.assert_array_equal(out.rollout.completion_tokens, np.asarray(want.completion_tokens)[index])
    np.testing.assert_array_equal(out.rollout.completion_mask, np.asarray(want.completion_mask)[index])
    np.testing.assert_allclose(out.rollout.logprobs, np.asarray(want.logprobs)[index], atol=1e-5)


def test_fork_points_are_each_trees_most_surprising_tokens():
    """One iteration: tree m's N fork positions are the N largest −log p of its initial path (each drawn T times)."""
    shape = TreeShape(initial_paths=2, branch_points=2, branches=3, iterations=1)
    out = tree_rollout(shape)
    logprobs, mask = np.asarray(out.rollout.logprobs), np.asarray(out.rollout.completion_mask)
    parent, fork = np.asarray(out.parent), np.asarray(out.fork_position)
    for row in np.flatnonzero(parent < 0):
        surprise = np.where(mask[row], -logprobs[row], -np.inf)
        best = np.sort(surprise)[::-1][: shape.branch_points]
        best = np.where(np.isfinite(best), best, best[0])  # fewer candidates than N: the best one repeated
        picked = fork[parent == row]
        assert len(picked) == shape.branch_points * shape.branches
        np.testing.assert_allclose(np.sort(surprise[picked])[::-1][:: shape.branches], best)


def test_sampler_tree_nodes_match_the_official_tree():
    out = tree_rollout(SHAPE)
    r = out.rollout
    scores = np.asarray(jax.random.bernoulli(jax.random.key(5), 0.5, (r.completion_tokens.shape[0],)), np.float32)
    groups = np.repeat(np.arange(2), SHAPE.rows_per_prompt)
    got = treerl(jnp.asarray(scores), jnp.asarray(groups), r.completion_mask.astype(jnp.float32), out.tree_nodes,
                 num_groups=2)
    per = SHAPE.rows_per_prompt
    parent, fork, lengths = np.asarray(out.parent), np.asarray(out.fork_position), np.asarray(r.lengths)
    for g in range(2):
        rows = slice(g * per, (g + 1) * per)
        local_parent = np.where(parent[rows] >= 0, parent[rows] - g * per, -1)
        want = official_advantages(scores[rows], local_parent, fork[rows], lengths[rows], T)
        np.testing.assert_allclose(got[rows], want, atol=1e-5)


# ----------------------------------------------------------------------------------------------------------------
# Config and a real run


def _config(**tree):
    from configs import default

    c = default.get_config()
    c.tree.enabled = True
    c.tree.update(tree)
    return c


def test_config_errors_name_the_field():
    from rl4llm import config as config_lib

    with pytest.raises(config_lib.ConfigError, match=r"config.rl.num_generations=16: .* = 30 paths; set it to 30"):
        config_lib.parse(_config())
    c = _config(initial_paths=2, branch_points=1, branches=3, iterations=2)  # 2·(1 + 2·1·3) = 14
    c.rl.num_generations, c.selection.method = 14, "dynamic_sampling"
    with pytest.raises(config_lib.ConfigError, match=r"needs config.selection.method='uniform'"):
        config_lib.parse(c)
    c = _config(initial_paths=4, branch_points=1, branches=3)
    c.rl.off_policy_traces, c.rl.loss = 2, "luffy"
    with pytest.raises(config_lib.ConfigError, match=r"off_policy_traces=2 would add rows outside the tree"):
        config_lib.parse(c)
    with pytest.raises(config_lib.ConfigError, match=r"config.tree.branches=0"):
        config_lib.parse(_config(branches=0))
    c = _config()
    c.tree.enabled, c.rl.advantage = False, "treerl"
    with pytest.raises(config_lib.ConfigError, match=r"config.rl.advantage='treerl': needs tree rollouts"):
        config_lib.parse(c)
    c = _config(initial_paths=4, branch_points=1, branches=3)  # 4·(1 + 3) = 16: the default group
    c.rl.advantage = "treerl"
    assert config_lib.parse(c).rl.num_generations == 16


def test_two_step_nano_run(tmp_path):
    """The real job (nano model, tiny arithmetic task): two RL steps on tree rollouts with TreeRL advantages; the
    tree branched (rows forked from other paths, sharing their prefix) and the loss stayed finite."""
    from rl4llm.train import job
    from rl4llm.train import metrics as metrics_lib
    from tests.test_train import tiny_config

    config = tiny_config()
    config.rl.steps, config.sft.steps = 2, 20
    config.tree.enabled = True
    config.tree.initial_paths, config.tree.branch_points, config.tree.branches, config.tree.iterations = 2, 1, 1, 1
    config.rl.advantage = "treerl"
    job.run(config, str(tmp_path))
    records = {r["step"]: r for r in metrics_lib.read_metrics(str(tmp_path), "rl")}
    assert sorted(records) == [1, 2]
    for record in records.values():
        assert record["tree/rows_per_prompt"] == 4.0
        assert record["tree/branches"] == 2 * config.rl.num_prompts  # M·L·N·T = 2 branches per prompt
        assert math.isfinite(record["loss/pg"])
    assert max(r["tree/shared_token_frac"] for r in records.values()) > 0  # rows share prefixes
    assert max(r["tree/branch_depth"] for r in records.values()) > 0
