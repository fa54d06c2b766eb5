"""Off-policy traces from a file (`config.teacher.traces_path`, `rl4llm.data.trace_file`, `train.teacher.file_traces`):
a file of exactly the reference solutions trains bit-identically to `rl.off_policy_traces` alone; a prompt the file lacks gets an all-sampled group, counted in `off_policy/file_coverage`; bad files fail at
startup naming the field and the line."""

import json

import jax
import numpy as np
import pytest

from rl4llm.train import trace_export
from rl4llm import config as config_lib
from rl4llm.data import tasks as tasks_lib
from rl4llm.data import trace_file
from rl4llm.train import job
from rl4llm.train import rollouts
from rl4llm.train import runs
from rl4llm.train import setup as setup_lib
from rl4llm.train import single_turn
from rl4llm.train import teacher as teacher_lib
from tests.test_train import _comparable, _rl_records, tiny_config


def _luffy_config(**teacher):
    c = tiny_config(loss="luffy", off_policy_traces=2, steps=2)
    c.sft.steps = 0
    c.eval.every = 1000
    c.eval.num_examples = 4
    c.teacher.update(teacher)
    return c


def _write_lines(path, lines) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def _step_examples(config, n: int) -> list:
    """The first `n` prompts of RL step 0's stream (`Selector.stream_examples` without a curriculum)."""
    return tasks_lib.build(config.task, config.seed).source.train_examples(setup_lib.RL_DATA_OFFSET, n)


def test_a_file_of_the_reference_solutions_trains_as_the_reference_traces(tmp_path):
    """Two nano LUFFY steps (k = 2 traces of 4 rows) with the reference solutions, and with a file holding exactly
    them (written by `experiments.export_traces`, half its prompts re-spaced, one record of a prompt no step draws):
    every logged metric (rewards, lengths, loss, weights, grad norm), the final evaluation and the final params are
    bit-identical, and the file covered every prompt. (A resumed run draws the same traces: the draw is a function of
    the step's key, nothing to checkpoint; `test_a_prompt_without_traces_gets_an_all_sampled_group`.)"""
    reference = str(tmp_path / "reference")
    job.run(_luffy_config(), reference)
    config = config_lib.parse(runs.load_config(reference))
    setup = setup_lib.build_setup(config, reference)
    records = trace_file.reference_records(trace_export.training_examples(config, setup, config.rl.steps))
    setup.rewards.close()
    assert len(records) == config.rl.steps * config.rl.num_prompts
    for r in records[::2]:
        r["prompt"] = "  " + r["prompt"].replace(" ", "\t ") + "\n"  # the same prompt up to whitespace
    records.append({"prompt": "1+1=", "traces": ["wrong"]})
    path = str(tmp_path / "traces.jsonl")
    assert trace_file.write(path, records) == len(records)

    from_file = str(tmp_path / "file")
    summary = job.run(_luffy_config(traces_path=path), from_file)
    expected, got = _rl_records(reference), _rl_records(from_file)
    assert sorted(got) == sorted(expected) == [1, 2]
    for step in (1, 2):
        assert got[step].pop("off_policy/file_coverage") == 1.0
        assert _comparable(got[step]) == _comparable(expected[step]), step
    assert 0.0 < got[2]["off_policy_frac"] < 1.0
    with open(f"{reference}/summary.json") as f:
        assert json.load(f)["rl_eval_accuracy"] == summary["rl_eval_accuracy"]
    with runs.restore_policy(reference) as a, runs.restore_policy(from_file) as b:
        assert a.step == b.step == 2
        for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_prompt_without_traces_gets_an_all_sampled_group(tmp_path):
    """Three prompts, the file holding three traces of the first, one of the second, none of the third: with
    k = 2 asked of each, groups of 4 are (2 sampled, 2 of the first's traces, distinct), (2 sampled, the second's
    trace twice), (4 sampled); coverage 2/3. The draw is a pure function of the key (so a resumed run draws what the
    uninterrupted one did: nothing to checkpoint), and another key permutes differently. `export_traces` keeps the
    finished samples of the step's prompts above a reward (none above the maximum)."""
    c = tiny_config(loss="luffy", off_policy_traces=2)
    examples = _step_examples(config_lib.parse(c), 3)
    first = [examples[0].solution, "1+1=2;#2", "2+2=4;#4"]
    c.teacher.traces_path = _write_lines(tmp_path / "traces.jsonl", [
        json.dumps({"prompt": examples[0].prompt, "traces": first[:2]}),
        json.dumps({"prompt": examples[1].prompt, "traces": [examples[1].solution]}),
        json.dumps({"prompt": examples[0].prompt, "traces": first[2:]}),  # pooled with line 1's
    ])
    config = config_lib.parse(c)
    setup = single_turn.build_setup(config, str(tmp_path / "run"))
    assert setup.file_traces[trace_file.prompt_key(examples[0].prompt)] == tuple(first)
    params = setup_lib.initial_params(config, setup.model_cfg, jax.random.key(0))
    prompts, key = [e.prompt for e in examples], jax.random.key(3)
    rows, metrics = rollouts.generate_rows(config, setup, params, prompts, [e.answer for e in examples],
                                           np.full(3, 2), key, [""] * 3, [[e.solution] * 2 for e in examples])
    sampled = trace_export.sampled_records(config, setup, params, examples, 4, min_reward=0.0, seed=0)
    assert trace_export.sampled_records(config, setup, params, examples, 4, min_reward=2.0, seed=0) == []
    setup.rewards.close()
    assert 0 < len(sampled) <= 3 and all(r["prompt"] in prompts and 1 <= len(r["traces"]) <= 4 for r in sampled)
    for r in sampled:  # a finished sample re-encodes within the budget, so the file loads
        assert all(len(setup.tokenizer.encode(t)) < config.sampling.max_new_tokens for t in r["traces"])
    assert metrics["off_policy/file_coverage"] == 2 / 3
    np.testing.assert_array_equal(rows.off_policy, [0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0])
    assert len(rows.scores) == 12 and np.all(rows.logprobs[rows.off_policy] == 0.0)
    texts = [setup.tokenizer.decode(rows.completion_tokens[r][rows.completion_mask[r]].tolist())
             for r in np.flatnonzero(rows.off_policy)]
    assert len(set(texts[:2])) == 2 and set(texts[:2]) <= set(first)
    assert texts[2:] == [examples[1].solution] * 2

    draws = {tuple(map(tuple, teacher_lib.file_traces(setup.file_traces, prompts, np.full(3, 2), [2, 2, 2],
                                                      jax.random.key(s))[1])) for s in range(8)}
    assert len(draws) > 1  # the key picks the traces
    again = teacher_lib.file_traces(setup.file_traces, prompts, np.full(3, 2), [2, 2, 2],
                                    jax.random.fold_in(key, rollouts._TRACE_FILE_STREAM))
    assert [list(t) for t in again[1][:2]] == [texts[:2], texts[2:]] and again[1][2] == []
    np.testing.assert_array_equal(again[0], [2, 2, 4])


def test_bad_traces_files_fail_at_startup_naming_the_field_and_the_line(tmp_path):
    c = tiny_config(loss="luffy", off_policy_traces=1)
    example = _step_examples(config_lib.parse(c), 1)[0]
    good = json.dumps({"prompt": example.prompt, "traces": [example.solution]})
    c.teacher.traces_path = _write_lines(tmp_path / "good.jsonl", [good])
    config = config_lib.parse(c)
    setup = single_turn.build_setup(config, str(tmp_path / "run"))

    def error(lines) -> str:
        path = _write_lines(tmp_path / "bad.jsonl", lines)
        with pytest.raises(config_lib.ConfigError) as e:
            teacher_lib.load_file_traces(config.replace(teacher={"traces_path": path}), setup)
        assert str(e.value).startswith(f"config.teacher.traces_path={path!r}: "), str(e.value)
        return str(e.value)

    assert "holds no record" in error(["", "  "])
    assert "line 2: not JSON" in error([good, "{prompt: 1}"])
    assert 'line 3: needs "traces"' in error([good, "", json.dumps({"prompt": "x", "traces": []})])
    assert 'line 1: needs a non-empty string "prompt"' in error([json.dumps({"traces": ["a"]})])
    assert "line 2: trace 1 has more than 12 tokens" in error(
        [good, json.dumps({"prompt": "x", "traces": ["1", "1+2+3+4+5+6=21;#21"]})])
    assert "none of its 1 prompts is a training prompt" in error([json.dumps({"prompt": "9+9=?", "traces": ["a"]})])
    setup.rewards.close()

    for fields, expected in (
            ({"teacher.traces_path": str(tmp_path / "missing.jsonl")}, "not a readable file"),
            ({"teacher.checkpoint": str(tmp_path)}, "the traces come from the file or from the teacher model"),
            ({"rl.off_policy_traces": 0}, "it gives the off-policy traces; set config.rl.off_policy_traces >= 1")):
        bad = tiny_config(loss="luffy", off_policy_traces=1)
        bad.teacher.traces_path = str(tmp_path / "good.jsonl")
        bad.update_from_flattened_dict(fields)
        with pytest.raises(config_lib.ConfigError, match="config.teacher.traces_path") as e:
            config_lib.parse(bad)
        assert expected in str(e.value), str(e.value)


def test_a_local_task_without_reference_solutions_takes_its_traces_from_the_file(tmp_path):
    c = tiny_config(loss="luffy", off_policy_traces=1)
    c.task.name = "local"
    c.task.local.train_path = _write_lines(tmp_path / "train.jsonl", [json.dumps({"question": "1+1?", "answer": "2"})])
    c.task.local.solution_field = ""
    with pytest.raises(config_lib.ConfigError, match="solution_field='' gives no reference solutions"):
        config_lib.parse(c)
    c.teacher.traces_path = _write_lines(tmp_path / "traces.jsonl", [json.dumps({"prompt": "1+1?", "traces": ["2"]})])
    assert config_lib.parse(c).teacher.traces_path == c.teacher.traces_path


def test_sampled_completions_become_records_of_the_rewarded_ones(tmp_path):
    records = trace_file.sample_records(["a=", "b="], [["1", "2", "3", "4"], ["5", "6", "7", "8"]],
                                        [[1.0, 0.0, 1.0, 1.0], [0.0, 0.5, 0.0, 1.0]],
                                        [[True, True, True, False], [True, True, True, False]], min_reward=1.0)
    assert records == [{"prompt": "a=", "traces": ["1", "3"], "rewards": [1.0, 1.0]}]  # "4", "8": unfinished
    path = str(tmp_path / "samples.jsonl")
    trace_file.write(path, records)
    assert trace_file.index(trace_file.read(path)) == {"a=": ("1", "3")}
    with pytest.raises(ValueError, match='line 1: needs "traces"'):
        trace_file.write(path, [{"prompt": "a=", "traces": "1"}])
