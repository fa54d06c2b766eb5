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
from rl4llm.sampling.tree import TreeShape, generate_tree, node_ids
from tests.test_sampling import CFG, params  # the perturbed model the sampler tests use
from tests.test_tree import SHAPE, STOPPING, T, prompts, tree_rollout

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


@pytest.mark.parametrize("baseline, stat", [("expectation", np.mean), ("pessimistic", np.min)])
def test_tree_opo_on_sampled_trees_matches_the_leaf_sets(baseline, stat):
    """On the sampler's nested trees (2 iterations): V(p_r) is the stat over the rows of r's group whose first
    fork_r tokens are the same draws as r's (owner by owner), or over the whole group when fork_r = 0."""
    out = tree_rollout(SHAPE)
    r = out.rollout
    per, rows = SHAPE.rows_per_prompt, r.completion_tokens.shape[0]
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
    branch = parent >= 0
    assert (fork[branch] > 0).any() and (parent[branch] % per >= SHAPE.initial_paths).any()  # branches of branches


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


@functools.cache
def rollout(shape: TreeShape, key: int = 0):
    tokens, mask = prompts()
    return generate_tree(CFG, params(), jnp.asarray(tokens), jnp.asarray(mask), jax.random.key(key), STOPPING, shape)


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


def _candidates(out, row):
    """CURE's critical candidates of an initial path: emitted positions >= 1 that are not stop tokens."""
    tokens, mask = np.asarray(out.rollout.completion_tokens[row]), np.asarray(out.rollout.completion_mask[row])
    keep = mask & (np.arange(T) > 0) & ~np.isin(tokens, STOPPING.stop_token_ids)
    return np.flatnonzero(keep)


CRITICAL_1 = TreeShape(initial_paths=2, branch_points=1, branches=2, iterations=1, criterion="critical", top_k=1)


def test_sampler_entropies_are_the_policys():
    """The recorded entropy of every token (initial paths and branches) is the entropy of the model's next-token
    distribution there (a teacher-forced forward), so the critical tokens rank real entropies."""
    out = rollout(CRITICAL_1)
    r = out.rollout
    rows = np.repeat(np.arange(2), CRITICAL_1.rows_per_prompt)
    logp, entropy = _teacher_forced([_prompt_rows()[i] for i in rows], r.completion_tokens, r.completion_mask)
    m = np.asarray(r.completion_mask)
    np.testing.assert_allclose(entropy * m, np.asarray(out.entropy), atol=1e-4)
    np.testing.assert_allclose(logp * m, np.asarray(r.logprobs), atol=1e-4)


def test_critical_token_with_top_1_is_the_argmax_entropy_one():
    """top_k = 1: every branch forks at its initial path's highest-entropy candidate (ties: the earliest position,
    `lax.top_k`; no candidate: position 0, CURE's fallback), each drawn n2 = 2 times."""
    out = rollout(CRITICAL_1)
    parent, fork, entropy = np.asarray(out.parent), np.asarray(out.fork_position), np.asarray(out.entropy)
    checked = 0
    for row in np.flatnonzero(parent < 0):
        candidates = _candidates(out, row)
        want = candidates[np.argmax(entropy[row, candidates])] if candidates.size else 0  # argmax: first of ties
        np.testing.assert_array_equal(fork[parent == row], [want, want])
        checked += candidates.size > 1
    assert checked  # some path had a real choice


def test_critical_tokens_are_drawn_from_the_top_k():
    """top_k = 3: the fork is one of the 3 highest-entropy candidates, and over keys not always the highest."""
    shape = TreeShape(initial_paths=2, branch_points=1, branches=1, iterations=1, criterion="critical", top_k=3)
    ranks = []
    for key in range(4):
        out = rollout(shape, key)
        parent, fork, entropy = np.asarray(out.parent), np.asarray(out.fork_position), np.asarray(out.entropy)
        for row in np.flatnonzero(parent < 0):
            candidates = _candidates(out, row)
            if candidates.size < 2:
                continue
            order = candidates[np.argsort(-entropy[row, candidates], kind="stable")]
            (picked,) = fork[parent == row]
            ranks.append(list(order).index(picked))
    assert ranks and max(ranks) <= 2
    assert max(ranks) > 0


def test_forking_at_the_critical_token_equals_re_prefilling_the_prefix():
    """CURE re-prefills prompt ⊕ response[:t*] and re-generates; the sampler forks the response's KV cache at t*.
    Every continuation's log-probs and entropies equal a fresh forward over the re-concatenated prompt."""
    shape = TreeShape(initial_paths=2, branch_points=1, branches=3, iterations=1, criterion="critical", top_k=4)
    out = rollout(shape)
    r = out.rollout
    tokens, mask, logprobs = (np.asarray(x) for x in (r.completion_tokens, r.completion_mask, r.logprobs))
    parent, fork, entropy = np.asarray(out.parent), np.asarray(out.fork_position), np.asarray(out.entropy)
    branches = np.flatnonzero(parent >= 0)
    assert (fork[branches] > 0).sum() >= 6  # 0: a path without candidates (CURE's fallback, a re-draw)
    prompt_rows = _prompt_rows()
    reconcat = [prompt_rows[row // shape.rows_per_prompt] + list(tokens[row, : fork[row]]) for row in branches]
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


def test_entropy_criterion_forks_at_the_top_n_entropies():
    """ETTRL's ETMR: each tree's N = 2 fork points are its 2 highest-entropy tokens (position 0 included)."""
    shape = TreeShape(initial_paths=2, branch_points=2, branches=1, iterations=1, criterion="entropy")
    out = rollout(shape)
    parent, fork, entropy = np.asarray(out.parent), np.asarray(out.fork_position), np.asarray(out.entropy)
    mask = np.asarray(out.rollout.completion_mask)
    for row in np.flatnonzero(parent < 0):
        h = np.where(mask[row], entropy[row], -np.inf)
        best = np.sort(h)[::-1][:2]
        best = np.where(np.isfinite(best), best, best[0])
        np.testing.assert_allclose(np.sort(h[fork[parent == row]])[::-1], best)


def test_tree_shape_rejects_an_unknown_criterion():
    with pytest.raises(ValueError, match="criterion must be one of"):
        TreeShape(2, 1, 1, 1, criterion="random")


def test_config_errors_name_the_field():
    from configs import cure, default
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
    assert config_lib.parse(cure.get_config()).tree.criterion == "critical"


def test_tree_metrics_report_the_entropy_at_the_fork_points():
    """The hand tree's branches fork row 0 at 2 (twice) and row 2 at 3: fork entropy = (H[0,2]·2 + H[2,3])/3."""
    from rl4llm.train.rollouts import tree_metrics

    entropy = np.arange(20, dtype=np.float32).reshape(5, 4) / 10
    tokens = np.zeros((5, 4), np.int32)
    got = tree_metrics(tokens, MASK > 0, PARENT, FORK, entropy, rows_per_prompt=5)
    np.testing.assert_allclose(got["tree/fork_entropy"], (0.2 * 2 + 1.1) / 3, rtol=1e-6)
    np.testing.assert_allclose(got["tree/token_entropy"], entropy[MASK > 0].mean(), rtol=1e-6)
    assert got["tree/branches"] == 3 and got["tree/shared_token_frac"] == 7 / MASK.sum()
