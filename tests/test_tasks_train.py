"""The main job on other tasks: the task and reward switch from the command line, and the task recipes
(configs/grpo_countdown.py, configs/grpo_gsm8k_local.py) run RL steps on the nano model."""

import json
import math
import os
import subprocess
import sys

import numpy as np

from rl4llm import config as config_lib
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import job
from rl4llm.train import setup as setup_lib

# Recipes that set their own task: tested here, not by tests/test_recipes.py (which swaps in the tiny arithmetic task).
TASK_RECIPES = ("grpo_countdown", "grpo_gsm8k_local")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = {
    "model.preset": "nano",
    "sft.steps": 4,
    "sft.batch_size": 8,
    "rl.steps": 2,
    "rl.num_prompts": 2,
    "rl.num_generations": 2,
    "sampling.max_new_tokens": 32,
    "sampling.prompt_bucket": 16,
    "eval.num_examples": 2,
    "eval.every": 2,
    "log_every": 1,
    "checkpoint.every": 2,
}


def _rl_records(workdir):
    records = {r["step"]: r for r in metrics_lib.read_metrics(workdir, "rl")}
    assert sorted(records) == [1, 2]
    for record in records.values():
        bad = [k for k, v in record.items() if v is None or (isinstance(v, float) and not math.isfinite(v))]
        assert not bad, bad
    return records


def test_command_line_switches_task_and_reward(tmp_path):
    workdir = str(tmp_path / "countdown")
    flags = {
        **TINY,
        "task.name": "countdown",
        "task.reward": "countdown",
        "task.countdown.max_number": 9,
        "task.extra_rewards": "format_answer_tag:0.1",
        "task.length_shaping": "dapo_overlong",
        "task.length_shaping_kwargs.buffer": 8,
        "task.reward_workers": 2,
    }
    cmd = [sys.executable, "-m", "experiments.train", f"--workdir={workdir}"]
    cmd += [f"--config.{k}={v}" for k, v in flags.items()]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    records = _rl_records(workdir)
    for record in records.values():
        assert record["reward/timeouts"] == 0 and record["reward/errors"] == 0
        assert "reward/format_answer_tag" in record and "reward/countdown" in record
    with open(os.path.join(workdir, "config.json")) as f:
        task = json.load(f)["task"]
    assert (task["name"], task["reward"]) == ("countdown", "countdown")
    assert os.path.exists(os.path.join(workdir, "tokenizer", "countdown.model"))


def _shrink(config):
    for key, value in TINY.items():
        section, field = key.split(".") if "." in key else (None, key)
        if section:
            config[section][field] = value
        else:
            config[field] = value
    config.eval.pass_n = 2
    config.eval.pass_k = (1, 2)
    return config


def _write_gsm8k(path, n, offset=0):
    with open(path, "w") as f:
        for i in range(offset, offset + n):
            a, b = i % 7 + 1, i % 5 + 2
            record = {"question": f"Tom has {a} bags of {b} apples. How many?", "answer": f"{a}*{b}={a * b}\n#### {a * b}"}
            f.write(json.dumps(record) + "\n")


def test_countdown_recipe_scores_its_reference_solutions(tmp_path):
    """configs/grpo_countdown.py: valid, and its task, tokenizer and reward pipeline (pool, DAPO overlong
    shaping) agree; its RL loop is the one the command-line test above runs with the same switches."""
    from configs import grpo_countdown

    assert "--config=configs/grpo_countdown.py" in grpo_countdown.get_config.__doc__
    config = config_lib.parse(grpo_countdown.get_config())
    setup = setup_lib.build_setup(config, str(tmp_path))
    try:
        examples = setup.task.source.train_examples(0, 8)
        assert not setup.tokenizer.unknown_chars("".join(e.prompt + e.solution for e in examples))
        lengths = [len(setup.tokenizer.encode(e.solution)) + 1 for e in examples]
        scores, main, _, metrics = setup.rewards.score(
            [e.solution for e in examples], [e.answer for e in examples], np.array(lengths), np.arange(8),
            max_length=config.sampling.max_new_tokens,
        )
        assert (main == 1.0).all() and metrics["reward/timeouts"] == metrics["reward/errors"] == 0
        # Shorter than max_new_tokens - buffer (40 - 8): no overlong penalty.
        assert max(lengths) <= 32 and (scores == 1.0).all()
    finally:
        setup.rewards.close()


def test_gsm8k_local_recipe_runs(tmp_path):
    from configs import grpo_gsm8k_local

    assert "--config=configs/grpo_gsm8k_local.py" in grpo_gsm8k_local.get_config.__doc__
    config = _shrink(grpo_gsm8k_local.get_config())
    config.task.local.train_path = str(tmp_path / "train.jsonl")
    config.task.local.test_path = str(tmp_path / "test.jsonl")
    _write_gsm8k(config.task.local.train_path, 40)
    _write_gsm8k(config.task.local.test_path, 8, offset=100)
    config.sampling.prompt_bucket = 48
    config_lib.parse(config)
    job.run(config, str(tmp_path / "run"))
    for record in _rl_records(str(tmp_path / "run")).values():
        assert record["reward/timeouts"] == 0 and record["reward/errors"] == 0
