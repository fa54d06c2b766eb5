"""DeepSearch's replay buffer with cached solutions (`config.deepsearch.replay_path`, `rl4llm.train.search_replay`):
a buffered prompt's group is direct rollouts with its cached solutions first, each row a terminal node of its own;
the other prompts' rows are exactly a search of them alone; the node ids, the layout and the Tree-GRPO advantage by
hand; registering the buffer (`trace_file.replay_records`); the config checks. (A whole run with a buffer is not a
test here, for the suite's time budget: see the README's DeepSearch bullet for the command that was run.)"""

import json
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm import config as config_lib
from rl4llm.data import trace_file
from rl4llm.rl import tree as tree_lib
from rl4llm.train import batches
from rl4llm.train import completions as completions_lib
from rl4llm.train import rollouts
from rl4llm.train import search_replay
from rl4llm.train import setup as setup_lib
from rl4llm.train import single_turn
from tests.test_deepsearch import _tiny
from tests.test_trace_file import _step_examples, _write_lines


def test_node_ids_of_flat_rows_and_of_a_moved_sub_batch():
    nodes = search_replay.flat_nodes(np.array([0, 1, 2]), t_max=3)
    np.testing.assert_array_equal(nodes, [[1] * 4, [5] * 4, [9] * 4])
    np.testing.assert_array_equal(tree_lib.own_tokens(jnp.asarray(nodes)), np.ones((3, 3)))
    # a sub-batch of 2 groups of 2 rows, placed at the step's groups 1 and 3: ids move by 1 and 2 groups of rows
    moved = search_replay.shift_nodes(search_replay.flat_nodes(np.arange(4), t_max=3), np.array([1, 3]), 2, t_max=3)
    np.testing.assert_array_equal(moved, search_replay.flat_nodes(np.array([2, 3, 6, 7]), t_max=3))
    placed = search_replay.place([(np.array([1]), {"x": np.array([1, 2])}), (np.array([0, 2]), {"x": np.arange(4)})],
                                 6, 2)
    np.testing.assert_array_equal(placed["x"], [0, 1, 1, 2, 2, 3])


def test_replay_records_register_the_hard_prompts_with_their_correct_samples():
    records = trace_file.replay_records(
        ["a", "b", "c", "d"], [["1", "2", "3", "4"]] * 4,
        [[True, False, False, False], [True, True, False, False], [False] * 4, [False, False, False, True]],
        [[True] * 4, [True] * 4, [True] * 4, [True, True, True, False]], max_accuracy=0.25)
    # b: accuracy 0.5 > 0.25; c: none correct; d: its one correct sample did not finish
    assert records == [{"prompt": "a", "traces": ["1"], "accuracy": 0.25}]


def _replay_config(tmp_path, cached: dict):
    c = _tiny()
    examples = _step_examples(config_lib.parse(c), 3)
    c.deepsearch.replay_path = _write_lines(tmp_path / "replay.jsonl", [
        json.dumps({"prompt": examples[i].prompt, "traces": traces(examples[i])}) for i, traces in cached.items()])
    return c, examples


def test_a_buffered_prompt_is_replayed_and_the_others_are_searched_alone(tmp_path):
    """Prompts 0 and 2 of 3 are in the buffer (1 and 5 cached solutions; groups of R = 4): group 0 is its cached
    solution then 3 direct rollouts, group 2 its first 4 cached solutions; every row of theirs is a terminal node of
    its own with q = ±1 by the verifier (the cached reference solutions +1), log-probs the params' own (for a
    sampled row: equal to the sampler's), and Tree-GRPO gives each token q − the group's mean q; group 1 is exactly a
    search of prompt 1 alone, its node ids moved by one group."""
    c, examples = _replay_config(tmp_path, {0: lambda e: [e.solution],
                                            2: lambda e: [e.solution] * 4 + ["9+9=18;#18"]})
    config = config_lib.parse(c)
    setup = single_turn.build_setup(config, str(tmp_path / "run"))
    params = setup_lib.initial_params(config, setup.model_cfg, jax.random.key(0))
    prompts, answers = [e.prompt for e in examples], [e.answer for e in examples]
    key, r, t = jax.random.key(5), 4, config.sampling.max_new_tokens
    rows, metrics = rollouts.generate_rows(config, setup, params, prompts, answers, np.full(3, r), key, [""] * 3)
    assert metrics["deepsearch/replayed_prompts"] == 2 and metrics["deepsearch/cached_rows"] == 5
    assert metrics["deepsearch/expansions"] == 2  # one prompt searched, 2 expansions

    tokens, mask = batches.encode_prompts(setup.tokenizer, prompts, config.sampling.prompt_bucket)
    verify = rollouts.search_verifiers(config, setup, tokens, mask, prompts, answers, [""] * 3, np.full(3, r))
    alone, _ = completions_lib.search_completions(config, setup, params, tokens[[1]], mask[[1]], key,
                                                  verify(np.array([1])))
    for field, value in alone.items():
        expected = value + r * (t + 1) if field == "tree_nodes" else value
        np.testing.assert_array_equal(getattr(rows, field)[r:2 * r], expected, err_msg=field)

    replayed = np.r_[0:r, 2 * r:3 * r]
    texts = batches.decode_completions(setup.tokenizer, rows.completion_tokens, rows.completion_mask)
    cached = np.array([0, 8, 9, 10, 11])
    assert [texts[i] for i in cached] == [examples[0].solution] + [examples[2].solution] * 4
    assert rows.finished[cached].all() and rows.node_terminal[replayed].all()
    np.testing.assert_array_equal(rows.node_q[cached], 1.0)
    np.testing.assert_array_equal(rows.tree_nodes[replayed], search_replay.flat_nodes(replayed, t))
    correct = np.array([rewards == 1.0 for rewards in rows.main])  # the verifier: main reward > 1/2
    np.testing.assert_array_equal(rows.node_q[replayed], np.where(correct[replayed], 1.0, -1.0))

    joined, attention = batches.join_sequences(tokens[np.repeat([0, 2], r)], mask[np.repeat([0, 2], r)],
                                               rows.completion_tokens[replayed], rows.completion_mask[replayed])
    logp = np.asarray(search_replay._teacher_forced(setup.model_cfg, params, joined, attention, t,
                                                    setup.rollout_cfg.temperature))
    own = rows.completion_mask[replayed]
    np.testing.assert_allclose(rows.logprobs[replayed][own], logp[own], atol=2e-5)  # sampled rows: the sampler's
    assert np.all(rows.logprobs[cached][rows.completion_mask[cached]] < 0)

    group_ids = np.repeat(np.arange(3), r)
    advantages = np.asarray(tree_lib.deepsearch(
        jnp.asarray(rows.scores), jnp.asarray(group_ids), jnp.asarray(rows.completion_mask, jnp.float32),
        jnp.asarray(rows.tree_nodes), jnp.asarray(rows.node_q), jnp.asarray(rows.node_terminal), num_groups=3))
    for g in (0, 2):
        q = rows.node_q[g * r:(g + 1) * r]
        expected = (q - q.mean())[:, None] * rows.completion_mask[g * r:(g + 1) * r]
        np.testing.assert_allclose(advantages[g * r:(g + 1) * r], expected, atol=1e-6)
    np.testing.assert_array_equal(advantages[2 * r:], 0.0)  # four correct cached solutions: no signal
    setup.rewards.close()


def test_replay_path_needs_deepsearch(tmp_path):
    c, _ = _replay_config(tmp_path, {0: lambda e: [e.solution]})
    c.deepsearch.enabled = False
    c.rl.advantage = "grpo"
    with pytest.raises(config_lib.ConfigError, match="config.deepsearch.replay_path=.*set config.deepsearch.enabled"):
        config_lib.parse(c)

