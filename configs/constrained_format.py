"""Constrained RLHF (Moskovitz et al. 2024, "Confronting Reward Model Overoptimization with Constrained RLHF") on the
built-in arithmetic task: maximise correctness subject to a format constraint, with a Lagrange multiplier."""

from configs import default


def get_config():
    """Constrained GRPO: maximise the correctness reward (exact_answer) subject to E[format_arithmetic] >= 0.95, the
    share of completions written in the worked form 'a+b=c;...#n' and nothing else (`rewards.arithmetic
    .format_score`). The advantage is A_correct + λ·A_format, each from GRPO on its component alone (the official
    code's mixed advantages); after each step λ <- clip(λ + 0.1·(0.95 − mean format), 0, 10), so λ grows while the
    batch breaks the format and decays to 0 once it keeps it (`rl4llm.rl.reward_weighting`). The extra reward's
    weight 0 keeps the logged `reward` the correctness; the multiplier, not that weight, prices the format.
    Departures from the official code (docstrings there): one projected λ step per RL step, no momentum; its
    lagrange_lr 1e-2 with momentum 0.9, stepped every minibatch, moves λ ~10x further per step than plain steps at
    1e-2 (measured below: at 1e-2, λ reached 0.007 in 30 steps), hence η = 0.1 here.

    Logged every step: `constraint/multiplier/format_arithmetic` (the λ the step trained with),
    `constraint/violation/format_arithmetic` (0.95 − the batch's mean; > 0: violated),
    `reward_weighting/mean/<component>` for exact_answer and format_arithmetic.

    Run:
        python -m experiments.train --config=configs/constrained_format.py --workdir=/tmp/rl4llm/constrained_format
    Result: not yet recorded at length (the SFT warm start writes the worked form almost always, so λ stays near 0
    unless RL drifts from it; --config.reward_weighting.thresholds=format_arithmetic:0.999 makes it bind).
    """
    c = default.get_config()
    c.task.extra_rewards = "format_arithmetic:0"
    c.reward_weighting.method = "constrained"
    c.reward_weighting.thresholds = "format_arithmetic:0.95"
    c.reward_weighting.multiplier_lr = 0.1
    c.reward_weighting.multiplier_max = 10.0
    return c
