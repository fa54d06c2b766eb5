"""RLOO (Ahmadian et al. 2024, "Back to Basics"): leave-one-out baseline, KL folded into the reward."""

from configs import default


def get_config():
    """RLOO: A_i = R_i − mean_{j≠i} R_j, PPO-clip loss (verl's RLOO is an advantage consumed by `vanilla`),
    token-mean; the k1 KL to the warm-start policy is folded into the token reward (r_t −= β·(log π − log π_ref))
    instead of the loss, β = 0.001 (verl's `kl_ctrl.kl_coef` default).

    Schedule: 4 minibatch updates per rollout batch (verl's RLOO example: train batch 1,024, ppo_mini_batch_size 256), 16
    prompts per step in minibatches of 4 prompts' groups.
    Run:
        python -m experiments.train --config=configs/rloo.py --workdir=/tmp/rl4llm/rloo
    Result: not yet recorded.
    """
    c = default.get_config()
    c.rl.advantage = "rloo"
    c.rl.loss = "ppo_clip"
    c.rl.kl_in_reward = True
    c.rl.kl_kind = "k1"
    c.rl.kl_coef = 0.001
    c.rl.num_minibatches = 4
    return c
