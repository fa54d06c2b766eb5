"""Controllers run after a step's actor updates: the adaptive KL coefficient (Ziegler et al. 2019), the adaptive
entropy coefficient (Skywork-OR1) and the periodic reference reset (ProRL). `init` puts the adaptive coefficients in
`TrainState.extras` ("kl_coef", "entropy_coef"); `after_step` runs all three."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rl4llm.rl import entropy as entropy_lib
from rl4llm.rl import kl as kl_lib
from rl4llm.train.companions import critic as critic_lib

def update_controllers(config, state, *, current_kl, entropy, num_sequences: int):
    """Adaptive coefficients after an RL step (no-op for fixed ones).

    KL (Ziegler et al. 2019, `rl.kl.adaptive_kl_coef`): β ← β·(1 + clip(KL/target − 1, ±0.2)·N/horizon).
    Entropy (Skywork-OR1, `rl.entropy.adaptive_entropy_coef`): c ← clip(c ± δ, 0, 1), up while the mean
    token entropy is below the target. `current_kl` / `entropy` are the step's measurements.
    """
    rl = config.rl
    if state.extra("kl_coef") is not None:
        kl_coef = kl_lib.adaptive_kl_coef(
            state.extra("kl_coef"), current_kl, num_sequences, target=rl.kl_target, horizon=rl.kl_horizon
        )
        state = state.with_extras(kl_coef=jnp.asarray(kl_coef, jnp.float32))
    if state.extra("entropy_coef") is not None:
        entropy_coef = entropy_lib.adaptive_entropy_coef(
            state.extra("entropy_coef"), entropy, target=rl.entropy_target, delta=rl.entropy_coef_delta
        )
        state = state.with_extras(entropy_coef=jnp.asarray(entropy_coef, jnp.float32))
    return state


def maybe_reset_reference(config, state, optimizer, steps_done: int):
    """ProRL reference reset (Liu et al. 2025, "ProRL"): after every `rl.ref_reset_every`-th RL step the
    reference policy becomes a copy of the current policy and the optimizer state is re-initialised.

    Returns (state, whether it reset)."""
    every = config.rl.ref_reset_every
    if not every or steps_done % every:
        return state, False
    params = state.params
    return state.replace(ref_params=jax.tree.map(jnp.copy, params), opt_state=optimizer.init(params)), True


def enabled(config) -> bool:
    """Whether the run adapts a coefficient (`rl.kl_target` / `rl.entropy_target` > 0) or resets its reference
    (`rl.ref_reset_every`)."""
    rl = config.rl
    return rl.kl_target > 0 or rl.entropy_target > 0 or bool(rl.ref_reset_every)


def init(config, setup, state):
    """`state` with the adaptive coefficients' initial values (`rl.kl_coef`, `rl.entropy_coef`; float32 scalars)
    where they are adapted."""
    rl = config.rl
    return state.with_extras(
        kl_coef=jnp.asarray(rl.kl_coef, jnp.float32) if rl.kl_target > 0 else None,
        entropy_coef=jnp.asarray(rl.entropy_coef, jnp.float32) if rl.entropy_target > 0 else None,
    )


def update(config, programs, state, rollouts, step: int, metrics: dict):
    """Nothing before the learner's updates."""
    return state


def after_step(config, programs, state, rollouts, step: int, metrics: dict, updates: list):
    """The adaptive coefficients and the periodic reference reset after RL step `step`'s actor updates (none in a
    critic warm-up step: nothing to do); logs the coefficients the step used and whether it reset. `updates`: the
    metrics of the step's updates (the first one's KL and entropy are measured before any update of this step),
    `rollouts.current_kl`: KL-in-reward's measured KL, or None."""
    if not enabled(config) or critic_lib.warming_up(config, rollouts, step):
        return state
    first = updates[0]
    # The learner carries adaptive coefficients through unchanged: these are the values this step used.
    coefs = {"kl_coef": state.extra("kl_coef"), "entropy_coef": state.extra("entropy_coef")}
    metrics.update({k: v for k, v in jax.device_get(coefs).items() if v is not None})
    state = update_controllers(
        config,
        state,
        current_kl=first.get("kl") if rollouts.current_kl is None else rollouts.current_kl,
        entropy=first["entropy"],
        num_sequences=config.rl.num_prompts * config.rl.num_generations,
    )
    state, reset = maybe_reset_reference(config, state, programs.optimizer, step + 1)
    if config.rl.ref_reset_every:
        metrics["ref_reset"] = float(reset)
    return state
