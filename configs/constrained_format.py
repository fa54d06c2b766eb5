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
    Result: not yet recorded at length. Sanity run, 30 RL steps (one seed, loaded 2-core CPU, ~3.2 s per RL step):
    greedy accuracy 0.379 (SFT) -> 0.455 (step 15) -> 0.510 (step 30), pass@4 0.641 -> 0.742. The SFT warm start
    already writes the worked form in 93-100 % of a batch's completions, so the constraint bound only at 5 of 30
    steps and λ stayed below 0.003, back to 0 after each. The same run with threshold 0.999 and η = 0.01: λ rose to
    0.007 by step 30 (violated most steps), greedy 0.514 at step 30.
    """
    c = default.get_config()
    c.task.extra_rewards = "format_arithmetic:0"
    c.reward_weighting.method = "constrained"
    c.reward_weighting.thresholds = "format_arithmetic:0.95"
    c.reward_weighting.multiplier_lr = 0.1
    c.reward_weighting.multiplier_max = 10.0
    return c
