"""SPO (Swamy et al. 2024, "A Minimaximalist Approach to Reinforcement Learning from Human Feedback", arXiv
2401.04056): self-play preference optimisation, each completion rewarded by its win rate against the other samples
of its prompt, optimised with PPO."""

from configs import default


def get_config():
    """SPO: every RL step samples G = 16 completions of each of 16 prompts from the current policy (self-play: the
    opponents are the policy's own samples), each completion's reward is the fraction of the other 15 it beats under
    the preference given by the rule verifier (P(i ≻ j) = 1 if its reward is higher, ½ on a tie), and that win-rate
    reward minus ½ (the group's mean win rate, a baseline) is the advantage (`--config.rl.advantage=spo`,
    `rl4llm.rl.preference.spo_advantages`) of a PPO-clip loss (ε = 0.2, token-mean aggregation, 4 minibatch updates
    per rollout batch as `configs/grpo.py`, old log-probs from a behaviour pass). No KL term (the paper's SPO has none: the minimax winner needs no reference).

    Departures from the paper: the preference is the verifier's reward comparison (the paper queries a preference
    oracle, possibly intransitive, on trajectory pairs); its optimiser is PPO with a learned value function (or SAC)
    on continuous control, here the critic-free PPO of the default run, with the ½ baseline; the win rates are over
    the same prompt's G samples (the paper samples a batch of trajectories per iteration). Any estimator-agnostic
    recipe switches to SPO's reward with `--config.rl.advantage=spo`.
    Logged every step: `useful_frac` (rows whose win rate is not ½, i.e. carrying a signal), and the default run's
    PPO metrics (`clip_frac`, ...).

    Run:
        python -m experiments.train --config=configs/spo.py --workdir=/tmp/rl4llm/spo
    Result (study pair_objectives, notebooks/06_online_dpo.ipynb; 50 steps from the warm start, greedy 0.633, 3
    seeds): held-out pass@1 0.583 ± 0.016 vs GRPO's 0.577 ± 0.009 on the same rollouts, greedy 0.723 ± 0.021 vs
    0.766 ± 0.020.
    """
    c = default.get_config()
    c.rl.advantage = "spo"
    c.rl.loss = "ppo_clip"
    c.rl.kl_coef = 0.0
    c.rl.num_minibatches = 4
    return c
