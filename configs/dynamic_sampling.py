"""Dynamic sampling (DAPO, Yu et al. 2025): drop groups whose rewards are all equal and refill the batch."""

from configs import default


def get_config():
    """GRPO on the default arithmetic task with DAPO's dynamic sampling: each step generates rounds of
    num_prompts fresh prompts x G completions, keeps the groups whose rewards are not all equal (all-correct and
    all-wrong groups have zero group-relative advantage), and refills to num_prompts groups, at most
    `selection.max_gen_rounds` rounds (then the batch is completed with dropped groups). PRIME's accuracy band
    instead: --config.selection.method=accuracy_band (keeps 0.2 <= group accuracy <= 0.8).

    Run:
        python -m experiments.train --config=configs/dynamic_sampling.py --workdir=/tmp/rl4llm/dynamic_sampling
    Result: RESULT_PENDING
    """
    c = default.get_config()
    c.selection.method = "dynamic_sampling"
    c.selection.max_gen_rounds = 3
    return c
