"""GHPO (Liu et al. 2025, "GHPO: Adaptive Guidance for Stable and Efficient LLM Reinforcement Learning")."""

from configs import default


def get_config():
    """GHPO: GRPO, and each group whose G rollouts all fail is regenerated with a prefix of the task's reference
    solution appended to its prompt: 25% of the solution's characters, then 50%, then 75%, stopping at the first
    level at which some rollout is correct; that hinted group replaces the failed one
    (`rl4llm.train.hints.staged_groups`, `rl4llm.data.curriculum.hint_chars`: the prefix never reaches the final
    answer). The hint is part of the prompt,
    so the loss trains only the policy's own continuation, on-policy for the hinted prompt.

    Official code (hkgc-1/GHPO, ghpo_trainer.py, recipes/Qwen2.5-Math-7B/ghpo/config_ghpo.yaml), which this follows:
    the 0.25 -> 0.5 -> 0.75 schedule from step 0, GRPO advantages with the std division (scale_rewards), TRL's
    `bnpo` loss (one token mean over the batch: `token-mean`), no KL, temperature 1. Departures: G = 16 (GHPO's 8),
    the main job's lr 1e-4 (GHPO's 1e-6 is for a 7B model), and the hint is the bare solution prefix, without
    GHPO's sentence "The following text is the beginning part of the answer, ..." (our tiny models read no prose).
    Logged: selection/hint_candidates (all-fail groups), selection/hint_solved (replaced by a hinted group),
    selection/hint_rollouts (the extra rollouts the hint levels cost).

    Run:
        python -m experiments.train --config=configs/ghpo.py --workdir=/tmp/rl4llm/ghpo
    Result (notebooks/05_guidance.ipynb, 6-7-operand chains, 3 seeds): held-out pass@16 0.207 -> 0.211 ± 0.007 after
    40 steps at 3.9x GRPO's rollouts (GRPO 0.228 ± 0.006): the hints solve 2.7 all-fail groups a step but do not
    transfer to the unhinted prompt in 40 steps.
    """
    c = default.get_config()
    c.rl.advantage = "grpo"
    c.rl.agg_mode = "token-mean"
    c.rl.kl_coef = 0.0
    c.selection.hints = True
    c.selection.hint_fractions = (0.25, 0.5, 0.75)
    return c
