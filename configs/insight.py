"""InSight ("Efficient RLVR Training via Weighted Mutual Information Data Selection"): prompts of largest expected
information gain about their success rate."""

from configs import bots


def get_config():
    """GRPO on the default arithmetic task, prompts chosen by InSight from a pool of `selection.pool_size` training
    prompts. Each prompt keeps BOTS's Beta(alpha, beta) posterior on its success rate (configs/bots.py: forgetting
    lambda = 0.1, implicit evidence rho = 0.1); each step takes the num_prompts prompts of largest expected information
    gain from one more outcome, I(Y; theta) = h(mu) - E[h(theta)] at the posterior mean mu (BALD, closed form with
    digammas: `rl4llm.data.selection.information_gain`). The score is large for prompts near 50% success AND with
    little evidence, and deterministic in the posterior (BOTS draws Thompson samples instead).

    Departures: the paper weights the mutual information; its weighting function was not available here, so the
    score is the unweighted one-outcome gain (not the G-outcome Beta-Binomial extension either). The posterior update
    is BOTS's. Logged each step: `selection/information_gain` (mean over the chosen prompts) and
    `selection/predicted_success`.

    Run:
        python -m experiments.train --config=configs/insight.py --workdir=/tmp/rl4llm/insight
    No result at our scale yet (no seeds run).
    """
    c = bots.get_config()
    c.selection.method = "insight"
    return c
