"""Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs")."""

from configs import default


def get_config():
    """Clip-Cov: cut the gradient of a random 2e-4 fraction of the tokens whose centred Cov(log π, A) lies in
    (1, 5); the PPO clip is opened to [0, 2] (clip_low = clip_high = 1, the authors' scripts) so Clip-Cov acts
    as the trust region. GRPO advantages, token-mean, no KL, no entropy bonus.

    Schedule: the authors' verl recipe (recipe/entropy: 256 prompts x 8 responses per step, minibatches of 32 prompts,
    i.e. 256 sequences) takes 8 updates per rollout batch. Here 16 prompts x 16 per step in 4 minibatch updates of
    64 sequences, old log-probs from a behaviour pass: 8 minibatches of 16 sequences (16 prompts x 8) learned nothing
    at lr 1e-4 (measured, GRPO, 2 seeds: held-out greedy 0.445 -> 0.44 / 0.45 after 70-80 steps), so the minibatch
    keeps a size that learns rather than the update count. The covariance selection is over each minibatch's tokens
    (verl: each micro-batch's).

    Run:
        python -m experiments.train --config=configs/clip_cov.py --workdir=/tmp/rl4llm/clip_cov
    Result: not yet recorded.
    """
    c = default.get_config()
    c.rl.advantage = "grpo"
    c.rl.loss = "clip_cov"
    c.rl.loss_kwargs.clip_low = 1.0
    c.rl.loss_kwargs.clip_high = 1.0
    c.rl.loss_kwargs.clip_cov_ratio = 2e-4
    c.rl.loss_kwargs.clip_cov_lb = 1.0
    c.rl.loss_kwargs.clip_cov_ub = 5.0
    c.rl.agg_mode = "token-mean"
    c.rl.kl_coef = 0.0
    c.rl.num_minibatches = 4
    return c
