"""Verifiable reward functions, by name: `score(completion_text, reference_answer) -> float`.

`config.task.reward` picks one; adding a reward is one function plus one line in `REWARDS`.
"""

from rl4llm.rewards import arithmetic
from rl4llm.rewards import math

REWARDS = {
    "exact_answer": arithmetic.score,  # 1 iff the integer after the last '#' equals the reference answer
    "math": math.score,  # boxed / #### / Answer: / last number, lenient equivalence (GSM8K, MATH)
    "math_strict": math.score_strict,  # explicit answer markers only, exact equivalence
}


def get_reward(name: str):
    """The reward function registered as `name`; ValueError listing the known names otherwise."""
    if name not in REWARDS:
        raise ValueError(f"unknown reward {name!r}; known: {', '.join(sorted(REWARDS))}")
    return REWARDS[name]
