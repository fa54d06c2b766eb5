"""BOTS (Bayesian online task selection, Trinity-RFT): Beta posterior per prompt, Thompson sampling toward 0.5."""

from configs import default


def get_config():
    """GRPO on the default arithmetic task, prompts chosen by BOTS from a pool of `selection.pool_size` training
    prompts: each prompt has a Beta(alpha, beta) posterior on its success rate, updated after every step with
    forgetting lambda = 0.1 toward the Beta(1, 1) prior and implicit evidence rho = 0.1 (the EMA capability: no
    reference models here); the step takes the num_prompts prompts whose Thompson samples p ~ Beta lie closest to
    0.5 (bots.yaml defaults).

    Run:
        python -m experiments.train --config=configs/bots.py --workdir=/tmp/rl4llm/bots
    Result: RESULT_PENDING
    """
    c = default.get_config()
    c.selection.method = "bots"
    c.selection.pool_size = 1024
    c.selection.bots_decay = 0.1
    c.selection.bots_implicit_weight = 0.1
    return c
