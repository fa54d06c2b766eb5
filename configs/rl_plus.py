"""RL-PLUS (Dong et al. 2025, "Countering Capability Boundary Collapse of LLMs in Reinforcement Learning with
Hybrid-policy Optimization"): external traces in the groups with multiple importance sampling and an
exploration-based advantage."""

from configs import luffy


def get_config():
    """RL-PLUS: k of each group's G rows are an off-policy trace (here the task's reference solution; the paper's are
    DeepSeek-R1 solutions from OpenR1-Math), advantages over the whole mixed group. Trace tokens get the MIS weight
    π_θ/(½π_old + ½π_ω), π_ω = (π_old + 1)/2, times the exploration weight (1 − π_θ)^½ on the advantage, no clip;
    sampled tokens the usual ratio (`rl4llm.rl.off_policy.rl_plus`).

    Official train_RL-PLUS.sh (verl.recipe.main_rlplus_ppo), the same schedule as LUFFY's train.sh: rollout.n=8 with
    n_prefix=1 (1 trace in 8; here 2 in 16), adv_estimator=grpo with grpo_use_std=False (`dr_grpo`),
    off_policy_strategy=RL-PLUS, loss_remove_clip=True (`on_policy_clip=False`), loss_remove_token_mean=True
    (`seq-mean-token-sum-norm`), entropy_coeff=0.001, no KL, 128 prompts in minibatches of 64 (2 updates per batch),
    temperature 1. The paper's lr 1e-6 is for 7B models; the main job's 1e-4 is kept. Logged: `off_policy_frac`,
    `off_is_weight_mean/max/min` (the MIS weight), `off_exploration_weight_mean`, `off_policy/trace_reward`.

    Run:
        python -m experiments.train --config=configs/rl_plus.py --workdir=/tmp/rl4llm/rl_plus
    Result: not yet recorded.
    """
    c = luffy.get_config()  # LUFFY's schedule, the RL-PLUS loss
    c.rl.loss = "rl_plus"
    c.rl.loss_kwargs = {"on_policy_clip": False, "exploration_exponent": 0.5}
    return c
