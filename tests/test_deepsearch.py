"""DeepSearch (arXiv 2509.25454; `rl4llm.sampling.mcts`, `rl4llm.rl.tree.deepsearch`): the backup, the frontier
selection, the most confident negative and the q soft clipping by hand; the search's budget and its forked KV caches
on the sampler tests' model; bad configs name their field. The recipe's run on the tiny job, its
backups firing, is tests/test_recipes.py's."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import deepsearch as recipe
from rl4llm import config as config_lib
from rl4llm.rl import registry
from rl4llm.rl import tree as tree_lib
from rl4llm.sampling import SamplingConfig, pad_prompts
from rl4llm.sampling import mcts
from tests.test_sampling import CFG, params  # the perturbed model the sampler tests use
from tests.test_train import tiny_config
from tests.test_tree_methods import _teacher_forced


# ---------------------------------------------------------------------------------------------------------------
# The heuristics by hand


def test_depth_decay_has_its_floor():
    assert mcts.depth_decay(1, 4, 0.1) == 0.25 and mcts.depth_decay(3, 4, 0.1) == 0.75
    assert mcts.depth_decay(1, 20, 0.1) == 0.1  # 1/20 < γ_min


def test_backup_by_hand_on_a_hand_built_tree():
    """root -> a -> b -> {c -> end1, d -> {end2, end3}}: nodes a=0, b=1, c=2, end1=3, d=4, end2=5, end3=6."""
    q, visits = np.zeros(7), np.zeros(7, int)
    q[[3, 5, 6]] = [1.0, -1.0, 1.0]
    # a correct path of l = 4 nodes: γ = 1/4, 2/4, 3/4
    q, visits = mcts.backup(q, visits, np.array([0, 1, 2, 3]), 1.0, 0.1)
    np.testing.assert_allclose(q[:4], [0.25, 0.5, 0.75, 1.0])
    # an incorrect path through the positive a, b: they keep their values; d (0) gets 0 + 3/4·(−1)
    q, visits = mcts.backup(q, visits, np.array([0, 1, 4, 5]), -1.0, 0.1)
    np.testing.assert_allclose(q[[0, 1, 2, 4, 5]], [0.25, 0.5, 0.75, -0.75, -1.0])
    # a correct path through the negative d resets it to γ·q_end; the positive a, b accumulate
    q, visits = mcts.backup(q, visits, np.array([0, 1, 4, 6]), 1.0, 0.1)
    np.testing.assert_allclose(q, [0.5, 1.0, 0.75, 1.0, 0.75, -1.0, 1.0])
    np.testing.assert_array_equal(visits, [3, 3, 1, 1, 2, 1, 1])
    # an incorrect path through a negative node adds: −0.5 + 1/2·(−1)
    q2, _ = mcts.backup(np.array([-0.5, -1.0]), np.zeros(2, int), np.array([0, 1]), -1.0, 0.1)
    np.testing.assert_allclose(q2, [-1.0, -1.0])


def test_frontier_priority_and_selection_by_hand():
    parent_q, parent_visits = np.array([2.0, 2.0, -1.0, 0.0]), np.array([4, 4, 1, 0])
    entropy, depth = np.array([0.3, 0.9, 0.1, 0.5]), np.array([2, 3, 1, 1])
    got = mcts.frontier_priority(parent_q, parent_visits, entropy, depth, 4, 0.4, 0.5, 0.01)
    want = [0.4 * math.tanh(0.5) + 0.5 * 0.3 + 0.01 * math.sqrt(2 / 4),
            0.4 * math.tanh(0.5) + 0.5 * 0.9 + 0.01 * math.sqrt(3 / 4),
            0.4 * math.tanh(-1.0) + 0.5 * 0.1 + 0.01 * math.sqrt(1 / 4),
            0.0 + 0.5 * 0.5 + 0.01 * math.sqrt(1 / 4)]  # an unvisited parent: Q = 0
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert mcts.select_frontier(got, np.array([True, True, True, True])) == 1
    assert mcts.select_frontier(got, np.array([True, False, True, True])) == 0  # node 1 is not in the frontier
    assert mcts.select_frontier(np.array([0.2, 0.7, 0.7]), np.array([True, True, True])) == 1  # ties: the first
    assert mcts.select_frontier(got, np.zeros(4, bool)) == -1


def test_most_confident_negative_by_hand_with_ties():
    mean = np.array([0.5, 0.2, 0.2, 0.1])
    assert mcts.most_confident_negative(mean, np.array([True, True, True, False])) == 1  # 0.1 is correct; tie 1, 2
    assert mcts.most_confident_negative(mean, np.array([True, False, True, True])) == 3
    assert mcts.most_confident_negative(mean, np.zeros(4, bool)) == -1


def _tree_after_two_rounds(own_entropies):
    """Root children 0, 1 (2 tokens each, entropies 1, 1), then node 0 expanded into 2, 3 (terminal, incorrect)
    with `own_entropies` ([2, T] values, NaN: no token)."""
    tree = mcts._Tree.empty(4)
    own = np.ones((2, 2), bool)
    assert mcts._record(tree, np.array([0, 1]), -1, own, np.ones((2, 2)), np.zeros(2, bool), np.zeros(2, bool),
                        0.1) == ""
    ent = np.nan_to_num(np.asarray(own_entropies, float))
    kind = mcts._record(tree, np.array([2, 3]), 0, ~np.isnan(own_entropies), ent, np.ones(2, bool), np.zeros(2, bool),
                        0.1)
    return tree, kind


def test_the_negative_backed_up_has_the_lowest_mean_entropy_along_its_path():
    # node 2: own mean 0.3, path mean (1 + 1 + 0 + 0.6) / 4 = 0.65; node 3: own mean 0.2, path (1 + 1 + 0.2) / 3 = 0.733:
    # the path mean picks node 2 (the own mean would pick node 3)
    tree, kind = _tree_after_two_rounds([[0.0, 0.6], [0.2, np.nan]])
    assert kind == "negative"
    np.testing.assert_allclose(tree.path_entropy[[2, 3]] / tree.path_tokens[[2, 3]], [0.65, 2.2 / 3])
    np.testing.assert_array_equal(tree.visits, [1, 0, 1, 0])
    np.testing.assert_allclose(tree.q, [-0.5, 0.0, -1.0, -1.0])  # γ(1, 2) = 1/2 on node 0
    tie, _ = _tree_after_two_rounds([[0.3, 0.3], [0.3, 0.3]])
    np.testing.assert_array_equal(tie.visits, [1, 0, 1, 0])  # equal path means: the first


def test_soft_clipping_by_hand():
    q = jnp.array([0.0, 0.5, 2.0, -3.0])
    np.testing.assert_allclose(tree_lib.soft_clip_q(q), np.tanh([0.0, 0.5, 2.0, -3.0]), rtol=1e-6)
    np.testing.assert_allclose(tree_lib.soft_clip_q(q, eps_q=2.0, q_max=0.5),
                               0.5 * np.tanh([0.0, 0.25, 1.0, -1.5]), rtol=1e-6)


def test_tree_grpo_advantage_by_hand():
    """Group 0: nodes q = (1.5, +1 terminal, −1 terminal), group 1: (−0.4, no terminal). T = 3; row 1 inherits its
    first token from row 0, row 2 its first two."""
    t1 = 4
    nodes = np.array([[1, 1, 1, 1], [1, 1, t1 + 2, t1 + 2], [1, 1, 1, 2 * t1 + 3], [3 * t1 + 1] * 4])
    mask = jnp.ones((4, 3))
    got = jax.jit(tree_lib.deepsearch, static_argnames="num_groups")(
        jnp.zeros(4), jnp.array([0, 0, 0, 1]), mask, jnp.asarray(nodes, jnp.int32), jnp.array([1.5, 1.0, -1.0, -0.4]),
        jnp.array([False, True, True, False]), num_groups=2)
    mu0 = 0.0  # (+1 − 1) / 2
    want = np.array([[math.tanh(1.5) - mu0] * 3, [0, 1.0 - mu0, 1.0 - mu0], [0, 0, -1.0 - mu0],
                     [math.tanh(-0.4)] * 3])  # group 1 has no terminal: μ = 0
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert {"tree_nodes", "node_q", "node_terminal"} <= registry.advantage_inputs("deepsearch")


# ---------------------------------------------------------------------------------------------------------------
# The search on the sampler tests' model

T = 8
STOPPING = SamplingConfig(max_new_tokens=T, temperature=1.0, stop_token_ids=tuple(range(0, 50, 7)), pad_id=49)
SHAPE = mcts.SearchShape(candidates=3, expansions=4, step_tokens=3)


def _search(verify, shape=SHAPE):
    tokens, mask = pad_prompts([[5, 9, 2], [11, 3, 7, 8, 20, 1]], pad_id=0, bucket_multiple=4)
    calls = []

    def recorded(rows, completion_tokens, completion_mask):
        calls.append((rows, completion_tokens, completion_mask))
        return verify(rows, completion_tokens, completion_mask)

    out = mcts.search(CFG, params(), jnp.asarray(tokens), jnp.asarray(mask), jax.random.key(0), STOPPING, shape,
                      recorded)
    return out, calls


def _even_first_token(rows, completion_tokens, completion_mask):
    return completion_tokens[:, 0] % 2 == 0


def test_the_budget_is_spent_exactly():
    out, calls = _search(_even_first_token)
    b, r, s = 2, SHAPE.rows_per_prompt, SHAPE.step_tokens
    assert out.completion_tokens.shape == (b * r, T) and r == 12
    assert out.metrics["deepsearch/expansions"] == b * SHAPE.expansions
    own = out.completion_mask & (np.arange(T)[None, :] >= out.fork[:, None])
    counts = own.sum(-1)
    assert out.metrics["deepsearch/generated_tokens"] == counts.sum() <= b * r * s
    # every node drew one step of s tokens, fewer only when it stopped or hit the token budget (a terminal)
    np.testing.assert_array_equal(counts[~out.node_terminal], s)
    assert np.all(counts[out.node_terminal] <= s)
    assert np.all((counts == s) | out.finished | (out.fork + counts == T))
    # each round expands one node per prompt into n children: rows k·n ... k·n + n − 1 share one parent
    parents = out.parent.reshape(b, SHAPE.expansions, SHAPE.candidates)
    assert (parents == parents[..., :1]).all()
    # the verifier saw every terminal exactly once, and nothing else
    seen = np.sort(np.concatenate([c[0] for c in calls]))
    np.testing.assert_array_equal(seen, np.flatnonzero(out.node_terminal))


def test_children_continue_their_parents_path_from_the_forked_cache():
    """A child's completion is its parent's path then its own step, and every token's log-prob (the inherited ones
    and the ones drawn from the forked KV cache) is that of a teacher-forced forward over [prompt | path]."""
    out, _ = _search(_even_first_token)
    child = np.flatnonzero(out.parent >= 0)
    assert child.size
    for c in child:
        p = out.parent[c]
        np.testing.assert_array_equal(out.completion_tokens[c, :out.fork[c]], out.completion_tokens[p, :out.fork[c]])
        assert out.completion_mask[p, :out.fork[c]].all()
    prompts = [[5, 9, 2], [11, 3, 7, 8, 20, 1]]
    rows = [prompts[i // SHAPE.rows_per_prompt] for i in range(len(out.parent))]
    logp, _ = _teacher_forced(rows, out.completion_tokens, out.completion_mask)
    m = out.completion_mask
    np.testing.assert_allclose(out.logprobs[m], logp[m], atol=2e-4)


def test_the_mechanism_fires_correct_and_negative_backups():
    out, _ = _search(_even_first_token)
    assert out.metrics["deepsearch/correct_backups"] + out.metrics["deepsearch/negative_backups"] > 0
    assert np.any(out.node_q[~out.node_terminal] != 0)  # intermediate nodes got values
    wrong, _ = _search(lambda rows, *_: np.zeros(len(rows), bool))
    assert wrong.metrics["deepsearch/negative_backups"] > 0 and wrong.metrics["deepsearch/correct_backups"] == 0
    assert wrong.metrics["deepsearch/solved_by_search"] == 0
    assert np.all(wrong.node_q <= 0) and np.any(wrong.node_q[~wrong.node_terminal] < 0)
    right, _ = _search(lambda rows, *_: np.ones(len(rows), bool))
    assert right.metrics["deepsearch/correct_backups"] > 0 and right.metrics["deepsearch/solved_by_search"] == 1
    assert np.all(right.node_q >= 0)


def test_an_empty_frontier_re_expands_the_root():
    # steps of the whole budget: every child is terminal, so every later round expands the root again
    out, _ = _search(_even_first_token, mcts.SearchShape(candidates=2, expansions=3, step_tokens=T))
    assert out.metrics["deepsearch/root_reexpansions"] == 2 * 2
    assert np.all(out.parent == -1) and np.all(out.node_terminal)


# ---------------------------------------------------------------------------------------------------------------
# The recipe and its config


def _tiny(**overrides):
    config = tiny_config()
    recipe_config = recipe.get_config()
    config.deepsearch = recipe_config.deepsearch
    for section, field in (("rl", "advantage"), ("rl", "advantage_kwargs"), ("rl", "agg_mode"), ("rl", "kl_coef"),
                           ("rl", "loss_kwargs")):
        config[section][field] = recipe_config[section][field]
    # the tiny job's groups of 4: 2 expansions of 2 children; steps of 6 of its 12 tokens, so depth 2 is terminal
    config.update_from_flattened_dict({"deepsearch.candidates": 2, "deepsearch.expansions": 2,
                                       "deepsearch.step_tokens": 6, **overrides})
    return config


def test_the_recipe_is_valid_and_documents_its_run():
    config_lib.parse(recipe.get_config())
    assert "--config=configs/deepsearch.py" in recipe.get_config.__doc__


@pytest.mark.parametrize("overrides, field", [
    ({"deepsearch.candidates": 0}, "config.deepsearch.candidates=0"),
    ({"deepsearch.gamma_min": 1.5}, "config.deepsearch.gamma_min=1.5"),
    ({"rl.num_generations": 6}, "config.rl.num_generations=6"),
    ({"deepsearch.step_tokens": 40}, "config.deepsearch.step_tokens=40"),
    ({"rl.advantage": "grpo"}, "config.rl.advantage='grpo'"),
    ({"deepsearch.enabled": False}, "config.rl.advantage='deepsearch'"),
    ({"tree.enabled": True, "rl.num_generations": 30}, "config.tree.enabled=True"),
    ({"selection.method": "dynamic_sampling"}, "config.selection.method='dynamic_sampling'"),
])
def test_bad_config_fails_before_compiling_naming_the_field(overrides, field):
    config = recipe.get_config()
    config.update_from_flattened_dict(overrides)
    with pytest.raises(config_lib.ConfigError, match=field.replace(".", r"\.").replace("(", r"\(")):
        config_lib.parse(config)
