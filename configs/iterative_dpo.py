"""Iterative DPO against the previous iterate on verifiable rewards: DPO-VP (Tu et al. 2025, "Enhancing LLM
Reasoning with Iterative DPO: A Comprehensive Empirical Investigation"; TU2021/DPO-VP) and the practical DNO loop
(Rosset et al. 2024, "Direct Nash Optimization", DNO-Prct) with the rule verifier as the preference oracle."""

from configs import online_dpo

# RL steps per round: the reference (and the optimizer state) become the current policy after each round.
ROUND_STEPS = 10


def get_config():
    """Iterative DPO: rounds of online DPO whose reference is the policy at the start of the round.

    Each RL step samples G = 16 completions of each of 16 prompts from the current policy and scores them with the
    0/1 verifier; each group's best and worst completion form a pair, and groups whose completions all score the
    same (all right or all wrong) give none (DPO-VP's coarse filter; DNO-Prct keeps only pairs with a large
    preference margin, which for 0/1 rewards is every pair of a right and a wrong completion). The DPO loss
    −log σ(β·[(log π(y_w) − log π_t(y_w)) − (log π(y_l) − log π_t(y_l))]) uses β = 0.1 (DPO-VP's `--beta 0.1`)
    with π_t the policy at the start of the round: after every `rl.ref_reset_every` = 10 RL steps the reference
    becomes the current policy and the optimizer state restarts (DPO-VP trains a fresh DeepSpeed run per round
    from the previous round's model, which is also its reference; `ref_reset` = 1 in the metrics at a round's
    end). Departures: DPO-VP collects a round's pairs first and then trains one epoch on them (lr 5e-7, batch 64,
    a 7B model); here each step's pairs train at once, on-policy within the round, at the default job's lr.
    One pair per prompt (best vs worst); DPO-VP's pair making script (divide_dataset.py) was not available.

    Run:
        python -m experiments.train --config=configs/iterative_dpo.py --workdir=/tmp/rl4llm/iterative_dpo
    """
    c = online_dpo.get_config()
    c.rl.ref_reset_every = ROUND_STEPS
    return c
