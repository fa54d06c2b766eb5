"""The RL stage's initial state: the TrainState (`initial_state`: the policy's part, `init_rl_state`, with the
companions' states, `init_companions`) and, carried beside it, the prompt selection's (`initial_selection`).
`COMPANIONS`: the companion modules (`rl4llm.train.companions`: their four functions), in the order they run."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rl4llm.config import validation as config_lib
from rl4llm.models import lora
from rl4llm.train import learner as learner_lib
from rl4llm.train import setup as setup_lib
from rl4llm.train.companions import adaptive_temperature
from rl4llm.train.companions import controllers
from rl4llm.train.companions import critic as critic_lib
from rl4llm.train.companions import epo as epo_lib
from rl4llm.train.companions import prime as prime_lib
from rl4llm.train.companions import quality_head
from rl4llm.train.companions import relift as relift_lib
from rl4llm.train.companions import reward_weighting
from rl4llm.train.companions import rm_cotraining

# PPO's critic, PRIME's implicit PRM, EPO's entropy history, the adaptive coefficients and reference reset, the
# reward components' weights (dynamic weighting, constrained RLHF), HAPO's adaptive temperature statistics, ReLIFT's
# buffer and SFT steps, the outcome RM co-trained with the policy (Cooper).
COMPANIONS = (critic_lib, prime_lib, epo_lib, controllers, reward_weighting, adaptive_temperature, relift_lib,
              rm_cotraining, quality_head)


def init_rl_state(config, init_params, optimizer, key) -> learner_lib.TrainState:
    """The policy's part of the RL stage's initial TrainState: params, optimizer state, the reference copy when KL is
    on or a pairwise objective (online DPO) needs it, the key; no extras (the companions', `init_companions`)."""
    rl = config.rl
    uses_reference = rl.kl_coef > 0 or config_lib.pair_loss_reads_reference(config)
    return learner_lib.TrainState(
        params=init_params,
        opt_state=optimizer.init(lora.trainable(init_params)),
        # LoRA: the reference is the frozen base with adapters off (learner.reference_params), no copy.
        ref_params=jax.tree.map(jnp.copy, init_params) if uses_reference and not lora.has_adapters(init_params) else None,
        key=jax.random.key_data(jax.random.fold_in(key, 1)),
    )


def init_companions(config, setup, state):
    """`state` with the initial state of each companion the run uses (`init` of each of `COMPANIONS`)."""
    for companion in COMPANIONS:
        state = companion.init(config, setup, state)
    return state


def initial_state(config, setup, init_params, optimizer, key) -> learner_lib.TrainState:
    """The RL stage's initial TrainState (`init_rl_state`, `init_companions`) placed on the learner mesh."""
    state = init_companions(config, setup, init_rl_state(config, init_params, optimizer, key))
    return setup_lib.placed(setup, state)


def initial_selection(setup):
    """The prompt selection's initial state (host numpy: `rl4llm.data.selection.SelectionState`, per-prompt
    statistics and replay buffer, under the per-prompt methods; `rl4llm.data.difficulty.DifficultyState` under
    `adaptive_difficulty`, `ScalerState` under `scaler`); None otherwise and for the agent source (no selector).
    Not part of the TrainState: the RL loop carries it and checkpoints it beside it."""
    return setup.selector.init_state() if setup.selector is not None else None
