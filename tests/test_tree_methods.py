"""Tree-OPO, CURE and ETTRL over tree groups: the advantage kernels (`rl.tree.tree_opo`, `cure`, `ettrl`) on a
hand-built tree with hand-computed values, and the sampler's other fork criteria (`sampling.tree`: CURE's critical
tokens, ETTRL's entropy forks), with forking at the critical token checked against re-prefilling the prefix."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm.models import apply, positions_from_mask
from rl4llm.rl import registry
from rl4llm.rl import tree as tree_lib
from rl4llm.sampling import pad_prompts
from rl4llm.sampling.tree import TreeShape, _Paths, fork_points, generate_tree, node_ids
from tests.test_sampling import CFG, params  # the perturbed model the sampler tests use
from tests.test_tree import STOPPING, T, prompts

tree_opo = jax.jit(tree_lib.tree_opo, static_argnames=("num_groups", "baseline"))

# ----------------------------------------------------------------------------------------------------------------
# A hand-built tree (one prompt, T = 4, ids o·5 + 1 + s as the sampler writes them):
#   row 0: initial path, 4 tokens; its branches fork at 2          segments [0, 2) id 1, [2, 4) id 3
#   row 1: initial path, 3 tokens, no branches                     id 6
#   row 2: branch of row 0 at 2, 4 tokens; row 4 forks it at 3     [2, 3) id 13, [3, 4) id 14
#   row 3: branch of row 0 at 2, 3 tokens                          id 18
#   row 4: branch of row 2 at 3, 4 tokens                          id 24
# Prefixes: rows 0, 1 the prompt (leaves: all 5 rows); rows 2, 3 row 0's tokens [0, 2) (leaves 0, 2, 3, 4); row 4
# row 2's tokens [0, 3) (leaves 2, 4).

NODES = np.array([[1, 1, 1, 3, 3], [6, 6, 6, 6, 6], [1, 1, 1, 13, 14], [1, 1, 1, 18, 18], [1, 1, 1, 13, 24]])
MASK = np.array([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]], np.float32)
OWN = np.array([[1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1]], np.float32)
PARENT, FORK = np.array([-1, -1, 0, 0, 2]), np.array([0, 0, 2, 2, 3])
PREFIX_LEAVES = [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [0, 2, 3, 4], [0, 2, 3, 4], [2, 4]]
SCORES = np.array([1.0, 0.0, 1.0, 0.0, 1.0], np.float32)


def test_hand_tree_is_the_samplers_encoding():
    owner = np.repeat(np.arange(5)[:, None], 4, axis=1)
    for row in (2, 3, 4):  # parents come first
        owner[row, : FORK[row]] = owner[PARENT[row], : FORK[row]]
    got = node_ids(jnp.asarray(owner), jnp.asarray(PARENT), jnp.asarray(FORK), jnp.asarray([0, 1, 0, 0, 0]))
    np.testing.assert_array_equal(got, NODES)
    np.testing.assert_array_equal(tree_lib.own_tokens(jnp.asarray(NODES)), OWN)


@pytest.mark.parametrize("baseline, stat", [("expectation", np.mean), ("optimistic", np.max),
                                            ("pessimistic", np.min)])
def test_tree_opo_on_the_hand_tree(baseline, stat):
    """V(p_i) = stat of the rewards of the leaves below row i's prefix; a_i = r_i − V(p_i), centred over the group,
    on the row's own tokens. Rewards (1, 0, 1, 0, 1): expectation V = (.6, .6, .75, .75, 1), optimistic
    V = (1, 1, 1, 1, 1), pessimistic V = (0, 0, 0, 0, 1)."""
    value = np.array([stat(SCORES[leaves]) for leaves in PREFIX_LEAVES])
    expected_value = {"expectation": [0.6, 0.6, 0.75, 0.75, 1.0], "optimistic": [1.0] * 5,
                      "pessimistic": [0.0, 0.0, 0.0, 0.0, 1.0]}[baseline]
    np.testing.assert_allclose(value, expected_value)  # the leaf sets, read by hand
    staged = SCORES - value
    want = (staged - staged.mean())[:, None] * OWN * MASK
    got = tree_opo(jnp.asarray(SCORES), jnp.zeros(5, jnp.int32), jnp.asarray(MASK), jnp.asarray(NODES),
                   num_groups=1, baseline=baseline)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_tree_opo_expectation_numbers():
    """The expectation baseline by hand: a = (.4, −.6, .25, −.75, 0), mean −.14, so A = (.54, −.46, .39, −.61,
    .14)."""
    got = tree_opo(jnp.asarray(SCORES), jnp.zeros(5, jnp.int32), jnp.asarray(MASK), jnp.asarray(NODES),
                   num_groups=1)
    want = np.array([[.54] * 4, [-.46, -.46, -.46, 0], [0, 0, .39, .39], [0, 0, -.61, 0], [0, 0, 0, .14]])
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_tree_opo_alpha_scales_the_baseline_and_groups_are_separate():
    """Two copies of the hand tree in two groups (ids shifted by 5 rows): each group's advantages are its own;
    α = 0 gives Dr.GRPO's r − mean_g r on the own tokens."""
    nodes = np.concatenate([NODES, NODES + 5 * 5])
    mask, own = np.concatenate([MASK, MASK]), np.concatenate([OWN, OWN])
    scores = np.concatenate([SCORES, 1.0 - SCORES])
    groups = jnp.asarray(np.repeat([0, 1], 5))
    got = tree_opo(jnp.asarray(scores), groups, jnp.asarray(mask), jnp.asarray(nodes), num_groups=2, alpha=0.0)
    centred = np.concatenate([SCORES - SCORES.mean(), (1 - SCORES) - (1 - SCORES).mean()])
    np.testing.assert_allclose(got, centred[:, None] * own * mask, atol=1e-6)
    half = tree_opo(jnp.asarray(scores), groups, jnp.asarray(mask), jnp.asarray(nodes), num_groups=2, alpha=0.5)
    value = np.array([np.mean(SCORES[leaves]) for leaves in PREFIX_LEAVES])
    staged = SCORES - 0.5 * value
    np.testing.assert_allclose(half[:5], (staged - staged.mean())[:, None] * OWN * MASK, atol=1e-6)


def test_tree_opo_without_branching_is_dr_grpo_and_all_equal_rewards_give_zero():
    rng = np.random.default_rng(0)
    n, t = 8, 5
    nodes = jnp.repeat(jnp.arange(n)[:, None] * (t + 1) + 1, t + 1, axis=1).astype(jnp.int32)  # own trees
    scores = rng.integers(0, 2, n).astype(np.float32)
    groups = np.repeat([0, 1], 4)
    mask = jnp.asarray(rng.random((n, t)) < 0.8, jnp.float32)
    got = tree_opo(jnp.asarray(scores), jnp.asarray(groups), mask, nodes, num_groups=2)
    mean = np.array([scores[groups == g].mean() for g in groups])
    np.testing.assert_allclose(got, (scores - mean)[:, None] * np.asarray(mask), atol=1e-6)
    zero = tree_opo(jnp.ones(5), jnp.zeros(5, jnp.int32), jnp.asarray(MASK), jnp.asarray(NODES), num_groups=1)
    np.testing.assert_array_equal(zero, 0.0)
    with pytest.raises(ValueError, match="baseline must be one of"):
        tree_lib.tree_opo(jnp.ones(5), jnp.zeros(5, jnp.int32), jnp.asarray(MASK), jnp.asarray(NODES),
                          num_groups=1, baseline="median")


def test_cure_normalises_the_group_jointly_and_trains_only_continuations():
    """GRPO over the 5 rows: mean .6, unbiased std sqrt(.3); rows' re-concatenated prefixes get 0."""
    got = tree_lib.cure(jnp.asarray(SCORES), jnp.zeros(5, jnp.int32), jnp.asarray(MASK), jnp.asarray(NODES),
                        num_groups=1)
    z = (SCORES - 0.6) / (np.sqrt(0.3) + 1e-6)
    np.testing.assert_allclose(got, z[:, None] * OWN * MASK, rtol=1e-5)
    assert np.all(np.asarray(got)[2:, :2] == 0) and np.asarray(got)[4, 2] == 0


def test_ettrl_reshapes_grpo_by_relative_entropy():
    """H = (1, 2, 3, 2, 2): H̄ = 2, Y = 1 + (2 − H)/2 = (1.5, 1, .5, 1, 1); GRPO of (1, 0, 1, 0, 1) is
    (.4, −.6, .4, −.6, .4)/sqrt(.3)."""
    h = jnp.array([1.0, 2.0, 3.0, 2.0, 2.0])
    got = tree_lib.ettrl(jnp.asarray(SCORES), jnp.zeros(5, jnp.int32), h, num_groups=1)
    z = np.array([0.4, -0.6, 0.4, -0.6, 0.4]) / (np.sqrt(0.3) + 1e-6)
    np.testing.assert_allclose(got, np.array([1.5, 1.0, 0.5, 1.0, 1.0]) * z, rtol=1e-5)


def test_ettrl_with_equal_or_zero_entropies_is_ttrl_grpo():
    groups = jnp.asarray([0, 0, 0, 1, 1, 1])
    scores = jnp.asarray([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    grpo = registry.get_advantage("grpo")(scores, groups, jnp.ones((6, 1)), num_groups=2)
    for h in ([0.7] * 3 + [0.0] * 3, [2.0] * 3 + [0.5] * 3):
        got = tree_lib.ettrl(scores, groups, jnp.asarray(h), num_groups=2)
        np.testing.assert_allclose(got, grpo, rtol=1e-6)
    # all-equal rewards: zero whatever the entropies
    np.testing.assert_array_equal(tree_lib.ettrl(jnp.ones(6), groups, jnp.arange(6.0), num_groups=2), 0.0)


def test_registered_with_their_inputs():
    for name in ("tree_opo", "cure"):
        assert "tree_nodes" in registry.advantage_inputs(name)
    assert "seq_metric" in registry.advantage_inputs("ettrl")
    got = registry.get_advantage("tree_opo")(jnp.asarray(SCORES), jnp.zeros(5, jnp.int32), jnp.asarray(MASK),
                                             num_groups=1, tree_nodes=jnp.asarray(NODES), alpha=0.0)
    np.testing.assert_allclose(got, (SCORES - 0.6)[:, None] * OWN * MASK, atol=1e-6)


# ----------------------------------------------------------------------------------------------------------------
# The sampler's critical-token and entropy fork points


# The fork criteria on hand-made paths (`fork_points`): one prompt, one tree of two rows, T = 5. Row 0 is the
# initial path (token 7, a stop token, at position 3); row 1 forked it at 2 (positions 0, 1 inherited, 2 its first
# own token: not a candidate). Own-token candidates: row 0 positions 0-4, row 1 positions 3, 4.

STOP = (7,)
TREE_ROWS = np.array([[[0, 1]]])  # [B, M, J]


def _paths(entropy, logprobs=None, emitted=None):
    entropy = np.asarray(entropy, np.float32)
    n, t = entropy.shape
    return _Paths(cache=None, tokens=jnp.asarray([[3, 4, 5, 7, 6], [3, 4, 2, 1, 6]][:n], jnp.int32),
                  logprobs=jnp.asarray(-entropy if logprobs is None else logprobs, jnp.float32),
                  entropy=jnp.asarray(entropy), emitted=jnp.ones((n, t), bool) if emitted is None else emitted,
                  finished=jnp.zeros(n, bool), owner=jnp.asarray([[0] * 5, [0, 0, 1, 1, 1]][:n], jnp.int32),
                  parent=jnp.asarray([-1, 0][:n], jnp.int32), fork=jnp.asarray([0, 2][:n], jnp.int32))


ENTROPY = [[0.9, 0.5, 0.7, 0.7, 0.1], [0.9, 0.5, 0.3, 0.8, 0.6]]


def _points(paths, tree_rows=TREE_ROWS, key=0, **shape):
    shape = TreeShape(**{"initial_paths": 1, "branches": 1, "iterations": 1, **shape})
    source, position = fork_points(paths, tree_rows, shape, jax.random.key(key), STOP)
    return list(zip(np.asarray(source).reshape(-1).tolist(), np.asarray(position).reshape(-1).tolist()))


def test_entropy_criterion_takes_the_top_n_entropies_ties_to_the_earliest():
    """ETMR: the N largest entropies over the tree's own tokens: .9 (row 0, 0), .8 (row 1, 3), then the tie .7 at
    row 0 positions 2 and 3 goes to position 2; row 1's inherited .9 and its first own token are not candidates."""
    assert _points(_paths(ENTROPY), branch_points=3, criterion="entropy") == [(0, 0), (1, 3), (0, 2)]
    # "surprise" ranks −log p instead: with log-probs that order the tokens otherwise, it follows them
    logprobs = -np.array([[0.1, 0.2, 0.3, 0.4, 2.0], [0.1, 0.2, 0.3, 0.5, 0.6]])
    assert _points(_paths(ENTROPY, logprobs), branch_points=1, criterion="surprise") == [(0, 4)]


def test_critical_token_with_top_1_is_the_argmax_entropy_candidate():
    """CURE's candidates exclude position 0 and stop tokens: (0, 1) .5, (0, 2) .7, (0, 4) .1, (1, 3) .8, (1, 4) .6;
    top-1 is (1, 3) whatever the key. A tie at the top (row 1 position 3 at .7) goes to the earliest, (0, 2)."""
    for key in range(3):
        assert _points(_paths(ENTROPY), branch_points=1, criterion="critical", top_k=1, key=key) == [(1, 3)]
    tied = [ENTROPY[0], [0.9, 0.5, 0.3, 0.7, 0.6]]
    assert _points(_paths(tied), branch_points=1, criterion="critical", top_k=1) == [(0, 2)]


def test_critical_tokens_are_drawn_uniformly_from_the_top_k_without_replacement():
    """top_k = 3: the candidates (1, 3), (0, 2), (1, 4); over 60 keys each is drawn (about 1/3 each), nothing
    else; N = 2 draws two different ones."""
    picks = [_points(_paths(ENTROPY), branch_points=1, criterion="critical", top_k=3, key=k)[0] for k in range(60)]
    counts = {p: picks.count(p) for p in set(picks)}
    assert set(counts) == {(1, 3), (0, 2), (1, 4)} and min(counts.values()) >= 8, counts
    for key in range(10):
        pair = _points(_paths(ENTROPY), branch_points=2, criterion="critical", top_k=3, key=key)
        assert len(set(pair)) == 2 and set(pair) <= {(1, 3), (0, 2), (1, 4)}


def test_critical_token_without_candidates_falls_back_to_position_0():
    """An initial path of one token has no candidate (position 0 is excluded): the fork is its position 0, a
    re-draw from the prompt (the official code's default index 0)."""
    paths = _paths([[0.9, 0, 0, 0, 0]], emitted=jnp.asarray([[True, False, False, False, False]]))
    assert _points(paths, np.array([[[0]]]), branch_points=1, criterion="critical", top_k=20) == [(0, 0)]


# ----------------------------------------------------------------------------------------------------------------
# The sampler with critical-token forks: entropies, and forking equals re-prefilling the prefix

CRITICAL = TreeShape(initial_paths=2, branch_points=1, branches=3, iterations=1, criterion="critical", top_k=2)


@functools.cache
def critical_rollout():
    tokens, mask = prompts()
    return generate_tree(CFG, params(), jnp.asarray(tokens), jnp.asarray(mask), jax.random.key(0), STOPPING,
                         CRITICAL)


def _teacher_forced(prompt_rows, completions, completion_mask):
    """Log-probs and entropies (temperature 1) of `completions` [n, T'] after the left-padded prompts, by one
    full forward (nothing cached)."""
    p_tokens, p_mask = pad_prompts(prompt_rows, pad_id=0, bucket_multiple=4)
    tokens = jnp.concatenate([jnp.asarray(p_tokens), jnp.asarray(completions)], axis=1)
    mask = jnp.concatenate([jnp.asarray(p_mask), jnp.asarray(completion_mask)], axis=1)
    logits = apply(CFG, params(), tokens, positions_from_mask(mask), mask)[0]
    logp = jax.nn.log_softmax(logits[:, p_tokens.shape[1] - 1:-1].astype(jnp.float32), axis=-1)
    chosen = jnp.take_along_axis(logp, jnp.asarray(completions)[..., None], axis=-1)[..., 0]
    return np.asarray(chosen), np.asarray(-jnp.sum(jnp.exp(logp) * logp, axis=-1))


def _prompt_rows():
    tokens, mask = prompts()
    return [list(t[m.astype(bool)]) for t, m in zip(np.asarray(tokens), np.asarray(mask))]


def test_sampler_entropies_are_the_policys_and_forks_are_critical():
    """The recorded entropy of every token (initial paths and branches) is the entropy of the model's next-token
    distribution there (a teacher-forced forward), and each branch forks at one of its path's top-2 candidates."""
    out = critical_rollout()
    r = out.rollout
    rows = np.repeat(np.arange(2), CRITICAL.rows_per_prompt)
    logp, entropy = _teacher_forced([_prompt_rows()[i] for i in rows], r.completion_tokens, r.completion_mask)
    m = np.asarray(r.completion_mask)
    np.testing.assert_allclose(entropy * m, np.asarray(out.entropy), atol=1e-4)
    np.testing.assert_allclose(logp * m, np.asarray(r.logprobs), atol=1e-4)
    tokens, parent, fork = (np.asarray(x) for x in (r.completion_tokens, out.parent, out.fork_position))
    for row in np.flatnonzero(parent < 0):
        candidates = np.flatnonzero(m[row] & (np.arange(T) > 0) & ~np.isin(tokens[row], STOPPING.stop_token_ids))
        top = candidates[np.argsort(-np.asarray(out.entropy)[row, candidates], kind="stable")][:2]
        assert set(fork[parent == row]) <= (set(top) if top.size else {0})


def test_forking_at_the_critical_token_equals_re_prefilling_the_prefix():
    """CURE re-prefills prompt ⊕ response[:t*] and re-generates; the sampler forks the response's KV cache at t*.
    Every continuation's log-probs and entropies equal a fresh forward over the re-concatenated prompt."""
    out = critical_rollout()
    r = out.rollout
    tokens, mask, logprobs = (np.asarray(x) for x in (r.completion_tokens, r.completion_mask, r.logprobs))
    parent, fork, entropy = np.asarray(out.parent), np.asarray(out.fork_position), np.asarray(out.entropy)
    branches = np.flatnonzero(parent >= 0)
    assert (fork[branches] > 0).sum() >= 6  # 0: a path without candidates (CURE's fallback, a re-draw)
    prompt_rows = _prompt_rows()
    reconcat = [prompt_rows[row // CRITICAL.rows_per_prompt] + list(tokens[row, : fork[row]]) for row in branches]
    continuation = np.zeros((len(branches), T), np.int32)
    continuation_mask = np.zeros((len(branches), T), bool)
    for i, row in enumerate(branches):
        continuation[i, : T - fork[row]] = tokens[row, fork[row]:]
        continuation_mask[i, : T - fork[row]] = mask[row, fork[row]:]
    want_logp, want_entropy = _teacher_forced(reconcat, continuation, continuation_mask)
    for i, row in enumerate(branches):
        n = T - fork[row]
        m = continuation_mask[i, :n]
        np.testing.assert_allclose(logprobs[row, fork[row]:] * m, want_logp[i, :n] * m, atol=1e-4)
        np.testing.assert_allclose(entropy[row, fork[row]:] * m, want_entropy[i, :n] * m, atol=1e-4)


@pytest.mark.parametrize("baseline, stat", [("expectation", np.mean), ("pessimistic", np.min)])
def test_tree_opo_on_sampled_trees_matches_the_leaf_sets(baseline, stat):
    """On the sampler's trees: V(p_r) is the stat over the rows of r's group whose first fork_r tokens are the same
    draws as r's (owner by owner), or over the whole group when fork_r = 0 (branches of branches: the hand tree)."""
    out = critical_rollout()
    r = out.rollout
    per, rows = CRITICAL.rows_per_prompt, r.completion_tokens.shape[0]
    parent, fork, mask = np.asarray(out.parent), np.asarray(out.fork_position), np.asarray(r.completion_mask)
    owner = np.repeat(np.arange(rows)[:, None], T, axis=1)
    for row in range(rows):  # parents come first
        if parent[row] >= 0:
            owner[row, : fork[row]] = owner[parent[row], : fork[row]]
    scores = np.asarray(jax.random.bernoulli(jax.random.key(3), 0.5, (rows,)), np.float32)
    groups = np.arange(rows) // per
    value = np.empty(rows)
    for row in range(rows):
        same = groups == groups[row]
        below = same & (owner[:, : fork[row]] == owner[row, : fork[row]]).all(axis=1)
        value[row] = stat(scores[below])
    staged = scores - value
    centred = staged - np.array([staged[groups == g].mean() for g in groups])
    want = centred[:, None] * (owner == np.arange(rows)[:, None]) * mask
    got = tree_opo(jnp.asarray(scores), jnp.asarray(groups), jnp.asarray(mask, jnp.float32), out.tree_nodes,
                   num_groups=2, baseline=baseline)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert (fork[parent >= 0] > 0).any()


def test_tree_shape_rejects_an_unknown_criterion():
    with pytest.raises(ValueError, match="criterion must be one of"):
        TreeShape(2, 1, 1, 1, criterion="random")
    with pytest.raises(ValueError, match="needs top_k >= branch_points"):
        TreeShape(2, 3, 1, 1, criterion="critical", top_k=2)


def test_config_errors_name_the_field():
    from configs import cure, default, tree_opo
    from rl4llm import config as config_lib

    c = default.get_config()
    c.rl.advantage = "tree_opo"
    with pytest.raises(config_lib.ConfigError, match=r"config.rl.advantage='tree_opo': needs tree rollouts"):
        config_lib.parse(c)
    c = cure.get_config()
    c.tree.criterion = "random"
    with pytest.raises(config_lib.ConfigError, match=r"config.tree.criterion"):
        config_lib.parse(c)
    c = cure.get_config()
    c.tree.critical_top_k = 0
    with pytest.raises(config_lib.ConfigError, match=r"config.tree.critical_top_k"):
        config_lib.parse(c)
    c = cure.get_config()
    c.tree.critical_top_k, c.tree.branch_points, c.rl.num_generations = 1, 2, 28
    with pytest.raises(config_lib.ConfigError, match=r"config.tree.critical_top_k=1: .* set it >= 2"):
        config_lib.parse(c)
    c = tree_opo.get_config()
    c.rl.advantage_kwargs.baseline = "median"
    with pytest.raises(config_lib.ConfigError, match=r"config.rl.advantage_kwargs: tree_opo: baseline must be one"):
        config_lib.parse(c)
    assert config_lib.parse(cure.get_config()).tree.criterion == "critical"


def test_tree_metrics_report_the_entropy_at_the_fork_points():
    """The hand tree's branches fork row 0 at 2 (twice) and row 2 at 3: fork entropy = (H[0,2]·2 + H[2,3])/3."""
    from rl4llm.train.completions import tree_metrics

    entropy = np.arange(20, dtype=np.float32).reshape(5, 4) / 10
    tokens = np.zeros((5, 4), np.int32)
    got = tree_metrics(tokens, MASK > 0, PARENT, FORK, entropy, rows_per_prompt=5)
    np.testing.assert_allclose(got["tree/fork_entropy"], (0.2 * 2 + 1.1) / 3, rtol=1e-6)
    np.testing.assert_allclose(got["tree/token_entropy"], entropy[MASK > 0].mean(), rtol=1e-6)
    assert got["tree/branches"] == 3 and got["tree/shared_token_frac"] == 7 / MASK.sum()
