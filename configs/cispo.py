"""CISPO (MiniMax-M1, 2025): clipped importance-sampling weights on a REINFORCE loss."""

from configs import default


def get_config():
    """CISPO: L = −sg(clip(ρ, 1 − ε_low, 1 + ε_high))·A·log π, with ε_low = 1 (no lower bound) and ε_high = 0.2,
    so every token keeps its gradient; GRPO advantages, token-mean, no KL.
    Schedule: CISPO matters only off-policy (at ratio 1 its gradient is REINFORCE's): MiniMax-M1 trains on each
    rollout batch with several off-policy minibatch updates; this recipe takes 4 per batch (16 prompts per step,
    minibatches of 4 prompts' groups; the paper's exact count is not recorded here).

    Run:
        python -m experiments.train --config=configs/cispo.py --workdir=/tmp/rl4llm/cispo
    Result: not yet recorded.
    """
    c = default.get_config()
    c.rl.advantage = "grpo"
    c.rl.loss = "cispo"
    c.rl.loss_kwargs.clip_low = 1.0
    c.rl.loss_kwargs.clip_high = 0.2
    c.rl.agg_mode = "token-mean"
    c.rl.kl_coef = 0.0
    c.rl.num_minibatches = 4
    return c
