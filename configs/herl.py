"""HeRL (Zhang et al. 2026, "Experience is the Best Teacher: Motivating Effective Exploration in Reinforcement Learning
for LLMs")."""

from configs import default


def get_config():
    """HeRL: each group whose G rollouts all fail gets hindsight guidance, its best failed rollout y_f followed by the
    rubric items y_f did not meet; responses sampled after the prompt x ⊕ guidance g in the same step are trained as
    responses to x, importance-weighted against the guided behaviour, and y_f gets a bonus for how much the guidance
    improved it (`rl4llm.train.hints.hindsight_groups`, `rl4llm.rl.off_policy.herl`):

    ```
    rubric of x (arithmetic chains, `rewards.arithmetic.rubric_items` / `rubric_scores`): item k < m = the problem's
        k-th operation ("-19"), met iff y's step k is sound (`step_labels`); item m = "#", met iff y's answer is right
    y_f = the group's best rollout by reward, then by items met (the first of equals)
    g   = y_f + "=" + ";".join(unmet items) + "="            ("37+48-19=" ⊕ "37+48=85;85-19=60;#60=-19;#=")
    y_1..y_M ~ π_b(· | x ⊕ g) (the sampler, M = 4); y* = the best; it replaces the group's worst rollout if
        r(y*) >= the group's best
    r(y_f) <- r(y_f) + λ·(r(y*) − r(y_f)),  λ = 0.05                      (the improvement bonus)
    loss on y*'s tokens (trained after x):  w_t = π_θ(y_t | x, y_<t) / π_b(y_t | x ⊕ g, y_<t)   (|log w| <= 20)
                                            L_t = −A·w_t/(w_t + γ),  γ = 1          (never clipped: shaped)
    loss on the sampled rows: PPO's clip (0.2, dual clip 3); GRPO advantages over the group with y*; token-mean
    ```
    π_b(y_t | x ⊕ g, ·) is the sampler's log-prob (`LearnerBatch.sampler_logp`, the loss input `sampler_logp`).
    Without an all-fail group nothing is added and the run is GRPO's (with the dual-clip PPO loss) exactly; an empty
    guidance would give w = 1 (up to the sampler's numerics).

    The official code (sikelifei/HeRL, `ray_trainer._augment_with_rewrite_he`, `core_algos.
    compute_policy_loss_mixpolicy_vanilla`, examples/qwen3/Qwen3_herl.sh), which this follows: groups with no
    rollout of full score (threshold 1.0), the rubric-status rewrite prompt of the best-scoring failed rollouts, the
    best rewrite replacing one row of its group (replace_top_n = 1) when it scores at least the group's best, the
    bonus r + α(r_rewrite − r) on the rewritten rollout (α = 0.05), the guided rows' loss LUFFY's shaping w/(w + γ) of
    the ratio to their guided log-probs (he_shaping_gamma = 1), the sampled rows' PPO with dual clip, GRPO, no KL.
    Departures: the guidance is in the task's alphabet (the failed attempt and its unmet items, not the official
    English prompt: our tiny models read no prose and their tokenizer has only the task's characters); one failed
    rollout per group is rewritten M = 4 times (the official code rewrites each best-scoring rollout once: with a
    0/1 reward every one); the guided row is trained after the original prompt (the paper; its script trains it
    after the rewrite prompt, `train_use_rewrite_prompt=True`, here `selection.hint_placement='prompt'`); the
    guided response replaces the group's worst rollout (official: a random one; no fallback copy when no rewrite
    reaches the group's best); guided responses are sampled at the run's temperature (official 0.3); G = 16 and the
    main job's lr. Logged every step: selection/hint_candidates, hint_rollouts, hint_solved,
    hindsight_replaced, hindsight_guided_reward, hindsight_bonus, hindsight_unmet_items; `off_policy_frac` (guided
    tokens / trained tokens), `off_is_weight_mean/max/min` (w), `off_shaped_weight_mean`, `off_is_clamp_frac`.

    Run:
        python -m experiments.train --config=configs/herl.py --workdir=/tmp/rl4llm/herl
    Measured (`python -m experiments.reproduce --study=guidance_guide --arms=herl --workers=1 --samples=32`:
    6-7-operand chains from the 4-operand warm start, 3 seeds, 40 steps; notebooks/05_guidance.ipynb): pass@16
    0.177 ± 0.012, level with GRPO's 0.173 ± 0.023; guided responses were right 0.5 % of the time (unguided 4.0 %):
    the tiny policy does not read the guidance.
    """
    c = default.get_config()
    c.rl.advantage = "grpo"
    c.rl.agg_mode = "token-mean"
    c.rl.kl_coef = 0.0
    c.rl.loss = "herl"
    c.rl.loss_kwargs.shaping_gamma = 1.0
    c.selection.hints = True
    c.selection.hint_schedule = "hindsight"
    c.selection.hint_placement = "completion"
    c.selection.hindsight_samples = 4
    c.selection.hindsight_bonus = 0.05
    return c
