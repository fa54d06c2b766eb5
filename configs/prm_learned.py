"""PRM Clip on a LEARNED process reward model (Gao et al. 2024, "On Designing Effective RL Reward at Training Time for
LLM Reasoning"): the step scores come from a PRM trained on the exact step judge's labels of the warm start's own
samples (`rl4llm.process_reward_model`), not from the judge itself, so the policy can farm what the PRM gets wrong."""

from configs import prm_clip

PROCESS_REWARD_MODEL = "/tmp/rl4llm/prm_learned_rm/reward_model"  # where step 2 writes the PRM


def get_config():
    """configs/prm_clip.py with `task.step_reward_model`: each step's score s_k = σ(head) of the PRM at the token that
    ends step k (one batched forward of the rollouts per RL step), r_k = min(s_k − η, 0) with η = 0.5, and GRPO's
    outcome advantage plus 0.5 × the return-to-go of those rewards (`rl.process.process_grpo`). The exact judge
    (`task.flaw_judge`) still segments the steps and watches: `prm/judge_sound_frac` (what the judge says of the
    steps) beside `prm/step_score_mean` (what the PRM says), `prm/step_agreement`, `prm/score_sum` (the raw PRM
    return: what farming raises), `prm/response_min_score`, and `process/steps_per_response`.

    The PRM (step 2 below): `reward_model.objective="process"` (per-step BCE on the judge's labels), its trunk the warm
    start's SFT policy (`init_from`, step 1), its data the warm start's own samples (`sample_from`: G =
    `rl.num_generations` completions of `reward_model.sample_prompts` = 512 training prompts, every step labelled by
    the judge), 300 updates of 2 × 32 sequences.

    Variants with a flag: `--config.task.step_reward=prm_delta` (Delta: r_k = s_k − s_{k+1}, r_K = s_K) and `=prm`
    (the raw score: the paper's hackable baseline).

    Run:
        python -m experiments.train --workdir=/tmp/rl4llm/prm_warm --config.rl.steps=0
        python -m experiments.train_reward_model --workdir=/tmp/rl4llm/prm_learned_rm \\
            --config.reward_model.objective=process --config.reward_model.init_from=/tmp/rl4llm/prm_warm \\
            --config.reward_model.sample_from=/tmp/rl4llm/prm_warm --config.reward_model.steps=300
        cp -r /tmp/rl4llm/prm_warm /tmp/rl4llm/prm_learned
        python -m experiments.train --config=configs/prm_learned.py --workdir=/tmp/rl4llm/prm_learned
    Result: notebooks/07_reward_loop.ipynb (study learned_prm).
    """
    c = prm_clip.get_config()
    c.task.step_reward_model = PROCESS_REWARD_MODEL
    return c
