"""GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization"): sequence-level importance ratio."""

from configs import default


def get_config():
    """GSPO: s_i = exp(mean_t(log π − log π_old)) per sequence, clipped to [1 − 3e-4, 1 + 4e-4] (verl's example
    ε), GRPO advantages, `seq-mean-token-mean` (forced by the loss), no KL.

    Schedule: the sequence ratio differs from 1 only with several updates per rollout batch; the GSPO paper splits
    each rollout batch into 4 minibatches for its gradient updates, and so does this recipe (16 prompts per step,
    minibatches of 4 prompts' groups), old log-probs from a behaviour pass before learning.

    Run:
        python -m experiments.train --config=configs/gspo.py --workdir=/tmp/rl4llm/gspo
    Result: not yet recorded.
    """
    c = default.get_config()
    c.rl.advantage = "grpo"
    c.rl.loss = "gspo"
    c.rl.agg_mode = "seq-mean-token-mean"
    c.rl.num_minibatches = 4
    c.rl.kl_coef = 0.0
    return c
