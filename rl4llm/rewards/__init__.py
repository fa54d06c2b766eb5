"""Verifiable reward functions, by name: `score(completion_text, reference_answer) -> float`.

`config.task.reward` picks one; adding a reward is one function plus one line in `REWARDS`.
"""

from rl4llm.rewards import arithmetic

REWARDS = {
    "exact_answer": arithmetic.score,  # 1 iff the integer after the last '#' equals the reference answer
}


def get_reward(name: str):
    """The reward function registered as `name`; ValueError listing the known names otherwise."""
    if name not in REWARDS:
        raise ValueError(f"unknown reward {name!r}; known: {', '.join(sorted(REWARDS))}")
    return REWARDS[name]
