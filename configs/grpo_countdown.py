"""GRPO on Countdown (TinyZero-style): reach the target with the given numbers, each used once."""

from configs import default


def get_config():
    """GRPO on Countdown (TinyZero-style): reach the target with the given numbers, each used once.

    Run:
        python -m experiments.train --config=configs/grpo_countdown.py --workdir=/tmp/rl4llm/countdown

    The same switch from the default config on the command line:
        python -m experiments.train --workdir=/tmp/rl4llm/cd --config.task.name=countdown --config.task.reward=countdown

    Task: 3 numbers in [1, 20], target in [0, 100] (rl4llm.data.countdown); prompt "3 7 5 -> 50\\n", reference
    completion "<answer>(3+7)*5</answer>". Reward (rl4llm.rewards.countdown): 1 for a correct equation, 0.1 for a
    well-formed wrong one, 0 without <answer> tags, plus a DAPO soft overlong penalty over the last 8 tokens.
    Scoring runs in 2 worker processes with a 10 s hard timeout per completion.

    Result: not measured yet (the recipe is exercised for 2 RL steps by tests/test_tasks_train.py).
    """
    c = default.get_config()
    c.task.name = "countdown"
    c.task.reward = "countdown"
    c.task.countdown.min_numbers = 3
    c.task.countdown.max_numbers = 3
    c.task.countdown.max_number = 20
    c.task.countdown.max_target = 100
    c.task.length_shaping = "dapo_overlong"
    c.task.length_shaping_kwargs.buffer = 8
    c.task.reward_workers = 2
    c.task.reward_timeout_s = 10.0
    c.sampling.max_new_tokens = 40
    c.sampling.prompt_bucket = 16
    return c
