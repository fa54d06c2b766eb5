"""P3O (Wu et al. 2023, "Pairwise Proximal Policy Optimization: Harnessing Relative Feedback for LLM Alignment",
arXiv 2310.00212) on the RL loop's groups: the clipped trajectory-wise pairwise policy gradient on each group's
best-vs-worst completion in place of the token-level PPO loss."""

from configs import default


def get_config():
    """P3O: every RL step samples G = 16 completions of each of 16 prompts with the current policy, the rule verifier's
    reward picks each group's best and worst completion (`rl4llm.rl.preference.pairs_from_groups`; all-equal groups
    give no pair), and 4 updates on the batch (`rl.ppo_epochs`, one minibatch: old log-probs from a behaviour pass)
    minimise the joint-clipped P3O loss −min(R·Δ, clip(R, 1 − ε, 1 + ε)·Δ)/2 (P3O-V2, the variant the paper finds
    more stable), R = [π(y_c)/π_old(y_c)] / [π(y_r)/π_old(y_r)] the pair's sequence-ratio quotient, Δ = r(y_c) −
    r(y_r), ε = 0.2 (`rl4llm.rl.preference.p3o_loss`). KL(π‖π_ref) by the k3 estimator in the loss, β = 0.04.

    Departures from the paper: the pair is the best and the worst of the sampler's G completions (the paper samples
    two per prompt; `--config.rl.num_generations=2` gives exactly that); the KL is a loss term (`rl.kl_coef`)
    where the paper subtracts β·KL from the reward; the reward is the rule verifier's, not a learned reward model;
    4 epochs per batch (the paper's PPO-style epoch count is not recorded here). Variant:
    `--config.preference.clip_mode=separate` (P3O-V1, each response's ratio clipped with advantage ±Δ/2).
    Logged every step: `p3o/loss` (also `loss/pg`), `p3o/clip_frac` (pairs whose clip binds: 0 on the first epoch,
    where R = 1), `p3o/ratio_mean`, `p3o/ratio_max`, `p3o/ratio_min`, `p3o/reward_margin` (mean Δ),
    `p3o/valid_pair_frac`.

    Run:
        python -m experiments.train --config=configs/p3o.py --workdir=/tmp/rl4llm/p3o
    Result (study pair_objectives, notebooks/06_online_dpo.ipynb; 50 steps from the warm start, greedy 0.633, 3
    seeds): it did not learn, held-out greedy 0.613 ± 0.044 vs GRPO's 0.766 ± 0.020, pass@1 0.486 ± 0.035 (0.470 at
    the start). The first epoch moves half the pairs' sequence-ratio quotient R out of [0.8, 1.2] (`p3o/clip_frac`
    0.49), and Adam's momentum carries it on (mean R 10.9 over the epochs). With one epoch per batch
    (`--config.rl.ppo_epochs=1`, arm p3o_one_epoch) it learns: greedy 0.721 ± 0.006, pass@1 0.534 ± 0.007.
    """
    c = default.get_config()
    c.preference.loss = "p3o"
    c.preference.clip_ratio = 0.2
    c.preference.clip_mode = "joint"
    c.rl.kl_coef = 0.04
    c.rl.kl_kind = "k3"
    c.rl.num_minibatches = 1  # pairs are formed over the whole batch's groups
    c.rl.ppo_epochs = 4
    return c
