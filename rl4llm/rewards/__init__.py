"""Verifiable reward functions, by name: `score(completion_text, reference_answer) -> float`.

`config.task.reward` picks one; adding a reward is one function plus one line in `REWARDS`. Every reward
returns a float for any completion text and never raises on it (bad model output earns 0); a malformed
*reference* answer is a task bug and raises. `rl4llm.rewards.pipeline` scores a step's batch (process pool,
extra weighted components, length shaping, majority-vote pseudo-labels).
"""

from rl4llm.rewards import arithmetic
from rl4llm.rewards import countdown
from rl4llm.rewards import final_text
from rl4llm.rewards import format as format_rewards
from rl4llm.rewards import math
from rl4llm.rewards import sandbox

REWARDS = {
    "exact_answer": arithmetic.score,  # 1 iff the integer after the last '#' equals the reference answer
    "final_text": final_text.score,  # 1 iff the text after the last '#' equals the reference (sorting)
    "math": math.score,  # boxed / #### / Answer: / last number, math-verify equivalence as TRL (GSM8K, MATH)
    "math_strict": math.score_strict,  # explicit answer markers only (boxed / #### / Answer:), the same equivalence
    "countdown": countdown.score,  # TinyZero: 1 right equation, 0.1 well-tagged but wrong, 0 no <answer>
    "code": sandbox.score,  # fraction of the reference tests the sandboxed program passes
    "code_all_pass": sandbox.score_all_pass,  # 1 iff it passes all of them
    "format_arithmetic": arithmetic.format_score,  # the arithmetic task's worked form 'a+b=c;...#n', nothing else
    "format_think_answer": format_rewards.think_answer,  # <think>..</think><answer>..</answer>
    "format_answer_tag": format_rewards.answer_tag,  # exactly one <answer>..</answer>
    "format_tool_call": format_rewards.tool_call,  # every <tool_call> holds {"name", "arguments"}
}

# Final-answer extractors (completion -> canonical answer or None), for majority-vote pseudo-labels (TTRL):
# a label must be a valid reference answer of the same reward.
EXTRACTORS = {
    "exact_answer": arithmetic.extract_answer,
    "final_text": final_text.extract_answer,
    "math": math.canonical_answer,
    "math_strict": math.canonical_answer_strict,
}


def get_reward(name: str):
    """The reward function registered as `name`; ValueError listing the known names otherwise."""
    if name not in REWARDS:
        raise ValueError(f"unknown reward {name!r}; known: {', '.join(sorted(REWARDS))}")
    return REWARDS[name]
