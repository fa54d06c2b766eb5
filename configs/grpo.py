"""GRPO as in DeepSeekMath (Shao et al. 2024): the default recipe plus the original objective's choices."""

from configs import default


def get_config():
    """GRPO: group-normalised advantages, PPO-clip ε = 0.2, per-sequence token mean, k3 KL in the loss (β = 0.04).

    DeepSeekMath's objective: Â_i = (R_i − mean_g R)/(std_g R + ε); `seq-mean-token-mean` aggregation (1/G Σ_i
    1/|o_i| Σ_t); KL(π‖π_ref) with the k3 estimator in the loss, β = 0.04, reference = the SFT warm start.
    Dual-clip (c = 3 for A < 0) stays on, as in verl's `vanilla` loss.

    Run:
        python -m experiments.train --config=configs/grpo.py --workdir=/tmp/rl4llm/grpo
    Result: not yet recorded.
    """
    c = default.get_config()
    c.rl.advantage = "grpo"
    c.rl.loss = "ppo_clip"
    c.rl.agg_mode = "seq-mean-token-mean"
    c.rl.kl_coef = 0.04
    c.rl.kl_kind = "k3"
    return c
