"""PROF (Ye et al. 2025, "Beyond Correctness: Harmonizing Process and Outcome Rewards through RL Training"): GRPO on
the rollouts a process judge finds consistent with their outcome, filtered from an over-sampled group."""

from configs import default


def get_config():
    """PROF on the main job: each prompt gets n' = 32 rollouts (`selection.prof_rollouts`), and the G = 16 trained on
    are chosen by the consistency filter (`rl4llm.rewards.process.prof_kept`): as balanced between right and wrong as
    the counts allow, dropping the right answers of LOWEST process score and the wrong ones of HIGHEST; GRPO's
    advantages are then computed on the kept 16, with the outcome reward only (the process score never enters the
    reward). The judge is the arithmetic task's exact step checker (`task.flaw_judge="arithmetic_steps"`), and a
    response's process score is the share of its steps before the first flawed one (`process.sound_prefix`; PROF
    averages a PRM's step scores). The README of the official code states the rule but not n' or the tie rules: n' =
    2G and the odd response going to the right side are our choices.

    Logged: `selection/prof_generated_accuracy` / `selection/prof_kept_accuracy`,
    `selection/prof_correct_score_generated` / `_kept` (the right answers' process score before and after the
    filter), and the judge's `judge/*` over all n' rollouts.

    Run:
        python -m experiments.train --config=configs/prof.py --workdir=/tmp/rl4llm/prof
    Result (notebooks/07_reward_loop.ipynb, study fapo, 100 steps, 3 seeds): greedy 0.826 ± 0.006, pass@1 0.616 ±
    0.008, sampled sound accuracy 0.583 ± 0.010, flawed positives 5.3 ± 1.1 % of right answers, against GRPO's 0.784,
    0.574, 0.532, 7.5 % (256 rollouts a step to PROF's 512); the ablation `selection.prof_balance_only=True` (the same
    counts in sampled order) reached 0.804, 0.603, 0.561, 6.9 %: most of the gain is the balancing.
    """
    c = default.get_config()
    c.task.flaw_judge = "arithmetic_steps"
    c.selection.method = "prof"
    c.selection.prof_rollouts = 32
    return c
