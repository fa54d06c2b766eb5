"""StarPO-S reward-variance filtering (RAGEN, Wang et al. 2025): train on the prompt groups of largest reward std."""

from configs import default


def get_config():
    """GRPO on the default arithmetic task with StarPO-S's variance filter (`selection.method="std_filter"`): each
    step rolls out num_prompts / 0.25 = 64 prompts x 16 completions and trains on the 16 groups of largest
    within-group reward std (RAGEN's `rollout_filter_ratio=0.25`, `rollout_filter_type=std`: 2 of 8 groups there);
    the other 48 groups are dropped. With it, StarPO-S's decoupled clip (eps_low 0.2, eps_high 0.28) on the
    default ppo_clip loss, and the default's zero KL (RAGEN config/base.yaml); RAGEN's critic and multi-turn
    trajectories are not part of this single-turn recipe.
    Run:
        python -m experiments.train --config=configs/starpo_s.py --workdir=/tmp/rl4llm/starpo_s
    Logged per step: selection/kept_frac (0.25), selection/dropped_groups, selection/in_group_std and
    selection/chosen_in_group_std (mean reward std of all and of the kept groups). Not yet measured at length: no
    result is claimed for this recipe.
    """
    c = default.get_config()
    c.selection.method = "std_filter"
    c.selection.std_filter_ratio = 0.25
    c.rl.loss_kwargs.clip_low = 0.2
    c.rl.loss_kwargs.clip_high = 0.28
    return c
