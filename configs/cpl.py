"""CPL (Hejna et al. 2023, "Contrastive Preference Learning: Learning from Human Feedback without RL", arXiv
2310.13639) on the RL loop's groups: the default run with the CPL loss on each group's best-vs-worst completion in
place of the policy-gradient loss."""

from configs import default


def get_config():
    """CPL: every RL step samples G = 16 completions of each of 16 prompts with the current policy, the rule verifier's
    reward picks each group's best and worst completion (`rl4llm.rl.preference.pairs_from_groups`; a group whose
    completions all score the same gives no pair), and the one update of the step minimises the conservative CPL loss
    softplus(λ·S_r − S_c) over those pairs, S = α·Σ_k γ^k log π(y_k|x, y_<k) the segment's score
    (`rl4llm.rl.preference.cpl_loss` on `discounted_sequence_logprobs`). α = 0.1 and λ = 0.5 as the official
    `jhejna/cpl` configs (`configs/*/cpl.yaml`), γ = 1 as its code (undiscounted segment sums). Reference-free: no
    reference policy, no KL term. Everything else is the default run's (`train.preference_step`).

    Departures from the paper: the segments are the policy's own completions, labelled online by the verifier (the
    paper learns offline from a fixed labelled dataset of segment pairs); a token is an action and a completion a
    segment; no BC warm-up (`bc_steps`) or BC term (`bc_coeff`, 0 in the `cpl.yaml` configs): the SFT warm start
    plays that role. Variants: `--config.preference.conservative_bias=1` (plain CPL), `preference.discount`,
    `preference.alpha`.
    Logged every step: `cpl/loss` (also `loss/pg`), `cpl/accuracy` (S_c > S_r), `cpl/margin` (S_c − S_r),
    `cpl/logps/chosen`, `cpl/logps/rejected` (segment log-probs), `cpl/valid_pair_frac`.

    Run:
        python -m experiments.train --config=configs/cpl.py --workdir=/tmp/rl4llm/cpl
    Result (study pair_objectives, notebooks/06_online_dpo.ipynb; 50 steps from the warm start, greedy 0.633, 3
    seeds): held-out greedy 0.724 ± 0.019 vs GRPO's 0.766 ± 0.020 on the same rollouts, pass@1 0.542 ± 0.020 vs
    0.577 ± 0.009; the segment scores rank the step's pairs right 74 % of the time.
    """
    c = default.get_config()
    c.preference.loss = "cpl"
    c.preference.alpha = 0.1
    c.preference.conservative_bias = 0.5
    c.preference.discount = 1.0
    c.rl.kl_coef = 0.0
    c.rl.num_minibatches = 1  # pairs are formed over the whole batch's groups
    return c
