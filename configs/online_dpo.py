"""Online DPO (Guo et al. 2024, "Direct Language Model Alignment from Online AI Feedback") on the RL loop's groups:
the default run with DPO on each group's best-vs-worst completion in place of the policy-gradient loss."""

from configs import default


def get_config():
    """Online DPO: every RL step samples G = 16 completions of each of 16 prompts with the current policy, the rule
    verifier's reward picks each group's best and worst completion (`rl4llm.rl.preference.pairs_from_groups`; a group
    whose completions all score the same gives no pair), and the one update of the step minimises the DPO loss
    −log σ(β·[(log π(y_c) − log π_ref(y_c)) − (log π(y_r) − log π_ref(y_r))]) over those pairs (summed completion
    log-probs, β = 0.1 as TRL's `DPOConfig` and OAIF), with the reference = the SFT warm start, fixed (OAIF). The
    advantages are computed but not read; no KL term (DPO's β is the KL constraint). Everything else is the default
    run's (`train.preference_step`; the loss replaces `rl.loss`).

    Variants, one flag each: `--config.preference.kind=ipo | cdpo | robust` (with `preference.label_smoothing`);
    `--config.rl.ref_reset_every=n` makes the reference the policy of n steps before (iterative DPO against the
    previous iterate: DNO, DPO-VP; the optimizer state restarts with it). Any other recipe switches to online DPO
    with `--config.preference.loss=dpo` (config errors name what cannot combine: minibatches, off-policy traces,
    truncated IS, a critic, agent runs).
    Logged every step: `dpo/loss` (also `loss/pg`), `dpo/rewards/chosen`, `dpo/rewards/rejected`,
    `dpo/rewards/margins`, `dpo/rewards/accuracies`, `dpo/logps/chosen`, `dpo/logps/rejected` (TRL's names) and
    `dpo/valid_pair_frac` (the fraction of groups that gave a pair).

    Run:
        python -m experiments.train --config=configs/online_dpo.py --workdir=/tmp/rl4llm/online_dpo
    Result (notebooks/06_online_dpo.ipynb, study online_dpo: the main job's warm start, greedy 0.488, 100 steps, 3
    seeds): greedy 0.727 ± 0.027, pass@1 0.521 ± 0.004, pass@4 0.849 ± 0.007, against GRPO's 0.784 ± 0.011, 0.574 ±
    0.012, 0.878 ± 0.016 on the same rollouts; 93 % of the groups gave a pair, and the loss stayed at log 2 (fresh
    pairs each step: margin 0, implicit-reward accuracy 0.50).
    """
    c = default.get_config()
    c.preference.loss = "dpo"
    c.preference.kind = "sigmoid"
    c.preference.beta = 0.1
    c.rl.kl_coef = 0.0
    c.rl.num_minibatches = 1  # pairs are formed over the whole batch's groups
    return c
