"""Multi-turn agent training: SFT warm start on scripted expert trajectories, then RL on environments."""
from __future__ import annotations

import jax.numpy as jnp

from rl4llm.sampling import multi_turn
from rl4llm.train import learner as learner_lib


def learner_batch(traj: multi_turn.Trajectories, advantages, old_logp) -> learner_lib.LearnerBatch:
    """The learner's view of a trajectory record: the whole context is the sequence and every token after the
    first is a "completion" position, with completion_mask = loss_mask (policy tokens only: prompt,
    observations and padding get no loss, KL or entropy).

    advantages, old_logp: [B, T] over the record's tokens. Returns a LearnerBatch with completion length T - 1.
    """
    mask = traj.loss_mask[:, 1:].astype(jnp.float32)  # [B, T-1]
    return learner_lib.LearnerBatch(
        tokens=traj.tokens.astype(jnp.int32),
        attention_mask=traj.attention_mask.astype(jnp.int32),
        completion_mask=mask,
        advantages=jnp.asarray(advantages)[:, 1:] * mask,
        old_logp=jnp.asarray(old_logp)[:, 1:],
        sampler_logp=traj.behaviour_logp[:, 1:],
    )
