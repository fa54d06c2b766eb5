"""HAPO (Liu et al. 2025, "From Uniform to Heterogeneous: Tailoring Policy Optimization to Every Token's Nature";
starriver030515/HAPO), complete: its four token-level pieces on DAPO's algorithm."""

from configs import dapo
from configs import default


def get_config():
    """HAPO: all four of the paper's token-level components, on DAPO's training algorithm as in the official recipes.

    - Adaptive sampling temperature: token t is drawn at T·(1 + τ·ĥ_t), τ = 0.05 (`sampling.temperature_tau`),
      ĥ_t ∈ [−1, 1] the entropy score of its logits under the previous RL step's statistics (pivot quantile 0.8 of
      the log-entropies, `sampling.temperature_pivot`; `train.companions.adaptive_temperature`). The first step
      samples at T. The official code's scale for below-pivot tokens has the wrong sign (its temperature only
      rises, in [T, T(1 + τ)]); this follows the paper's formula (T(1 ± τ)): see `rl.entropy.normalized_entropy_stats`.
    - Token-level group-average advantage (`rl.advantage="hapo"`): each group's mean and std of the reward over
      its valid tokens (length-weighted), falling back to GRPO's when some |A| ≥ 5.
    - Asymmetric adaptive clipping and differential advantage redistribution (`rl.loss="hapo"`): base clip
      0.2 / 0.2, α = β = 1, pivot 0.8, dual clip 10 (the official recipes' values).
    - DAPO's algorithm under it (the official recipes run on verl's DAPO trainer): dynamic sampling (at most 4
      generation rounds), token-mean loss, no KL, no entropy bonus, G = 16, the soft overlong punishment. HAPO's
      recipes set L_max = 10,240 and L_cache = 4,096 (40 %); here L_max = 40 and L_cache = 8 as in configs/dapo.py:
      40 % of 40 (16 tokens) would punish correct answers, the longest of which is 31 tokens.
    Schedule: as configs/dapo.py (4 minibatch updates of 64 sequences per step, lr 1e-4, from the default job's
    SFT warm start); the paper's is 512 prompts x 16, minibatches of 32 prompts, lr 1e-6.

    Run:
        python -m experiments.train --config=configs/hapo.py --workdir=/tmp/rl4llm/hapo
    """
    c = dapo.with_dapo_algorithm(default.get_config(), max_gen_rounds=4, overlong_buffer=8)
    c.rl.num_minibatches = dapo.UPDATES_PER_BATCH
    c.sampling.max_new_tokens = 40
    c.rl.advantage = "hapo"
    c.rl.loss = "hapo"
    c.rl.loss_kwargs.clip_low = 0.2
    c.rl.loss_kwargs.clip_high = 0.2
    c.rl.loss_kwargs.dual_clip = 10.0
    c.rl.loss_kwargs.alpha = 1.0
    c.rl.loss_kwargs.beta = 1.0
    c.rl.loss_kwargs.pivot = 0.8
    c.sampling.temperature_tau = 0.05
    c.sampling.temperature_pivot = 0.8
    return c
