"""Forking tokens, "Beyond the 80/20 Rule" (Wang et al. 2025): DAPO with gradient only on high-entropy tokens."""

from configs import dapo


def get_config():
    """DAPO (configs/dapo.py) where only the top ρ = 20% highest-entropy tokens of the batch get policy gradient:
    mask 1[H ≥ quantile_{0.8}(H over the batch's valid tokens)], entropies of the rollout policy; the token-mean
    normaliser still counts every token, as in the paper (TRL `top_entropy_quantile=0.2`). Everything else, the
    schedule (4 minibatch updates per rollout batch, configs/dapo.py), dynamic sampling and the overlong shaping
    included, is configs/dapo.py's, as the paper builds on DAPO.

    Run:
        python -m experiments.train --config=configs/entropy_80_20.py --workdir=/tmp/rl4llm/entropy_80_20
    Result: not yet recorded.
    """
    c = dapo.get_config()
    c.rl.token_selection = "high_entropy"
    c.rl.token_selection_rho = 0.2
    return c
