"""DAPO (Yu et al. 2025): clip-higher, token-level loss, dual-clip, no KL."""

from configs import default


def get_config():
    """DAPO's objective: PPO-clip with ε_low = 0.2, ε_high = 0.28 ("clip-higher"), dual-clip c = 10 for A < 0,
    token-mean aggregation (1/Σ|o_i| Σ_i Σ_t), GRPO advantages, no KL and no entropy bonus (verl DAPO recipe).

    Not on here: DAPO's dynamic sampling (drop all-correct / all-wrong groups and refill:
    --config.selection.method=dynamic_sampling, configs/dynamic_sampling.py) and its soft overlong punishment
    (--config.task.length_shaping=dapo_overlong); the paper's G = 16 and its batch sizes are left at this repository's
    defaults (set e.g. --config.rl.num_generations=16).

    Run:
        python -m experiments.train --config=configs/dapo.py --workdir=/tmp/rl4llm/dapo
    Result: not yet recorded.
    """
    c = default.get_config()
    c.rl.advantage = "grpo"
    c.rl.loss = "ppo_clip"
    c.rl.loss_kwargs.clip_low = 0.2
    c.rl.loss_kwargs.clip_high = 0.28
    c.rl.loss_kwargs.dual_clip = 10.0
    c.rl.agg_mode = "token-mean"
    c.rl.kl_coef = 0.0
    c.rl.entropy_coef = 0.0
    return c
