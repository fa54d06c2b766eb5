"""DeepSearch (Wu et al. 2025, "DeepSearch: Overcome the Bottleneck of Reinforcement Learning with Verifiable Rewards
via Monte Carlo Tree Search", arXiv 2509.25454): MCTS in training with a fixed budget, and Tree-GRPO."""

from configs import default


def get_config():
    """DeepSearch: each prompt's group is the nodes of one search tree over reasoning steps (`rl4llm.sampling.mcts`,
    config.deepsearch), grown within a fixed budget of E = 4 expansions; each expansion forks the KV cache of the
    frontier node with the highest priority over the whole tree,

        F(s) = λ1·tanh(Q_parent(s)) + λ2·H(π(s | o_s)) + λ3·sqrt(d(s) / d_T)     (λ1, λ2, λ3) = (0.4, 0, 0.01)

    into n = 4 one-step children (a step = 8 tokens, so d_T = 4 with the default 32-token budget): E·n = 16 nodes
    per prompt (rl.num_generations = 16), at most 16·8 = 128 generated tokens per prompt (GRPO's 16 x 32 = 512).
    Terminals are verified (q = ±1); the correct ones, or the most confident negative (lowest mean path entropy)
    when none is, are backed up along their path, q(s_i) += γ(i, l)·q(s_end) with γ = max(i/l, 0.1) and the paper's
    sign constraints. Tree-GRPO (`rl.advantage="deepsearch"`, `rl4llm.rl.tree.deepsearch`): each node's step gets
    tanh(q)·1 − mean terminal q of its tree (ε_q = q_max = 1), mean-only normalisation; the paper's loss: PPO
    clip-higher (0.2 / 0.28), a per-node token mean (`seq-mean-token-mean`), no KL.

    Departures (the module docstring of `rl4llm.sampling.mcts` lists them all): fixed-length steps, no local UCT
    among siblings (all stay in the frontier), the root re-expanded when the frontier is empty, no pass@K filtering
    of the training set (the replay buffer of cached solutions is off here: config.deepsearch.replay_path); a terminal is correct iff the task's main
    reward is above 1/2; a node's inherited path tokens get advantage 0 but count in its token mean's denominator. The budgets are this codebase's scale, not the paper's (its trees
    reach ~20 steps per trajectory on DeepMath-103K with a 1.5B model). Logged every step: `deepsearch/expansions`,
    `deepsearch/generated_tokens`, `deepsearch/solved_by_search` (prompts with a correct terminal in their tree),
    `deepsearch/correct_backups`, `deepsearch/negative_backups`, `deepsearch/visited_nodes` (nodes on a backed-up
    path, per prompt), `deepsearch/frontier_size`, `deepsearch/root_reexpansions`, `deepsearch/max_depth`,
    `deepsearch/terminal_frac`, `deepsearch/shared_token_frac` (inherited path tokens / all row tokens).

    Run:
        python -m experiments.train --config=configs/deepsearch.py --workdir=/tmp/rl4llm/deepsearch
    Result (study guidance_guide, notebooks/results/guidance_guide.jsonl: 6-7-operand chains from the 4-operand warm
    start, steps of 16 tokens, 40 steps, 3 seeds): held-out pass@16 0.156 -> 0.189 ± 0.015 (GRPO 0.173 ± 0.023),
    pass@1 0.035 ± 0.005 (GRPO 0.025 ± 0.002, Welch p = 0.06), decoding 36% of GRPO's tokens (1,762 vs 4,958 a
    step); the search solves 10% of the prompts a step and backs up a most confident negative in 47 of its 64
    expansions. Level with GRPO at pass@16 inside the noise: no lift where GRPO stalls.
    """
    c = default.get_config()
    c.deepsearch.enabled = True
    c.deepsearch.candidates, c.deepsearch.expansions, c.deepsearch.step_tokens = 4, 4, 8
    c.rl.num_generations = 16
    c.rl.advantage = "deepsearch"
    c.rl.advantage_kwargs.eps_q = 1.0
    c.rl.advantage_kwargs.q_max = 1.0
    c.rl.loss = "ppo_clip"
    c.rl.loss_kwargs.clip_low = 0.2
    c.rl.loss_kwargs.clip_high = 0.28
    c.rl.agg_mode = "seq-mean-token-mean"
    c.rl.kl_coef = 0.0
    return c
