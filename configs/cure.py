"""CURE (arXiv 2508.11016, "CURE: Critical-token-gUided Re-concatenation for Entropy-collapse prevention";
bytedance/CURE): stage 1, critical-token re-concatenation."""

from configs import dapo


def get_config():
    """CURE stage 1 (bytedance/CURE `recipe/CURE_First_Stage`): per prompt, sample n1 = 4 responses; in each, pick a
    critical token t* uniformly among its top-K = 20 highest-entropy positions (position 0 and special tokens
    excluded); re-generate n2 = 3 continuations from prompt ⊕ response[:t*] (the token at t* re-drawn); the
    n1 + n1·n2 = 16 responses are one group, normalised jointly (GRPO) and trained with DAPO, the continuations on
    their own tokens only.

    Here: the tree sampler (`rl4llm.sampling.tree`, config.tree) with TreeShape(n1 = 4, N = 1, n2 = 3, L = 1,
    criterion="critical", critical_top_k=20) forks each response's KV cache at t* (the same computation as
    re-prefilling the re-concatenated prompt: tests/test_tree_methods.py); `rl.advantage="cure"`
    (`rl4llm.rl.tree.cure`) gives the group's GRPO advantage on each row's own tokens and 0 on the re-concatenated
    prefix. The DAPO loss is configs/dapo.py's: clip 0.2 / 0.28, dual-clip 10, token-mean, no KL / entropy terms,
    soft overlong punishment, 4 minibatch updates per batch. Logged every step: `tree/branches` (n1·n2 per
    prompt), `tree/shared_token_frac` (the re-concatenated prefix tokens / all completion tokens),
    `tree/branch_depth` (mean t*), `tree/distinct_branches`, `tree/fork_entropy` (mean entropy at the critical
    tokens) against `tree/token_entropy` (mean over all tokens).

    Departures: no dynamic sampling (a tree group is sampled in one call; DAPO's group filter is off, so all-equal
    groups train on nothing). The candidate filter "decodes to more than one visible character" is replaced by "not
    a stop token" (the sampler has no tokenizer). A continuation's reward scores the whole path prefix ⊕
    continuation (the official reward decodes the continuation only), and its prefix tokens, advantage 0, still
    count in the token-mean's denominator (the official rows hold them in the prompt). Stage 2 (vanilla DAPO from
    the stage-1 policy, for exploitation) is configs/dapo.py, but the job has no field to start RL from another
    run's RL checkpoint, so the two stages are not chained here.

    Run:
        python -m experiments.train --config=configs/cure.py --workdir=/tmp/rl4llm/cure
    Result: not yet recorded.
    """
    c = dapo.get_config()
    c.selection.method = "uniform"
    c.tree.enabled = True
    c.tree.initial_paths, c.tree.branch_points, c.tree.branches, c.tree.iterations = 4, 1, 3, 1
    c.tree.criterion = "critical"
    c.tree.critical_top_k = 20
    c.rl.num_generations = 16
    c.rl.advantage = "cure"
    return c
