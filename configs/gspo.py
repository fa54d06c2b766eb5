"""GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization"): sequence-level importance ratio."""

from configs import default


def get_config():
    """GSPO: s_i = exp(mean_t(log π − log π_old)) per sequence, clipped to [1 − 3e-4, 1 + 4e-4] (verl's example
    ε), GRPO advantages, `seq-mean-token-mean` (forced by the loss), no KL.

    The ratio differs from 1 only with several updates per rollout step: this recipe takes 2 minibatches
    per step (as GSPO's off-policy minibatch updates), so old log-probs are recomputed before learning.

    Run:
        python -m experiments.train --config=configs/gspo.py --workdir=/tmp/rl4llm/gspo
    Result: not yet recorded.
    """
    c = default.get_config()
    c.rl.advantage = "grpo"
    c.rl.loss = "gspo"
    c.rl.agg_mode = "seq-mean-token-mean"
    c.rl.num_minibatches = 2
    c.rl.kl_coef = 0.0
    return c
