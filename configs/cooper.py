"""Cooper (Hong et al. 2025, "Cooper: Co-Optimizing Policy and Reward Models in Reinforcement Learning for Large
Language Models"): GRPO rewarded by an outcome reward model that keeps training on the policy's own completions."""

from configs import default

REWARD_MODEL = "/tmp/rl4llm/cooper_rm/reward_model"  # where step 1 of the docstring writes the RM


def get_config():
    """The main job rewarded by an outcome RM's score alone (`reward_model.mode="replace"`), the RM co-trained
    (`reward_model.co_train`, `rl4llm/train/companions/rm_cotraining.py`): each RL step, one Bradley–Terry update on
    every (accepted, rejected) pair of the groups the rule verifier splits (`reward_model.co_train_pairs="all"`;
    "hardest": each group's pair the RM orders worst), with the RM's training fields (lr 1e-3, clip 1.0). The verifier never enters the policy's reward:
    it only labels the RM's pairs (Cooper's high-precision positives). Departures: Cooper's RM reads the reference
    answer (VerifyRM) and its negatives are an assistant model's rewrites of positives; ours reads (prompt,
    completion) and its negatives are the policy's own rejected completions the RM overrates.

    Reward-hacking monitors, every step: `reward_model/pair_accuracy` (the RM's ordering of the step's accepted vs
    rejected completions, before its update), `reward_model/score_mean` (what the policy optimises) beside
    `reward/exact_answer` (what the verifier says), `reward_model/loss`, `reward_model/pairs`.

    Run (step 1: an RM on reference vs corrupted solutions, as in the README's reward-model section):
        python -m experiments.train_reward_model --workdir=/tmp/rl4llm/cooper_rm
        python -m experiments.train --config=configs/cooper.py --workdir=/tmp/rl4llm/cooper
    Result: notebooks/07_reward_loop.ipynb (study reward_model, arm rm_corrupted_cooper).
    """
    c = default.get_config()
    c.task.flaw_judge = "arithmetic_steps"  # watches: flawed positives are what an RM can be fooled by
    c.reward_model.checkpoint = REWARD_MODEL
    c.reward_model.mode = "replace"
    c.reward_model.co_train = True
    return c
