"""Off-policy traces in the groups (`config.rl.off_policy_traces`, LUFFY): the config checks, the rows a group gets
(sampled rows, then the reference-solution traces), and the learner's off-policy token mask. The recipe's run
(`configs/luffy.py`) is in tests/test_recipes.py."""

import types

import numpy as np
import pytest

from configs import default
from rl4llm import config as config_lib
from rl4llm.data import tasks as tasks_lib
from rl4llm.train import inputs as inputs_lib
from rl4llm.train import rollouts
from rl4llm.train import setup as setup_lib
from rl4llm.train import single_turn


def _messages(**fields) -> str:
    c = default.get_config()
    c.update_from_flattened_dict(fields)
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.parse(c)
    return str(e.value)


def test_invalid_combinations_name_the_field():
    message = _messages(**{"rl.off_policy_traces": 16, "rl.loss": "ppo_clip", "selection.method": "dots",
                           "rl.tis_cap": 2.0})
    for expected in ("config.rl.off_policy_traces=16: must be < config.rl.num_generations=16",
                     "config.rl.off_policy_traces=16: config.rl.loss='ppo_clip' does not take off_policy_mask",
                     "config.rl.off_policy_traces=16: needs config.selection.method in",
                     "config.rl.off_policy_traces=16: config.rl.tis_cap=2.0 divides by sampler log-probs"):
        assert expected in message, (expected, message)
    assert "needs config.selection.method" in _messages(
        **{"rl.off_policy_traces": 2, "rl.loss": "luffy", "selection.hints": True})


def test_valid_combinations_parse():
    for fields in ({"rl.off_policy_traces": 2, "rl.loss": "luffy"},
                   {"rl.off_policy_traces": 15, "rl.loss": "luffy", "selection.method": "dynamic_sampling"},
                   {"rl.off_policy_traces": 0, "rl.loss": "luffy"}):
        c = default.get_config()
        c.update_from_flattened_dict(fields)
        assert config_lib.parse(c).rl.off_policy_traces == fields["rl.off_policy_traces"]


def test_traces_follow_each_groups_sampled_rows(tmp_path):
    config = config_lib.parse(default.get_config())
    task = tasks_lib.build(config.task, config.seed)
    tokenizer = setup_lib.task_tokenizer(str(tmp_path), task)
    setup = types.SimpleNamespace(tokenizer=tokenizer)
    t = config.sampling.max_new_tokens
    counts = np.array([2, 1, 3])  # sampled rows of each prompt; row r's tokens are all r + 1
    sampled = {
        "completion_tokens": np.repeat(np.arange(1, 7, dtype=np.int32)[:, None], t, axis=1),
        "completion_mask": np.ones((6, t), bool),
        "logprobs": np.full((6, t), -0.5, np.float32),
        "finished": np.zeros(6, bool),
        "off_policy": np.zeros(6, bool),
    }
    traces = [["1+2=3;#3"], ["4+4=8;#8"], ["9-1=8;#8"]]
    rows, sizes = rollouts.with_traces(config, setup, sampled, counts, traces)
    np.testing.assert_array_equal(sizes, [3, 2, 4])
    np.testing.assert_array_equal(rows["off_policy"], [0, 0, 1, 0, 1, 0, 0, 0, 1])
    np.testing.assert_array_equal(rows["completion_tokens"][~rows["off_policy"], 0], [1, 2, 3, 4, 5, 6])
    trace_rows = np.flatnonzero(rows["off_policy"])
    for row, (text,) in zip(trace_rows, traces):
        ids = tokenizer.encode(text) + [tokenizer.eos_id]
        np.testing.assert_array_equal(rows["completion_tokens"][row, : len(ids)], ids)
        assert rows["completion_mask"][row].sum() == len(ids)
        assert tokenizer.decode(rows["completion_tokens"][row, : len(ids) - 1].tolist()) == text
    assert np.all(rows["logprobs"][trace_rows] == 0.0) and rows["finished"][trace_rows].all()
    assert rows["completion_mask"].dtype == bool and rows["logprobs"].dtype == np.float32


def test_learner_batch_masks_the_trace_tokens():
    c = default.get_config()
    c.rl.loss, c.rl.off_policy_traces, c.rl.num_generations, c.rl.num_prompts = "luffy", 1, 2, 1
    config = config_lib.parse(c)
    mask = np.array([[1, 1, 0], [1, 0, 0]], np.float32)
    data = inputs_lib.StepData(config, None, None, None, 0, None, np.zeros(2), np.zeros((2, 1)), mask,
                               np.zeros((2, 5), np.int32), np.ones((2, 5), np.int32), np.zeros(2, np.int32),
                               behaviour=None, off_policy=np.array([False, True]))
    rollout = types.SimpleNamespace(logprobs=np.zeros((2, 3), np.float32))
    batch = single_turn.learner_batch(config, data, rollout, np.zeros(2), np.zeros((2, 3)))
    np.testing.assert_array_equal(batch.off_policy_mask, [[0, 0, 0], [1, 0, 0]])
    c.rl.loss, c.rl.off_policy_traces = "ppo_clip", 0
    batch = single_turn.learner_batch(config_lib.parse(c), data, rollout, np.zeros(2), np.zeros((2, 3)))
    assert batch.off_policy_mask is None


def test_one_step_scores_the_reference_traces_with_the_task_reward(tmp_path):
    """A real step (nano job, the arithmetic task's exact-answer reward): the traces are the reference solutions, so
    every one is rewarded 1; the loss sees them (off_policy_frac = trace tokens / tokens > 0) and stays finite."""
    import math

    from rl4llm.train import job
    from rl4llm.train import metrics as metrics_lib
    from tests.test_train import tiny_config

    config = tiny_config(loss="luffy", off_policy_traces=1, steps=1)
    config.sft.steps = 2
    config.eval.every = 1000
    job.run(config, str(tmp_path))
    (record,) = metrics_lib.read_metrics(str(tmp_path), "rl")
    assert record["off_policy/trace_reward"] == 1.0
    assert 0.0 < record["off_policy_frac"] < 1.0
    assert 0.0 <= record["off_is_weight_min"] <= record["off_is_weight_mean"] <= record["off_is_weight_max"] <= 1.0
    assert math.isfinite(record["loss/pg"]) and math.isfinite(record["grad_norm"])
