"""ReLIFT (train.companions.relift, with hardest_questions): the buffer's order by hand, the hardest
questions of hand-built rows, a run whose SFT steps fire on schedule and resume exactly, and config errors."""

import types

import numpy as np
import pytest

from rl4llm import config as config_lib
from rl4llm.train import job
from rl4llm.train import metrics as metrics_lib
from rl4llm.train.companions import relift
from rl4llm.train.rows import Rows
from tests.test_multi_turn import agent_config
from tests.test_train import tiny_config

RELIFT_RECIPES = ("relift",)  # run here (test_recipes.py's parity reward rarely fails a whole group)


def _buffer(rows):  # one [C, 2] array of row ids, to follow the order
    return (np.asarray(rows, np.int32).reshape(-1, 1).repeat(2, axis=1),)


def test_buffer_is_newest_first_bounded_and_pops_the_newest():
    empty = (np.zeros((4, 2), np.int32),)
    buf, count = relift.push_front(empty, 0, _buffer([1, 2]))
    assert count == 2 and buf[0][:, 0].tolist() == [1, 2, 0, 0]
    buf, count = relift.push_front(buf, count, _buffer([3, 4, 5]))  # the oldest (2) falls off
    assert count == 4 and buf[0][:, 0].tolist() == [3, 4, 5, 1]
    taken, buf, count = relift.pop_front(buf, count, 3)
    assert taken[0][:, 0].tolist() == [3, 4, 5] and count == 1 and buf[0][:, 0].tolist() == [1, 0, 0, 0]


class _Tokenizer:
    pad_id, eos_id = 0, 9

    def encode(self, text):
        return [int(c) for c in text]


def test_hardest_questions_of_hand_built_rows():
    config = tiny_config()
    config.relift.batch_size, config.relift.prompt_tokens, config.sampling.max_new_tokens = 2, 3, 4
    setup = types.SimpleNamespace(tokenizer=_Tokenizer())
    prompts = np.asarray([[0, 5, 6]] * 2 + [[7, 7, 7]] * 2 + [[0, 0, 4]] * 2, np.int32)
    n = len(prompts)
    rows = Rows(prompt_tokens=prompts, prompt_mask=prompts != 0, completion_tokens=np.zeros((n, 4), np.int32),
                completion_mask=np.ones((n, 4), bool), logprobs=np.zeros((n, 4), np.float32),
                finished=np.ones(n, bool), scores=np.zeros(n, np.float32),
                main=np.asarray([0, 0, 1, 0, 0, 0], np.float32),  # group 1 has a success
                components=np.zeros((n, 1), np.float32), hint_chars=np.zeros(n, np.int32), fresh=np.ones(n, bool),
                off_policy=np.zeros(n, bool), hint_tokens=np.zeros(n, np.int32), solutions=np.asarray(["12", "12", "3", "3", "45", "45"], object))
    (tokens, attention, mask), metrics = relift.hardest_questions(config, setup, rows, np.repeat([0, 1, 2], 2))
    assert metrics == {"relift/solve_none": 2 / 3, "relift/too_long": 0.0}
    np.testing.assert_array_equal(tokens, [[0, 5, 6, 1, 2, 9, 0], [0, 0, 4, 4, 5, 9, 0]])
    np.testing.assert_array_equal(attention, [[0, 1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1, 0]])
    np.testing.assert_array_equal(mask, [[1, 1, 1, 0], [1, 1, 1, 0]])
    config.relift.prompt_tokens = 1  # group 0's prompt (2 tokens) no longer fits: counted, not buffered
    (tokens, _, _), metrics = relift.hardest_questions(config, setup, rows, np.repeat([0, 1, 2], 2))
    np.testing.assert_array_equal(tokens, [[4, 4, 5, 9, 0]])
    assert metrics["relift/too_long"] == 1.0


def _never_right(completion: str, answer: str) -> float:
    return 0.0


def _run_config(monkeypatch):
    from rl4llm import rewards

    monkeypatch.setitem(rewards.REWARDS, "never", _never_right)
    config = tiny_config()
    config.task.reward = "never"  # every group fails: 4 hardest questions a step
    config.rl.steps = 3
    config.eval.every = 1000
    config.relift.batch_size, config.relift.capacity = 2, 8
    return config


def test_sft_steps_fire_on_schedule_and_resume_exactly(tmp_path, monkeypatch):
    config = _run_config(monkeypatch)
    full = str(tmp_path / "full")
    job.run(config, full)
    records = {r["step"]: r for r in metrics_lib.read_metrics(full, "rl")}
    # 4 questions join each step, 2 leave with each SFT step: 2, 4, 6 left
    assert [records[s]["relift/buffer"] for s in (1, 2, 3)] == [2.0, 4.0, 6.0]
    for record in records.values():
        assert record["relift/solve_none"] == 1.0 and record["relift/sft_updates"] == 1.0
        assert np.isfinite(record["relift/sft_loss"]) and record["relift/sft_grad_norm"] > 0
    resumed = str(tmp_path / "resumed")
    job.run(config, resumed, stop_after_rl_step=2)
    job.run(config, resumed)
    again = {r["step"]: r for r in metrics_lib.read_metrics(resumed, "rl")}
    for key in ("relift/buffer", "relift/sft_loss", "relift/sft_entropy"):
        assert again[3][key] == records[3][key], key


def test_recipe_runs_and_its_sft_steps_act(tmp_path, monkeypatch):
    from configs import relift as recipe
    from tests.test_recipes import shrink

    assert "--config=configs/relift.py" in recipe.get_config.__doc__
    config = shrink(recipe.get_config())
    _run_config(monkeypatch)  # registers the reward
    config.task.reward = "never"
    config.relift.batch_size = 4  # the tiny job's 4 prompts a step
    job.run(config, str(tmp_path))
    records = metrics_lib.read_metrics(str(tmp_path), "rl")
    assert all(r["relift/sft_updates"] == 1.0 and np.isfinite(r["relift/sft_loss"]) for r in records)


def test_config_errors_name_the_field():
    config = tiny_config()
    config.relift.batch_size, config.relift.capacity = 16, 8
    with pytest.raises(ValueError, match=r"config.relift.batch_size=16: .* <= config.relift.capacity=8"):
        config_lib.parse(config)
    agent = agent_config()
    agent.relift.batch_size = 2
    with pytest.raises(ValueError, match=r"config.relift.batch_size=2: buffers single-turn questions"):
        config_lib.parse(agent)
