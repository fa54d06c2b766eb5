"""ADHint (Zhang et al. 2025, "ADHint: Adaptive Hints with Difficulty Priors for Reinforcement Learning")."""

from configs import default


def get_config():
    """ADHint: each problem's G rollouts in two rounds of G / 2. The first is unhinted and measures the problem's
    difficulty under the policy (the sample difficulty prior); the second appends the prefix of the reference
    solution at the hint rate h = h_max·(1 − acc) of the first round, h_max = 0.75 (no hint for a problem the policy
    always solves, 75 % of the solution for one it never does; `rl4llm.train.hints.round_groups`,
    `rl4llm.data.curriculum.adhint_rate`). The hinted rollouts are trained, as Guide's, as responses to the prompt
    without the hint, the hint's tokens first and off-policy (`hints.hint_in_completion`). The loss
    (`rl4llm.rl.adhint.adhint_loss`, `rl.loss='adhint'`) weights a hint token's gradient by the policy's probability
    of it, π_θ (consistency-based gradient modulation), and masks it when π_θ < 0.05 or its rollout's advantage is
    negative (selective masking: the hint is neither over-imitated nor unlearned); the sampled tokens get PPO's clip.
    The advantage (`adhint.adhint_advantages`, `rl.advantage='adhint'`) is GRPO's over the whole group with each
    hinted success scaled by w = min(1, d̂_hint/d̂_plain), the ratio of the Beta(1, 1) posterior failure rates of the
    group's hinted and unhinted rollouts (rollout difficulty posterior: a success the hint made easy counts less).

    Reconstruction (digest §8.3; the paper's code is not released, its abstract names the three parts): the linear
    prior h_max·(1 − acc), two rounds of G / 2, the modulation weight π_θ and threshold τ = 0.05, masking hint tokens
    of negative-advantage rollouts, and the posterior scale w are our readings; the hint is a prefix of the task's
    reference solution (GHPO's, never its final answer), as the paper's hints are prefixes of full trajectories.
    Departure from a literal "advantages computed separately for hinted and unhinted rollouts": the baseline and std
    are the whole group's (separate ones would zero the group whose unhinted rollouts all fail and hinted ones all
    succeed). Around it: `token-mean`, no KL, G = 16, the main job's lr. Without hints (acc = 1 everywhere) the run
    is GRPO's exactly. Logged: selection/hint_rate, selection/hinted_frac, selection/unhinted_accuracy,
    selection/hinted_accuracy (as SEELE's), `off_policy_frac` (hint tokens / trained tokens), `off_is_weight_mean`
    (π_θ of the hint tokens), `off_masked_frac`, `off_low_prob_frac`.

    Run:
        python -m experiments.train --config=configs/adhint.py --workdir=/tmp/rl4llm/adhint
    Measured (`--study=guidance_guide --arms=adhint`, 6-7-operand chains from the 4-operand warm start, 3 seeds, 40
    steps): pass@16 0.174 +- 0.019, level with GRPO's 0.173 +- 0.023 (notebooks/05_guidance.ipynb).
    """
    c = default.get_config()
    c.rl.advantage = "adhint"
    c.rl.agg_mode = "token-mean"
    c.rl.kl_coef = 0.0
    c.rl.loss = "adhint"
    c.rl.loss_kwargs.mask_threshold = 0.05
    c.selection.hints = True
    c.selection.hint_schedule = "adhint"
    c.selection.hint_rounds = 2
    c.selection.hint_max = 0.75
    c.selection.hint_placement = "completion"
    return c
