"""DMPO (Shi et al. 2024, "Direct Multi-Turn Preference Optimization for Language Agents", arXiv 2406.14868) on the
guess-the-number agent (configs/agent_guess_number.py): turn-weighted DPO on each task's best-vs-worst episode."""

from configs import agent_guess_number


def get_config():
    """Every RL step plays G = 8 episodes of each of 8 tasks with the current policy; each task's episodes are
    ordered by their return R = outcome + Σ_k turn rewards (`train.episodes.episode_returns`: here "correct" plus
    the info_gain of each guess), and the best and worst form a pair (`rl4llm.rl.preference.pairs_from_groups`; a
    task whose episodes all return the same gives no pair). The step's one update minimises DMPO's loss
    −log σ(β·[Σ_t φ_c,t·log(π/π_ref)(a_c,t) − Σ_t φ_r,t·log(π/π_ref)(a_r,t)]) over those pairs, where a token of
    turn j of a T-turn episode weighs φ(j, T) = γ^j(1 − γ^{T−j})/(1 − γ^T) (`rl.preference.dmpo_loss`; γ =
    `preference.turn_discount` = 0.7 and β = 0.1, the official trainer's); observation tokens weigh 0. The
    reference is the SFT warm start; no KL term (β is the constraint); the advantages are computed but not read.

    Run (the SFT warm start and the env as configs/agent_guess_number.py):
        python -m experiments.train --config=configs/agent_dmpo.py --workdir=/tmp/rl4llm/agent_dmpo
    SDPO on the same runs: configs/agent_sdpo.py, or `--config.preference.loss=sdpo`.

    Departures from the paper: DMPO trains offline on ETO-style pairs (an expert trajectory vs a failed one of the
    policy); here the pairs are on-policy, each task's best vs worst sampled episode by return, re-drawn every step
    (the online-DPO setting of configs/online_dpo.py). T is each episode's number of agent turns, as the official
    `dmpo_trainer_efficient.py`.
    Logged every step: `dmpo/loss` (also `loss/pg`), `dmpo/rewards/{chosen,rejected,margins,accuracies}`,
    `dmpo/logps/{chosen,rejected}` (the φ-weighted sums), `dmpo/valid_pair_frac` and `episode_return`.
    """
    c = agent_guess_number.get_config()
    c.preference.loss = "dmpo"
    c.preference.beta = 0.1
    c.preference.turn_discount = 0.7
    c.rl.kl_coef = 0.0
    c.rl.num_minibatches = 1  # pairs are formed over the whole batch's groups
    c.rl.num_prompts = 8
    c.rl.num_generations = 8
    return c
