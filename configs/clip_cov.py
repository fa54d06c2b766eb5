"""Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs")."""

from configs import default


def get_config():
    """Clip-Cov: cut the gradient of a random 2e-4 fraction of the tokens whose centred Cov(log π, A) lies in
    (1, 5); the PPO clip is opened to [0, 2] (clip_low = clip_high = 1, the authors' scripts) so Clip-Cov acts
    as the trust region. GRPO advantages, token-mean, no KL, no entropy bonus.

    Schedule: the authors' verl recipe (recipe/entropy: 256 prompts x 8 responses per step, minibatches of 32 prompts)
    takes 8 updates per rollout batch; so does this recipe (16 prompts x 8 responses per step, the authors' n = 8,
    in minibatches of 2 prompts' groups), old log-probs from a behaviour pass. The covariance selection is over each minibatch's tokens (verl: each micro-batch's).
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
    c.rl.num_generations = 8
    c.rl.num_minibatches = 8
    return c
