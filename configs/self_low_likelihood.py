"""SELF low-likelihood curation (Nguyen et al. 2025): train only on the prompts the greedy policy gets wrong."""

from configs import default


def get_config():
    """GRPO on the default arithmetic task with SELF's curation (`selection.method="low_likelihood"`), as the
    official code (mail-research/SELF-llm-interference, `RayMaxPPOTrainer`): each step decodes one greedy completion
    of each of num_prompts fresh prompts, keeps the prompts whose greedy completion is wrong (reward != 1) and
    rolls out G = 16 completions of each kept prompt. Where the official code trains on the smaller batch, here the
    probe repeats with fresh prompts, at most 3 rounds, and a batch still short is completed with greedy-solved
    prompts whose rows get no loss. The paper's forward-KL regulariser is not part of this recipe (the official
    SELF script sets no KL loss).
    Run:
        python -m experiments.train --config=configs/self_low_likelihood.py --workdir=/tmp/rl4llm/self
    Logged per step: selection/greedy_solved_frac (of the probed prompts), selection/kept_groups,
    selection/probe_rounds, selection/filled_with_dropped. Not yet measured at length: no result is claimed for this
    recipe.
    """
    c = default.get_config()
    c.selection.method = "low_likelihood"
    c.selection.max_gen_rounds = 3
    return c
