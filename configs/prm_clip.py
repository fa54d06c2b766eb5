"""PRM Clip (Gao et al. 2024, "On Designing Effective RL Reward at Training Time for LLM Reasoning"): the default run
with step rewards min(s − η, 0) from a process judge beside the outcome reward."""

from configs import default


def get_config():
    """Clip on the main job: each step's score s (the task's exact step checker, `rewards.arithmetic.step_labels`: 1
    sound, 0 flawed, in place of a trained PRM) becomes r = min(s − η, 0) on the step's last token (η = 0.5: a flawed
    step costs 0.5, a sound one nothing), so no number of steps earns reward; each token gets GRPO's outcome advantage
    plus 0.5 × the return-to-go of those rewards (`rl.process.process_grpo`; the paper trains PPO with a critic on them).

    Variants with a flag: `--config.task.step_reward=prm_delta` (Delta: r_k = s_k − s_{k+1}, the return from a step is
    its own score), `=prm` (the raw score, whose return grows with the number of steps: the paper's hackable baseline),
    `=thought` (TP-GRPO, `configs/tp_grpo.py`). Logged every step: `process/reward_abs`, `process/sound_step_frac`,
    `process/steps_per_response`, and the judge's `judge/*`.

    Run:
        python -m experiments.train --config=configs/prm_clip.py --workdir=/tmp/rl4llm/prm_clip
    Result: notebooks/07_reward_loop.ipynb (study process_rewards).
    """
    c = default.get_config()
    c.task.flaw_judge = "arithmetic_steps"
    c.task.step_reward = "prm_clip"
    c.task.step_reward_eta = 0.5
    c.rl.advantage = "process_grpo"
    c.rl.advantage_kwargs = {"process_coef": 0.5}
    return c
