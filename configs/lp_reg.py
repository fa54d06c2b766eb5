"""Lp-Reg (Huang et al. 2025, "Low-probability Tokens Sustain Exploration in RLVR")."""

from configs import default


def get_config():
    """Lp-Reg: on the lowest-probability 1% of negative-advantage tokens that survive a min-p (0.02) filter of
    the rollout policy, replace the PPO loss by −A·ρ + β·k3(π, π_proxy), β = 1, where π_proxy is the min-p
    filtered, renormalised rollout distribution; the PPO clip is nearly open (1 − 1, 1 + 9), as the authors'
    scripts. GRPO advantages, token-mean, no KL to a reference, no entropy bonus.
    Schedule: on-policy, one update per rollout batch, as the paper trains ("stable on-policy training"): its
    mechanism does not need the ratio (the selection compares log π with the proxy's, both of the rollout policy).

    Run:
        python -m experiments.train --config=configs/lp_reg.py --workdir=/tmp/rl4llm/lp_reg
    Result: not yet recorded.
    """
    c = default.get_config()
    c.rl.advantage = "grpo"
    c.rl.loss = "lp_reg"
    c.rl.loss_kwargs.rho_neg = 0.01
    c.rl.loss_kwargs.beta = 1.0
    c.rl.loss_kwargs.clip_low = 1.0
    c.rl.loss_kwargs.clip_high = 9.0
    c.rl.proxy_min_p = 0.02
    c.rl.agg_mode = "token-mean"
    c.rl.kl_coef = 0.0
    return c
