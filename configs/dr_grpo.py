"""Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): GRPO without its two biases."""

from configs import default


def get_config():
    """Dr. GRPO: Â_i = R_i − mean_g R (no std division) and Σ_i Σ_t L_it / T with a constant T (no 1/|o_i|).

    verl: `norm_adv_by_std_in_grpo=False`, `loss_agg_mode=seq-mean-token-sum-norm` (T = the padded completion
    length, config.sampling.max_new_tokens). No KL, PPO-clip ε = 0.2.

    Run:
        python -m experiments.train --config=configs/dr_grpo.py --workdir=/tmp/rl4llm/dr_grpo
    Result: not yet recorded.
    """
    c = default.get_config()
    c.rl.advantage = "dr_grpo"
    c.rl.loss = "ppo_clip"
    c.rl.agg_mode = "seq-mean-token-sum-norm"
    c.rl.kl_coef = 0.0
    return c
