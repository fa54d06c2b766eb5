"""TP-GRPO (He et al. 2025, "Good Learners Think Their Thinking: Generative PRM Makes Large Reasoning Model More
Efficient Math Learner"): the default run with thought-level process rewards beside the outcome reward."""

from configs import default


def get_config():
    """TP-GRPO on the main job: the process judge labels every step (`rewards.arithmetic.step_labels`: the task's exact
    step checker, in place of the paper's generative PRM), consecutive equally labelled steps form a *thought*, every
    token gets the value of its thought (+1 sound, −1 flawed; `rl.process.thought`), weighted by 1 − the group's
    accuracy (the capability-adaptive weight: process rewards fade as the policy masters a prompt) and added to GRPO's
    outcome advantage (`rl.process.process_grpo`, c = 0.5). The paper's weight schedule and its off-policy grouped PPO
    are not public in detail: both are reconstructions (module docstring of `rl4llm.rl.process`).

    Logged every step: `process/reward_abs` (the mechanism acting), `process/sound_step_frac`,
    `process/thoughts_per_response`, `process/steps_per_response`, and the judge's `judge/*`.

    Run:
        python -m experiments.train --config=configs/tp_grpo.py --workdir=/tmp/rl4llm/tp_grpo
    Result: notebooks/07_reward_loop.ipynb (study process_rewards).
    """
    c = default.get_config()
    c.task.flaw_judge = "arithmetic_steps"
    c.task.step_reward = "thought"
    c.rl.advantage = "process_grpo"
    c.rl.advantage_kwargs = {"process_coef": 0.5, "capability_adaptive": True}
    return c
