"""Tree-OPO (Huang, Nguyen & Zimmer 2025, "Tree-OPO: Off-policy Monte Carlo Tree-Guided Advantage Optimization for
Multistep Reasoning", arXiv 2509.09284): staged advantages over prefix trees."""

from configs import default


def get_config():
    """Tree-OPO's staged advantage estimation (SAE) over tree groups: each row completes a prefix p_i of the tree
    (a stage), and its advantage is its reward against the prefix's own baseline,

        a_i = r_i − α·V(p_i),  V(p) = mean reward of the leaves below p,   A_i = a_i − mean_g a

    on the tokens the row drew after the prefix (`rl4llm.rl.tree.tree_opo`, "expectation" baseline, α = 1; the
    paper's heuristic baselines "optimistic" / "pessimistic" are `rl.advantage_kwargs.baseline`).

    The prefix tree is the EPTree sampler's (`rl4llm.sampling.tree`, config.tree): M = 4 paths per prompt, each
    forked once at its most uncertain token (largest −log p) into 3 branches, 4·(1 + 3) = 16 rows = the default
    group; a branch completes the prefix [prompt | path[:fork]] and its inherited tokens get no advantage.

    Departures: the paper's prefixes are a stronger teacher's offline MCTS states (an off-policy curriculum,
    completed once each by the student); this codebase has no MCTS teacher, so the prefixes are the policy's own
    (on-policy, sampled in the same step) and V(p) is estimated from the leaves of the same tree. The exact SAE
    (a quadratic program projecting the rewards onto the tree-order constraints) is not built, only the heuristic
    baselines. The loss, optimiser and schedule are the default job's (PPO clip 0.2, token-mean, no KL, lr 1e-4),
    not the paper's GSM8K settings. Logged every step: `tree/branches`, `tree/branch_depth` (mean prefix length
    of the staged rows), `tree/shared_token_frac`, `tree/distinct_branches`.

    Run:
        python -m experiments.train --config=configs/tree_opo.py --workdir=/tmp/rl4llm/tree_opo
    Result: not yet recorded.
    """
    c = default.get_config()
    c.tree.enabled = True
    c.tree.initial_paths, c.tree.branch_points, c.tree.branches, c.tree.iterations = 4, 1, 3, 1
    c.rl.num_generations = 16
    c.rl.advantage = "tree_opo"
    c.rl.advantage_kwargs.baseline = "expectation"
    c.rl.advantage_kwargs.alpha = 1.0
    return c
