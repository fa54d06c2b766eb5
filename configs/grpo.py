"""GRPO as in DeepSeekMath (Shao et al. 2024): the default recipe plus the original objective's choices."""

from configs import default


def get_config():
    """GRPO: group-normalised advantages, PPO-clip ε = 0.2, per-sequence token mean, k3 KL in the loss (β = 0.04).

    DeepSeekMath's objective: Â_i = (R_i − mean_g R)/(std_g R + ε); `seq-mean-token-mean` aggregation (1/G Σ_i
    1/|o_i| Σ_t); KL(π‖π_ref) with the k3 estimator in the loss, β = 0.04, reference = the SFT warm start.
    Dual-clip (c = 3 for A < 0) stays on, as in verl's `vanilla` loss.
    Schedule: DeepSeekMath takes a single update per exploration stage, where the ratio is 1 at every token and the
    clip never binds; we follow verl's GRPO example instead (1,024 prompts per step, ppo_mini_batch_size 256 -> 4
    updates per rollout batch): 16 prompts per step in 4 minibatches of 4 prompts' groups, old log-probs from a
    behaviour pass of the params that generated the batch.

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
    c.rl.num_minibatches = 4
    return c
