"""TreeRL (Hou et al. 2025, "TreeRL: LLM Reinforcement Learning with On-Policy Tree Search"): EPTree rollouts and
tree (segment) advantages."""

from configs import default


def get_config():
    """TreeRL: each prompt's group is an entropy-guided tree (`rl4llm.sampling.tree`, config.tree): M paths from the
    prompt, then L rounds in which each tree's N most uncertain tokens (largest −log p) are forked into T branches
    decoded from the forked KV cache; each token's advantage is its segment's (GA + LA)/sqrt(|L|) with V = mean
    reward of the leaves below it (`rl4llm.rl.tree.treerl`).

    Official code (THUDM/TreeRL, OpenRLHF; the paper's setting), which this follows: EPTree (M, N, L, T) =
    (6, 2, 1, 2), so 6·(1 + 1·2·2) = 30 leaves per prompt (rl.num_generations = 30; the paper trains on 16 of
    them, here all 30), `ReinforcePolicyLoss` = PPO clip 0.2 with a per-sequence token mean
    (`seq-mean-token-mean`), one update per rollout batch, no KL (init_kl_coef 0), temperature 1. 8 prompts x 30
    leaves = 240 rows per step (the main job's 256). The paper's lr 1.5e-6 is for 7B-14B models; the main job's
    1e-4 is kept. Logged every step: `tree/branches`, `tree/distinct_branches`, `tree/branch_depth`,
    `tree/shared_token_frac`, `tree/rows_per_prompt`.

    Run:
        python -m experiments.train --config=configs/treerl.py --workdir=/tmp/rl4llm/treerl
    Result (notebooks/05_guidance.ipynb, 6-7-operand chains, 3 seeds): held-out pass@16 0.207 -> 0.212 ± 0.025 after
    40 steps at 94% of GRPO's rollouts (GRPO 0.228 ± 0.006): level with GRPO; no lift where GRPO stalls.
    """
    c = default.get_config()
    c.tree.enabled = True
    c.tree.initial_paths, c.tree.branch_points, c.tree.iterations, c.tree.branches = 6, 2, 1, 2
    c.rl.num_generations = 30
    c.rl.num_prompts = 8
    c.rl.advantage = "treerl"
    c.rl.agg_mode = "seq-mean-token-mean"
    c.rl.kl_coef = 0.0
    return c
