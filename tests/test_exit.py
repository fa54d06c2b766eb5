"""ExIt's partial-history buffer (`rl4llm.data.partial_histories`) and its collector (`train.curricula.collect_exit`):
priorities by hand, no zero-variance instance ever drawn, replacement by priority, histories cut at step ends, and
resumed groups whose prompts hold exactly their instance's problem and history."""

import dataclasses

import jax
import numpy as np
import pytest

from rl4llm import config as config_lib
from rl4llm.data import partial_histories as ph
from rl4llm.data import tasks
from rl4llm.train import curricula
from rl4llm.train import prompt_selection
from rl4llm.train.rows import Rows
from tests.test_train import tiny_config


def _buffer(priorities, capacity=None):
    """A buffer whose slot i holds instance (step 10 + i, index i, history 'h<i>;') with priorities[i]."""
    buf = ph.init_buffer(capacity or len(priorities), 8)
    for i, p in enumerate(priorities):
        buf = ph.insert(buf, [(10 + i, i, f"h{i};", p)])
    return buf


def test_group_variance_is_the_population_variance_of_each_groups_returns():
    returns = np.array([[1, 0, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0], [0.5, 0, 0, 0]])
    np.testing.assert_allclose(ph.group_variance(returns), [0.25, 0.0, 3 / 16, 0.046875])


def test_draw_never_takes_a_zero_priority_instance_and_follows_the_priorities():
    buf = ph.rescore(_buffer([0.25, 0.1875, 0.0625, 0.01]), np.array([3]), np.array([0.0]))
    assert ph.size(buf) == 3  # the instance whose group had equal returns left
    assert ph.draw(buf, 8, np.random.default_rng(0)).tolist() == [0, 1, 2]  # only 3 of positive priority
    counts = np.bincount([ph.draw(buf, 1, np.random.default_rng(s))[0] for s in range(4000)], minlength=4)
    expected = 4000 * np.array([0.25, 0.1875, 0.0625, 0.0]) / 0.5
    assert counts[3] == 0
    np.testing.assert_array_less(np.abs(counts - expected), 5 * np.sqrt(expected + 1))
    assert ph.draw(ph.init_buffer(4, 8), 2, np.random.default_rng(0)).size == 0


def test_insert_fills_free_slots_then_replaces_only_lower_priorities():
    buf = _buffer([0.25, 0.1], capacity=3)
    buf = ph.insert(buf, [(7, 3, "ab;", 0.05)])  # a free slot is left
    assert buf.stream_step.tolist() == [10, 11, 7] and ph.history_text(buf, 2) == "ab;"
    buf = ph.insert(buf, [(8, 4, "x;", 0.01), (9, 5, "yz;", 0.2)])  # full: 0.2 replaces 0.05; 0.01 replaces nothing
    assert buf.stream_step.tolist() == [10, 11, 9] and buf.example_index.tolist() == [0, 1, 5]
    assert ph.history_text(buf, 2) == "yz;" and buf.history_len[2] == 3 and buf.priority[2] == np.float32(0.2)
    with pytest.raises(ValueError, match="exit_max_chars"):
        ph.insert(buf, [(1, 1, "123456789", 0.5)])


def test_histories_are_cut_after_a_step_never_inside_the_answer():
    completion = "3+7=10;10-5=5;#5"
    assert ph.step_ends(completion, ";") == [7, 14]
    cuts = {ph.cut("2+1=3;", completion, ";", np.random.default_rng(s)) for s in range(50)}
    assert cuts == {"2+1=3;3+7=10;", "2+1=3;3+7=10;10-5=5;"}
    assert ph.cut("", "#12", ";", np.random.default_rng(0)) is None


def _selector(num_prompts=4, num_generations=4, resume_fraction=0.5):
    c = tiny_config()
    c.rl.num_prompts, c.rl.num_generations = num_prompts, num_generations
    c.task.min_operands = c.task.max_operands = 4  # three steps: a history can leave steps to write
    c.sampling.max_new_tokens = 24
    c.selection.method = "exit"
    c.selection.exit_resume_fraction = resume_fraction
    config = config_lib.parse(c)
    task = tasks.build(config.task, config.seed)
    decode = lambda tokens, mask: ["".join(chr(t) for t, m in zip(row, r) if m) for row, r in zip(tokens, mask)]
    return prompt_selection.Selector(config, task, data_offset=0, pad_id=0, encode=None, tokenize=None,
                                     decode=decode)


def _scripted_generate(calls, solved):
    """A policy whose rollout j of group i writes the reference solution (with its history's characters removed)
    when solved(i, j), else the same solution with a wrong final answer; completions as character codes."""

    def generate(prompts, answers, counts, key, prefixes, traces=None, solutions=None):
        del key, traces
        calls.append((list(prompts), list(prefixes)))
        texts, main = [], []
        for i, (prefix, solution, answer) in enumerate(zip(prefixes, solutions, answers)):
            assert solution.startswith(prefix) or prefix == ""  # histories here are the reference's own steps
            for j in range(int(counts[i])):
                right = solved(i, j)
                texts.append(solution[len(prefix):] if right else solution[len(prefix):] + "9")
                main.append(float(right))
        width = max(len(t) for t in texts)
        n = len(texts)
        main = np.asarray(main, np.float32)
        return Rows(prompt_tokens=np.zeros((n, 1), np.int32), prompt_mask=np.ones((n, 1), bool),
                    completion_tokens=np.array([[ord(c) for c in t] + [0] * (width - len(t)) for t in texts], np.int32),
                    completion_mask=np.arange(width)[None, :] < np.array([len(t) for t in texts])[:, None],
                    logprobs=np.zeros((n, width), np.float32), finished=np.ones(n, bool), scores=main, main=main,
                    components=main[:, None], hint_chars=np.zeros(n, np.int32), fresh=np.ones(n, bool),
                    off_policy=np.zeros(n, bool), hint_tokens=np.zeros(n, np.int32)), {}

    return generate


def test_collect_exit_resumes_exactly_its_instances_and_grows_from_varying_groups():
    """Step 0 (empty buffer): four fresh groups; groups 0 and 2 have varying returns and each gives one instance,
    a prefix of one of its rollouts ending after a step. Step 1: two groups resume them; each resumed prompt is the
    instance's own problem followed by exactly its history, which is also the scored prefix. A resumed group whose
    returns are all equal leaves the buffer."""
    selector = _selector()
    buf = selector.init_state()
    calls = []
    collected, buf = curricula.collect_exit(selector, buf, 0, jax.random.key(0),
                                            _scripted_generate(calls, lambda i, j: i in (0, 2) and j < 2 or i == 1))
    examples = selector.stream_examples(0, 4)
    assert calls[0] == ([e.prompt for e in examples], [""] * 4)
    assert collected.metrics["selection/exit_resumed_groups"] == 0.0
    assert collected.metrics["selection/exit_new_instances"] == 2.0 and ph.size(buf) == 2
    live = np.flatnonzero(buf.stream_step != ph.EMPTY)
    assert sorted(buf.example_index[live].tolist()) == [0, 2] and buf.stream_step[live].tolist() == [0, 0]
    np.testing.assert_allclose(buf.priority[live], [0.25, 0.25])
    for s in live:
        history = ph.history_text(buf, s)
        assert history.endswith(";") and examples[buf.example_index[s]].solution.startswith(history)

    stored = {int(buf.example_index[s]): ph.history_text(buf, s) for s in live}
    calls.clear()
    # step 1: the fresh groups (0, 1) vary; resumed group 2 varies, resumed group 3 is all right (variance 0)
    collected, buf = curricula.collect_exit(selector, buf, 1, jax.random.key(1),
                                            _scripted_generate(calls, lambda i, j: i == 3 or j < 2))
    prompts, prefixes = calls[0]
    fresh = selector.stream_examples(1, 2)
    resumed_indices = [int(i) for i in sorted(stored)]  # draw returns slots in order; slots hold indices 0, 2
    assert prompts[:2] == [e.prompt for e in fresh] and prefixes[:2] == ["", ""]
    for k, index in enumerate(resumed_indices):
        assert prefixes[2 + k] == stored[index]
        assert prompts[2 + k] == examples[index].prompt + stored[index]
    m = collected.metrics
    assert m["selection/exit_resumed_groups"] == 2.0
    assert m["selection/exit_history_chars"] == np.mean([len(stored[i]) for i in resumed_indices])
    # the all-right resumed group (the second drawn) left; three groups varied: the two fresh ones each added an
    # instance, the resumed one only if its history left a step to write (a rollout's cut ends after one it wrote)
    grown = 2 + (stored[resumed_indices[0]].count(";") < 3)
    assert m["selection/exit_new_instances"] == grown and ph.size(buf) == 1 + grown
    addresses = {(int(buf.stream_step[s]), int(buf.example_index[s]))
                 for s in np.flatnonzero(buf.stream_step != ph.EMPTY)}
    # the kept instance, its continuation (same problem, a longer history) and the two fresh groups' instances
    assert addresses == {(0, resumed_indices[0]), (1, 0), (1, 1)}
    continued = [ph.history_text(buf, s) for s in np.flatnonzero(buf.stream_step == 0)]
    assert all(h.startswith(stored[resumed_indices[0]]) for h in continued)


def test_exit_refuses_what_it_would_ignore_and_tasks_without_steps():
    for field, value in (("selection.hints", True), ("rl.off_policy_traces", 2)):
        c = tiny_config()
        c.selection.method = "exit"
        section, name = field.split(".")
        setattr(getattr(c, section), name, value)
        with pytest.raises(ValueError, match=f"config.{field}={value!r}: ExIt"):
            config_lib.parse(c)
    c = tiny_config()
    c.selection.method, c.task.name = "exit", "countdown"  # its solutions are one expression: no step to cut after
    with pytest.raises(ValueError, match="config.selection.exit_separator=';': task 'countdown'"):
        config_lib.parse(c)


def test_the_buffer_round_trips_through_a_checkpoint(tmp_path):
    from rl4llm.train import checkpointing

    buf = _buffer([0.25, 0.0625, 0.1875])
    ckpt = checkpointing.Checkpointer(str(tmp_path), max_to_keep=1)
    state = {"w": np.ones(3, np.float32)}
    ckpt.save(3, state, {"data_step": 3}, selection=buf)
    ckpt.close()
    restored = checkpointing.Checkpointer(str(tmp_path), max_to_keep=1).restore_latest(
        state, selection=ph.init_buffer(3, 8))
    for f in dataclasses.fields(buf):
        np.testing.assert_array_equal(getattr(restored.selection, f.name), getattr(buf, f.name))
    assert ph.history_text(restored.selection, 2) == "h2;"
