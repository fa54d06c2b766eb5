"""HAPO's adaptive sampling temperature (Liu et al. 2025, "From Uniform to Heterogeneous: Tailoring Policy
Optimization to Every Token's Nature"; starriver030515/HAPO `ray_trainer.fit` and `vllm/v1/sample/sampler.py`).

The sampler draws token t at `temperature * (1 + tau * ĥ_t)` (`sampling.entropy_temperature`), ĥ_t the entropy
score of its logits under statistics of the previous RL step: (centre, spread, scale_pos, scale_neg) of the
log-entropies of that step's completion tokens (`rl.entropy.normalized_entropy_stats`, pivot
`config.sampling.temperature_pivot`), taken from the rollout policy's forward pass at the base temperature (the
behaviour pass, which also gives PPO's old log-probs; the official code takes them from its old-log-prob
recompute). They live in `TrainState.extras["entropy_stats"]` (checkpointed: a resumed run samples as the
uninterrupted one). The first RL step has none: its stats are (0, 1, 0, 0), ĥ = 0, every token at the base
temperature (the official code's `norm_entropys = None`).

As in the official code, the learner treats the tokens as samples of the base-temperature policy: with several
updates per step its "old" log-probs are the behaviour pass's, at the base temperature; with one update the ratio
is 1. The sampler's own log-probs, at each token's temperature, feed `logp_gap_sampler_learner` and, with
`rl.tis_cap` > 0, the truncated IS weights (which then also correct for the temperature, unlike the official code).
The evaluation samples at the base temperature (the official validation turns the adaptive temperature off).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rl4llm.rl import entropy as entropy_lib

_NAMES = ("centre", "spread", "scale_pos", "scale_neg")


def enabled(config) -> bool:
    """Whether the run samples at HAPO's adaptive temperature (`config.sampling.temperature_tau > 0`)."""
    return config.sampling.temperature_tau > 0


def initial_stats() -> jax.Array:
    """The stats before any RL step: ĥ = 0 everywhere, so every token is drawn at the base temperature."""
    return jnp.asarray([0.0, 1.0, 0.0, 0.0], jnp.float32)


def step_stats(config, entropy: jax.Array, mask: jax.Array) -> jax.Array | None:
    """The stats of a step's completion tokens (behaviour-pass entropies [N, T], loss mask [N, T]) for the next
    step's sampler, or None when the run does not adapt its temperature."""
    if not enabled(config):
        return None
    return entropy_lib.normalized_entropy_stats(entropy, mask, pivot=config.sampling.temperature_pivot)


def sampler_stats(config, state) -> jax.Array | None:
    """The stats the sampler reads this step (`sampling.generate`'s entropy_stats), or None."""
    return state.extra("entropy_stats") if enabled(config) else None


def init(config, setup, state):
    """`state` with the first step's stats (`initial_stats`) when the run adapts its temperature."""
    return state.with_extras(entropy_stats=initial_stats()) if enabled(config) else state


def update(config, programs, state, rollouts, step: int, metrics: dict):
    """Before RL step `step`'s learner updates: its rollouts' stats replace the ones they were sampled with (logged
    as temperature/entropy_<centre|spread|scale_pos|scale_neg>)."""
    if rollouts.entropy_stats is None:
        return state
    metrics.update({f"temperature/entropy_{name}": float(v)
                    for name, v in zip(_NAMES, jax.device_get(rollouts.entropy_stats))})
    return state.with_extras(entropy_stats=rollouts.entropy_stats)


def after_step(config, programs, state, rollouts, step: int, metrics: dict, updates: list):
    """Nothing after the updates: the stats come from the rollout policy, not the updated one."""
    return state
