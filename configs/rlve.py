"""RLVE adaptive difficulty (Zeng et al. 2025): problems drawn at levels just below the policy's frontier."""

from configs import default


def get_config():
    """GRPO on the arithmetic task with RLVE's difficulty controller (`rl4llm.data.difficulty`): level d has
    2 + d operands; each prompt's level is uniform over {h - 3, ..., h}, and the upper level h rises by one when
    the samples at level h reach 90 % accuracy over at least 8 groups (then the count restarts). RLVE's defaults
    (initial level 0, window 4, 8 prompts x 16 samples, 0.9), with h capped at 4 (6 operands) and the response
    budget raised to 48 tokens so the longest chains fit (a 6-operand worked solution is up to ~44 characters).
    The warm start is the default's SFT on 4-operand problems (completions padded to the 48-token budget).
    Run:
        python -m experiments.train --config=configs/rlve.py --workdir=/tmp/rl4llm/rlve
    Logged per step: selection/difficulty_upper (h), selection/difficulty_mean, selection/frontier_accuracy (at
    each check), selection/difficulty_raised. Not yet measured at length: no result is claimed for this recipe.
    """
    c = default.get_config()
    c.selection.method = "adaptive_difficulty"
    c.selection.difficulty_max = 4
    c.sampling.max_new_tokens = 48
    return c
