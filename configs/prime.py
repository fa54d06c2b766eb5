"""PRIME (Cui et al. 2025, "Process Reinforcement through Implicit Rewards"): dense rewards from an online
implicit PRM, combined with the outcome reward."""

from configs import default


def get_config():
    """PRIME: an implicit PRM π_φ (a second decoder initialised from the warm-start policy, which is also its
    frozen reference) gives token rewards r_t = β·(log π_φ − log π_ref), β = 0.05; each step it is updated
    online (AdamW) by cross-entropy of σ(Σ_t r_t) against the outcome labels, after scoring the batch.
    Advantages: leave-one-out on each reward source (process rewards and the outcome), weighted 5 and 5 (the
    recipe's reward_dpo_coef / reward_gt_coef), summed, γ = 1 return-to-go, whitened over the batch; PPO-clip
    loss, no KL. K = 4 samples per prompt (the paper's), 64 prompts (256 completions per step, as the default
    job). The paper's online accuracy filter: `selection.method="accuracy_band"` keeps the groups whose accuracy
    lies in [selection.acc_low, acc_high] = [0.2, 0.8], generating up to selection.max_gen_rounds = 3 rounds of
    64 prompts to fill the batch; groups completing it at the round bound are masked out, so the PRM and the
    policy train on in-band groups only.

    Schedule: 4 minibatch updates per rollout batch (verl's ratio; PRIME's own minibatch count is not recorded
    here), 64 prompts x 4 per step in minibatches of 16 prompts' groups.
    Run:
        python -m experiments.train --config=configs/prime.py --workdir=/tmp/rl4llm/prime
    Result: not yet recorded.
    """
    c = default.get_config()
    c.rl.advantage = "prime"
    c.rl.advantage_kwargs.process_coef = 5.0
    c.rl.advantage_kwargs.outcome_coef = 5.0
    c.rl.loss = "ppo_clip"
    c.rl.num_prompts = 64
    c.rl.num_generations = 4
    c.prime.beta = 0.05
    c.selection.method = "accuracy_band"  # acc_low / acc_high default to PRIME's 0.2 / 0.8
    c.rl.num_minibatches = 4
    return c
