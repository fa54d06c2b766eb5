"""Guide (Nath et al. 2025, "Adaptive Guidance Accelerates Reinforcement Learning of Reasoning Models")."""

from configs import default


def get_config():
    """Guide-GRPO: GRPO, and each group whose G rollouts all fail is regenerated with a hint in its context; the
    hinted rollouts are trained as responses to the prompt *without* the hint, so the policy learns for the context
    it will be tested in. Their sampled tokens keep the behaviour log-probs of the hinted context, so their ratio is
    Guide's π_θ(o_t | x, o_<t) / π_old(o_t | x ⊕ h, o_<t), clipped as PPO (`rl4llm.train.hints.hint_in_completion`).

    Departures (no official code was released): Guide's hints are natural-language guidance written for each
    problem; here, as GHPO's, they are prefixes of the task's reference solution (25%, then 50%, then 75% of its
    characters, stopping at the first level with a correct rollout; the final answer is never given:
    `rl4llm.data.curriculum.hint_chars`), and our tiny models read no prose. A prefix is part of the solution, so
    in the response to the unhinted prompt it comes first, as tokens the policy did not sample: they get LUFFY's
    policy shaping f(π_θ) = π_θ/(π_θ + 0.1) with the behaviour probability taken as 1 (`rl.loss='luffy'`, whose
    sampled tokens get PPO's clip, `on_policy_clip=True`), where Guide, whose hint is never in the response, has
    no such tokens. Like GHPO here: GRPO advantages with the std division over the group the hinted rollouts
    replace, `token-mean`, no KL, G = 16, the main job's lr 1e-4. Logged beside GHPO's hint counts:
    `off_policy_frac` (hint tokens / trained tokens), `off_is_weight_mean/max/min` (π_θ of the hint tokens),
    `off_shaped_weight_mean`, selection/hint_overflow (hinted rows longer than the response budget with their
    hint, left untrained).

    Run:
        python -m experiments.train --config=configs/guide.py --workdir=/tmp/rl4llm/guide
    Result (notebooks/05_guidance.ipynb, study guidance_guide: 6-7-operand chains, its own warm start, 3 seeds): held-out
    pass@16 0.156 -> 0.182 ± 0.029 after 40 steps, GHPO 0.181 ± 0.014, GRPO 0.173 ± 0.023: no difference inside the
    noise; the hint tokens were 12.6 % of the trained tokens.
    """
    c = default.get_config()
    c.rl.advantage = "grpo"
    c.rl.agg_mode = "token-mean"
    c.rl.kl_coef = 0.0
    c.rl.loss = "luffy"
    c.rl.loss_kwargs.on_policy_clip = True
    c.rl.loss_kwargs.shaping_gamma = 0.1
    c.selection.hints = True
    c.selection.hint_fractions = (0.25, 0.5, 0.75)
    c.selection.hint_placement = "completion"
    return c
