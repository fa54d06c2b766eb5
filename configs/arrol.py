"""ARRoL online rollout pruning (Hsu et al. 2025, "Prune as You Generate: Online Rollout Pruning for Faster and
Better RLVR"): GRPO whose groups are the balanced half of twice as many rollouts, chosen mid-generation."""

from configs import default


def get_config():
    """The main job with ARRoL's pruning (`config.pruning`, `rl4llm/rl/pruning.py`): each prompt's 32 rollouts are
    decoded to 8 tokens (about a step of the task's ~25-token solutions), a linear quality head on the policy's
    hidden state there predicts each one's success, and the group's 16 kept are the 8 likeliest to succeed and the 8
    least likely (target share rho = 0.5, the digest's default); only those are decoded to the end, scored and trained
    on with GRPO. The head takes one Adam step (lr 1e-3) per RL step on the kept rollouts' verifier outcomes.
    Departures (ARRoL's code is not released): the keep rule and the linear head are the digest's reconstruction;
    the checkpoint's hidden states are recomputed by one forward of the 32 rollouts' prefixes (the paper reads the
    sampler's); no q-weighted voting at test time.
    Run:
        python -m experiments.train --config=configs/arrol.py --workdir=/tmp/rl4llm/arrol
    Logged per step: pruning/sampled_rows, kept_rows, stopped_at_checkpoint, kept_quality / dropped_quality (the
    head's mean prediction on each side), decoded_tokens, and the head's training: pruning/head_loss, head_accuracy,
    head_predicted, head_outcome, head_grad_norm. Measured (`--study=pruning`, 3 seeds, 100 steps from the main job's
    warm start): greedy 0.793 +- 0.014 against GRPO's 0.784 +- 0.011; the head stayed at chance, so the kept halves
    were random, and the step decoded 33 % more tokens than GRPO's (notebooks/08_exit_and_pruning.ipynb).
    """
    c = default.get_config()
    c.pruning.enabled = True
    c.pruning.oversample = 2
    c.pruning.checkpoint_tokens = 8
    c.pruning.target = 0.5
    return c
