"""REINFORCE++ (Hu 2025, arXiv:2501.03262): no critic, no group baseline; batch-whitened returns."""

from configs import default


def get_config():
    """REINFORCE++: token-level return G_t = Σ_{t'≥t} γ^{t'−t} r_t' (γ = 1) with the k1 KL penalty in the token
    reward (r_t = R·1[t = last] − β·(log π − log π_ref), β = 0.001), whitened over the whole batch; PPO-clip
    loss, token-mean. For the group-baseline variant use --config.rl.advantage=reinforce_plus_plus_baseline.

    Schedule: 4 minibatch updates per rollout batch (verl's REINFORCE++ example: train batch 1,024, ppo_mini_batch_size 256), 16
    prompts per step in minibatches of 4 prompts' groups.
    Run:
        python -m experiments.train --config=configs/reinforce_pp.py --workdir=/tmp/rl4llm/reinforce_pp
    Result: not yet recorded.
    """
    c = default.get_config()
    c.rl.advantage = "reinforce_plus_plus"
    c.rl.loss = "ppo_clip"
    c.rl.kl_in_reward = True
    c.rl.kl_kind = "k1"
    c.rl.kl_coef = 0.001
    c.rl.num_minibatches = 4
    return c
