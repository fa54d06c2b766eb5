"""LUFFY (Yan et al. 2025, "Learning to Reason under Off-Policy Guidance"): mixed-policy GRPO with policy shaping."""

from configs import default


def get_config():
    """LUFFY: k of each group's G rows are an off-policy trace (here the task's reference solution; the paper's
    are DeepSeek-R1 solutions), scored by the same reward, and advantages are computed over the whole mixed group.
    Trace tokens get the policy-shaped weight f(π_θ) = π_θ/(π_θ + 0.1) with the behaviour probability taken as 1
    and no clip; sampled tokens the usual ratio (`rl4llm.rl.off_policy.luffy`).

    Official train.sh (verl.mix_src.main_mix_ppo), which this follows: rollout.n=8 with n_prefix=1 (1 trace in
    8; here 2 in 16), adv_estimator=grpo with grpo_use_std=False (`dr_grpo`: no std division),
    off_policy_reshape=p_div_p_0.1, loss_remove_clip=True (`on_policy_clip=False`), loss_remove_token_mean=True
    (Σ L·m / T: `seq-mean-token-sum-norm` with C = the response budget, up to the constant N, which Adam does not
    see), entropy_coeff=0.001, no KL, train_batch_size=128 with ppo_mini_batch_size=64 (2 updates per batch:
    `num_minibatches=2`), temperature 1. The paper's lr 1e-6 is for 7B models; the main job's 1e-4 is kept.
    Logged: `off_policy_frac` (trace tokens / tokens), `off_is_weight_mean/max/min` (π_θ of trace tokens),
    `off_shaped_weight_mean`, `off_policy/trace_reward`; `reward` and the solve fractions count sampled rows only.

    Traces from a stronger model instead (`config.teacher`, `rl4llm.train.teacher`): k fresh samples of any
    checkpoint each step, e.g. another run's workdir or an HF model directory:
        python -m experiments.train --config=configs/luffy.py --workdir=/tmp/rl4llm/luffy_teacher \
            --config.teacher.checkpoint=/tmp/rl4llm/stronger_run

    Run:
        python -m experiments.train --config=configs/luffy.py --workdir=/tmp/rl4llm/luffy
    Result (notebooks/05_guidance.ipynb, 6-7-operand chains from the 4-operand warm start, 3 seeds): held-out pass@16
    0.207 -> 0.061 ± 0.028 after 40 steps (GRPO 0.228 ± 0.006), 0.046 ± 0.030 after 100: the policy imitates the
    traces' length but not their arithmetic and loses its own answer format; the paper's gain did not reproduce here.
    """
    c = default.get_config()
    c.rl.advantage = "dr_grpo"
    c.rl.loss = "luffy"
    c.rl.loss_kwargs.on_policy_clip = False
    c.rl.loss_kwargs.shaping_gamma = 0.1
    c.rl.off_policy_traces = 2
    c.rl.agg_mode = "seq-mean-token-sum-norm"
    c.rl.agg_norm_length = 0  # C = sampling.max_new_tokens
    c.rl.entropy_coef = 0.001
    c.rl.kl_coef = 0.0
    c.rl.num_minibatches = 2
    return c
