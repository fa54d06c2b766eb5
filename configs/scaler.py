"""SCALER's difficulty controller (Xu et al. 2026): a continuous difficulty steered to 50 % batch accuracy."""

from configs import default


def get_config():
    """GRPO on the arithmetic task with SCALER's in-environment difficulty controller (`rl4llm.data.difficulty`,
    the official code's settings): level d has 2 + d operands; a continuous difficulty d (from 0) puts
    round(B (d - floor d)) prompts at ceil(d) and the rest at floor(d), and after each step moves by
    clip(2 (batch accuracy - 0.5), -1, 1), within [0, 4] (4 = 6 operands; SCALER's top level is set per environment
    by the context budget). As configs/rlve.py, the response budget is 48 tokens so the longest chains fit.
    SCALER's environment curation (retiring saturated environments from an active set) has no counterpart: one
    task here.
    Run:
        python -m experiments.train --config=configs/scaler.py --workdir=/tmp/rl4llm/scaler
    Logged per step: selection/difficulty_level (d after the step), selection/difficulty_step,
    selection/batch_accuracy, selection/difficulty_mean (the prompts' mean level). Not yet measured at length: no result is claimed for this
    recipe.
    """
    c = default.get_config()
    c.selection.method = "scaler"
    c.selection.difficulty_max = 4
    c.sampling.max_new_tokens = 48
    return c
