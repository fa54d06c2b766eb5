"""ETTRL (Liu et al. 2025, "ETTRL: Balancing Exploration and Exploitation in LLM Test-Time Reinforcement Learning
Via Entropy Mechanism", arXiv 2508.11356): entropy-fork tree rollouts and entropy-based advantage reshaping for
test-time RL."""

from configs import default


def get_config():
    """ETTRL = TTRL (label-free RL: each group's majority answer is the pseudo-label, r_i = 1[answer_i = majority],
    `task.pseudo_labels="majority_vote"`) with its two mechanisms:

    - ETMR, entropy-fork tree majority rollout (`rl4llm.sampling.tree`, config.tree, criterion="entropy"): M trees
      per prompt, each forked at its N = 3 highest-entropy tokens into B = 2 branches, R = M(1 + B·N) leaves that
      share prefixes (the paper's typical N = 3, B = 2); the majority vote runs over the tree's leaves. M = 4 gives
      28 leaves per prompt, 8 prompts per step (224 rows, the main job's 256 at most).
    - EAR, entropy-based advantage reshaping, Adv-Res (`rl4llm.rl.tree.ettrl`): A'_i = (1 + (H̄_g − H_i)/H̄_g)·A_i
      with A the GRPO advantage and H_i the response's mean token entropy under the rollout policy (CANON's
      `seq_metric`, from one forward pass of the rollout policy per step).

    Departures: TTRL trains on the unlabelled test questions; here the task's training prompts are used with their
    labels replaced by the pseudo-labels (evaluation still reads the true answers). M = 4 is a choice (the paper's
    M for its 60 % token budget is not in our digest), as are the default job's loss, lr and temperature
    (PPO clip 0.2, token-mean, lr 1e-4, temperature 1). The paper's other EAR variant, Adv-Clip, is not built.
    Logged every step: `pseudo_label/agreement` (samples agreeing with their group's majority),
    `pseudo_label/labelled_frac`, `tree/branches`, `tree/shared_token_frac`, `tree/fork_entropy` (mean entropy at
    the fork points) against `tree/token_entropy` (mean over all tokens).

    Run:
        python -m experiments.train --config=configs/ettrl.py --workdir=/tmp/rl4llm/ettrl
    Result: not yet recorded.
    """
    c = default.get_config()
    c.task.pseudo_labels = "majority_vote"
    c.tree.enabled = True
    c.tree.initial_paths, c.tree.branch_points, c.tree.branches, c.tree.iterations = 4, 3, 2, 1
    c.tree.criterion = "entropy"
    c.rl.num_generations = 28
    c.rl.num_prompts = 8
    c.rl.advantage = "ettrl"
    return c
