"""Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): GRPO without its two biases."""

from configs import default


def get_config():
    """Dr. GRPO: Â_i = R_i − mean_g R (no std division) and the loss (1/G) Σ_i Σ_t L_it / C with ONE constant C for
    the whole run (no 1/|o_i|, so a wrong answer's gradient does not shrink as it grows longer).

    `rl.agg_mode="seq-mean-token-sum-norm"` with C = `rl.agg_norm_length`, default 0 = the run's response budget
    (`sampling.max_new_tokens`, 32; `agent.max_context` in agent runs), fixed whatever the batch's padded length.
    verl: `norm_adv_by_std_in_grpo=False`, `loss_agg_mode=seq-mean-token-sum-norm` with `loss_scale_factor` = C
    (without it verl divides by the batch's padded length, which moves from step to step); TRL: `loss_type="dr_grpo"`
    divides Σ L by (batch rows x max_completion_length). No KL, PPO-clip ε = 0.2.
    Schedule: 4 minibatch updates per rollout batch (verl's GRPO example ratio; the paper's own minibatch schedule is
    not recorded here), 16 prompts per step in minibatches of 4 prompts' groups.

    Run:
        python -m experiments.train --config=configs/dr_grpo.py --workdir=/tmp/rl4llm/dr_grpo
    Result: not yet recorded.
    """
    c = default.get_config()
    c.rl.advantage = "dr_grpo"
    c.rl.loss = "ppo_clip"
    c.rl.agg_mode = "seq-mean-token-sum-norm"
    c.rl.agg_norm_length = 0  # C = sampling.max_new_tokens
    c.rl.num_minibatches = 4
    c.rl.kl_coef = 0.0
    return c
