"""DAPO's ablation ladder (Yu et al. 2025, Table 1): GRPO, then each DAPO component added in turn."""

from configs import dapo
from configs import default

RUNGS = ("grpo", "clip_higher", "overlong", "token_loss", "dapo")


def get_config(rung: str = "dapo"):
    """One rung of the ladder, named by the component it adds (each rung has every earlier one):

    grpo         GRPO: group-normalised advantages, PPO-clip ε = 0.2 (dual-clip c = 10), the per-sequence token
                 mean (`seq-mean-token-mean`, 1/G Σ_i 1/|o_i| Σ_t), no KL, configs/dapo.py's schedule (4 minibatch
                 updates per rollout batch), batch (16 prompts x 16) and response budget (40 tokens)
    clip_higher  + ε_high = 0.28
    overlong     + soft overlong punishment (L_max = 40, L_cache = 8; configs/dapo.py)
    token_loss   + token-level loss (`token-mean`, 1/Σ|o_i| Σ_i Σ_t)
    dapo         + dynamic sampling (drop all-correct and all-wrong groups, refill, up to 4 generation rounds)
                 = configs/dapo.py

    The paper's order also has "overlong filtering" (mask truncated samples) before clip-higher; we go straight to
    the soft punishment that replaces it. Paper (Qwen2.5-32B, AIME24 avg@32): 30 -> (36 filtering) -> 38 -> 41 ->
    42 -> 50. Ours: README "Reproductions" and notebooks/04_dapo_ladder.ipynb.

    Run (the rung after the colon):
        python -m experiments.train --config=configs/dapo_ladder.py:clip_higher --workdir=/tmp/rl4llm/ladder_ch
    All rungs x 3 seeds from one shared warm start:
        python -m experiments.reproduce --study=dapo_ladder
    """
    if rung not in RUNGS:
        raise ValueError(f"configs/dapo_ladder.py:{rung}: unknown rung; one of {', '.join(RUNGS)}")
    full = dapo.get_config()
    c = default.get_config()
    c.rl.advantage = "grpo"
    c.rl.loss = "ppo_clip"
    c.rl.loss_kwargs.clip_low = 0.2
    c.rl.loss_kwargs.clip_high = 0.2
    c.rl.loss_kwargs.dual_clip = full.rl.loss_kwargs.dual_clip
    c.rl.agg_mode = "seq-mean-token-mean"
    c.rl.kl_coef = 0.0
    c.rl.num_minibatches = full.rl.num_minibatches
    c.sampling.max_new_tokens = full.sampling.max_new_tokens
    steps = RUNGS[1 : RUNGS.index(rung) + 1]
    if "clip_higher" in steps:
        c.rl.loss_kwargs.clip_high = full.rl.loss_kwargs.clip_high
    if "overlong" in steps:
        c.task.length_shaping = full.task.length_shaping
        c.task.length_shaping_kwargs = full.task.length_shaping_kwargs
    if "token_loss" in steps:
        c.rl.agg_mode = full.rl.agg_mode
    if "dapo" in steps:
        c.selection.method = full.selection.method
        c.selection.max_gen_rounds = full.selection.max_gen_rounds
    return c
