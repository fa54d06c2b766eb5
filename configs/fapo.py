"""FAPO (Ding et al. 2025, "Flawed-Aware Policy Optimization for Efficient and Reliable Reasoning"): the default run
with a right answer reached through a flawed step rewarded half-way between right and wrong."""

from configs import default


def get_config():
    """FAPO on the main job: R_FAPO = R − λ·1[flawed positive] (`rl4llm.rewards.process`), a flawed positive being
    a completion whose final answer the verifier accepts but one of whose steps the process judge rejects. The judge
    is the arithmetic task's exact step checker (`rewards.arithmetic.first_flawed_step`: each step's operands,
    operator and result, and the answer restating the last step), not FAPO's trained generative reward model: this
    measures the penalty with a perfect judge. λ = 0.5 on the 0/1 rewards is the paper's λ = 1 on ±1 rewards (a
    flawed positive scores half-way; GRPO's advantages do not change under an affine map of the rewards), so a flawed
    positive's advantage has the sign of (wrong − sound) in its group: learnt from while most of the group is wrong,
    pushed down once most is sound. Everything else is the default run's.

    Logged every step: `judge/flawed_positive_frac` (flawed among the correct rollouts), `judge/sound_accuracy`,
    `judge/flawed_frac`, `reward/exact_answer` (before the penalty); at each evaluation the same for the greedy and the
    sampled completions (`eval/flawed_positive_frac`, `eval/sound_accuracy`, `eval/sampled_...`). Any recipe monitors
    flawed positives with `--config.task.flaw_judge=arithmetic_steps` alone (penalty 0).

    Run:
        python -m experiments.train --config=configs/fapo.py --workdir=/tmp/rl4llm/fapo
    Result (notebooks/07_reward_loop.ipynb, study fapo: the main job's warm start, whose sampled right answers are 30 %
    flawed positives, 100 steps, 3 seeds): greedy 0.826 ± 0.014 vs GRPO's 0.784 ± 0.011, sampled sound accuracy
    0.561 ± 0.013 vs 0.532 ± 0.013, sampled flawed positives 6.2 ± 1.0 % of the right answers vs 7.5 ± 1.1 %.
    """
    c = default.get_config()
    c.task.flaw_judge = "arithmetic_steps"
    c.task.flaw_penalty = 0.5
    return c
