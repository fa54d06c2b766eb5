"""KL-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs")."""

from configs import default


def get_config():
    """KL-Cov: unclipped −A·ρ, plus β·|log π − log π_old| on the top k = 2e-3 fraction of tokens by centred
    Cov(log π, A); β = 1 (the authors' 7B recipe; verl's config defaults are 2e-4 / 0.1). GRPO advantages,
    token-mean, no KL to a reference, no entropy bonus.

    Schedule: configs/clip_cov.py's (the authors take 8 updates of 256 sequences per rollout batch; here 4 of 64,
    see there why). The covariance selection is over each minibatch's tokens (verl: each micro-batch's).

    Run:
        python -m experiments.train --config=configs/kl_cov.py --workdir=/tmp/rl4llm/kl_cov
    Result: not yet recorded.
    """
    c = default.get_config()
    c.rl.advantage = "grpo"
    c.rl.loss = "kl_cov"
    c.rl.loss_kwargs.kl_cov_ratio = 2e-3
    c.rl.loss_kwargs.ppo_kl_coef = 1.0
    c.rl.agg_mode = "token-mean"
    c.rl.kl_coef = 0.0
    c.rl.num_minibatches = 4
    return c
