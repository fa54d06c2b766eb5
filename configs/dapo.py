"""DAPO (Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale"), complete."""

from configs import default

# Minibatch updates per rollout batch (DAPO: 16; here 4, see the docstring).
UPDATES_PER_BATCH = 4


def get_config():
    """DAPO: every component of the paper's Algorithm 1, scaled to the built-in task.

    - Clip-higher: PPO-clip with ε_low = 0.2, ε_high = 0.28; dual-clip c = 10 for A < 0 (verl DAPO scripts).
    - Token-level policy-gradient loss: token-mean, 1/Σ|o_i| Σ_i Σ_t (`rl.agg_mode="token-mean"`).
    - Dynamic sampling: groups whose G rollouts are all correct or all wrong are dropped (the filter reads the
      correctness reward, not the shaped one: verl's filter_groups.metric=acc) and the step refills with fresh prompts,
      up to `selection.max_gen_rounds` = 4 generation rounds of 16 prompts (verl's max_num_gen_batches: 10); groups
      still missing at the bound are masked out of the loss, never trained on.
    - Overlong reward shaping: the soft overlong punishment `clip(−(|y| − (L_max − L_cache)) / L_cache, −1, 0)`
      added to the reward (`task.length_shaping="dapo_overlong"`) with the paper's proportions (L_max = 20,480,
      L_cache = 4,096): L_max = 40 (`sampling.max_new_tokens`, up from the default 32), L_cache = 8. The longest
      correct worked answer of this task is 31 tokens with its stop token (negative intermediate sums, e.g.
      "0-7=-7;-7-4=-11;-11-7=-18;#-18"), so only responses longer than 32 tokens, none of them correct, are punished.
    - No KL penalty, no entropy bonus; GRPO group-normalised advantages, G = 16.
    Schedule: the paper takes 16 minibatch updates per rollout batch (512 prompts x 16, minibatches of 32 prompts =
    512 sequences, lr 1e-6, AdamW wd 0.1). Our step has 16 prompts x 16 = 256 sequences, so 16 updates would be
    minibatches of 16 sequences; minibatches that small learned nothing at lr 1e-4 (measured with 8 updates of 16
    sequences per step: held-out greedy 0.445 -> 0.44 / 0.45 after 70-80 GRPO steps, 2 seeds). This recipe keeps the
    minibatch at a size that learns: 4 updates of 64 sequences (4 prompts' groups), lr 1e-4 (the default job's: our
    1M-parameter model from its SFT warm start, not a 32B base). Rewards are 0/1 (the paper's are ±1; group
    normalisation removes the difference except against the overlong term).
    The ablation ladder of the paper's Table 1 (each component added in turn) is configs/dapo_ladder.py.

    Run:
        python -m experiments.train --config=configs/dapo.py --workdir=/tmp/rl4llm/dapo
    Result: see README "Reproductions" (experiments/reproduce.py --study=dapo_ladder).
    """
    c = with_dapo_algorithm(default.get_config(), max_gen_rounds=4, overlong_buffer=8)
    c.rl.num_minibatches = UPDATES_PER_BATCH
    c.sampling.max_new_tokens = 40
    return c


def with_dapo_algorithm(c, *, max_gen_rounds: int, overlong_buffer: int):
    """Sets DAPO's Algorithm 1 on config `c` (in place; returns it): GRPO advantages, PPO-clip with clip-higher
    (0.2 / 0.28) and dual-clip 10, token-mean loss, no KL, no entropy bonus, dynamic sampling with at most
    `max_gen_rounds` generation rounds, and the soft overlong punishment with L_cache = `overlong_buffer` tokens
    below `sampling.max_new_tokens` (factor 1). The batch, schedule and lengths stay the caller's."""
    c.rl.advantage = "grpo"
    c.rl.loss = "ppo_clip"
    c.rl.loss_kwargs.clip_low = 0.2
    c.rl.loss_kwargs.clip_high = 0.28
    c.rl.loss_kwargs.dual_clip = 10.0
    c.rl.agg_mode = "token-mean"
    c.rl.kl_coef = 0.0
    c.rl.entropy_coef = 0.0
    c.selection.method = "dynamic_sampling"
    c.selection.max_gen_rounds = max_gen_rounds
    c.task.length_shaping = "dapo_overlong"
    c.task.length_shaping_kwargs.buffer = overlong_buffer
    c.task.length_shaping_kwargs.factor = 1.0
    return c
