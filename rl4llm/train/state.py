"""The RL stage's TrainState: its initial value (`init_rl_state`) and with the companions' states (`initial_state`);
and, carried beside it, the prompt selection's initial state (`initial_selection`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rl4llm.models import lora
from rl4llm.train import learner as learner_lib
from rl4llm.train import setup as setup_lib
from rl4llm.train.companions import critic as critic_lib
from rl4llm.train.companions import epo as epo_lib
from rl4llm.train.companions import prime as prime_lib

def init_rl_state(config, init_params, optimizer, key, critic=None, prm=None) -> learner_lib.TrainState:
    """The RL stage's initial TrainState: reference copy when KL is on, adaptive coefficients when adapted,
    the critic's state (`critic_lib.init_critic_state`) / the implicit PRM's (`prime_lib.init_prm_state`)
    when the run trains one."""
    rl = config.rl
    return learner_lib.TrainState(
        params=init_params,
        opt_state=optimizer.init(lora.trainable(init_params)),
        # LoRA: the reference is the frozen base with adapters off (learner.reference_params), no copy.
        ref_params=jax.tree.map(jnp.copy, init_params) if rl.kl_coef > 0 and not lora.has_adapters(init_params) else None,
        key=jax.random.key_data(jax.random.fold_in(key, 1)),
    ).with_extras(
        kl_coef=jnp.asarray(rl.kl_coef, jnp.float32) if rl.kl_target > 0 else None,
        entropy_coef=jnp.asarray(rl.entropy_coef, jnp.float32) if rl.entropy_target > 0 else None,
        critic=critic,
        prm=prm,
    )


def initial_state(config, setup, init_params, optimizer, key, critic_optimizer=None, prm_optimizer=None):
    """The RL stage's initial state (`init_rl_state`) placed on the learner mesh, with the companions' states (the
    critic's, the implicit PRM's, EPO's history)."""
    critic = None if critic_optimizer is None else critic_lib.init_critic_state(config, setup.model_cfg, init_params,
                                                                                 critic_optimizer)
    prm = None if prm_optimizer is None else prime_lib.init_prm_state(init_params, prm_optimizer)
    state = epo_lib.init(config, setup, init_rl_state(config, init_params, optimizer, key, critic, prm))
    return setup_lib.placed(setup, state)


def initial_selection(setup):
    """The prompt selection's initial state (`rl4llm.data.selection.SelectionState`, host numpy: per-prompt
    statistics, replay buffer) under `config.selection`'s per-prompt methods; None otherwise and for the agent
    source (no selector). Not part of the TrainState: the RL loop carries it and checkpoints it beside it."""
    return setup.selector.init_state() if setup.selector is not None else None
