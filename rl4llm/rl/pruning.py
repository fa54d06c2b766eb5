"""ARRoL's online rollout pruning (Hsu et al. 2025, "Prune as You Generate: Online Rollout Pruning for Faster and
Better RLVR"; digest rewards_and_data_efficiency.md §7.10): a light quality head on the policy's hidden states
predicts whether a partial rollout will be judged correct; each prompt's N = oversample·M rollouts are decoded to a
checkpoint, M of them are kept so that the kept group is balanced toward a target share ρ of predicted successes,
and only those are decoded to the end, scored and trained on. The head learns online from the kept rollouts' final
verifier outcomes (BCE).

    q_φ(h) = σ(w·h + b),   h = the policy's final-norm hidden state at the checkpoint's last token (no gradient),
    kept = the ⌈ρM⌉ rollouts of largest q, then the M − ⌈ρM⌉ of smallest q among the others,
    L(φ) = mean over kept rollouts of BCE(q_φ(h), 1[correct]).

With a perfect q (1 on the rollouts that will succeed, 0 on the others) a group keeps exactly ⌈ρM⌉ successes
whenever it has that many of each kind: the balanced groups that carry the largest GRPO signal. ARRoL's code is not
released: the keep rule (highest and lowest predictions, as the digest reconstructs "closest to the target ratio")
and the linear head are our reading; its test-time q-weighted voting is not built.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np


def init_head(hidden_size: int) -> dict:
    """A head that predicts ½ everywhere: w = 0 [E], b = 0."""
    return {"w": jnp.zeros((hidden_size,), jnp.float32), "b": jnp.zeros((), jnp.float32)}


def quality_logits(head: dict, features: jax.Array) -> jax.Array:
    """logit q_φ = w·h + b. features [N, E] -> [N] float32."""
    return features.astype(jnp.float32) @ head["w"] + head["b"]


def quality_loss(head: dict, features: jax.Array, outcomes: jax.Array, valid: jax.Array
                 ) -> tuple[jax.Array, dict]:
    """Mean binary cross-entropy of q_φ against `outcomes` [N] (1 correct, 0 not) over the `valid` [N] rows, with
    the head's accuracy (q > ½ agrees with the outcome) and its mean prediction on them (0 when none is valid)."""
    logits = quality_logits(head, features)
    y, v = outcomes.astype(jnp.float32), valid.astype(jnp.float32)
    n = jnp.maximum(v.sum(), 1.0)
    # softplus(l) − l·y, whose gradient σ(l) − y is right at l = 0 too (the initial head's logit; the max / |l| form
    # of the same value has a kink there whose autodiff subgradients give −y)
    bce = jax.nn.softplus(logits) - logits * y
    loss = jnp.sum(bce * v) / n
    right = (logits > 0) == (y > 0.5)
    return loss, {"loss": loss, "accuracy": jnp.sum(right * v) / n,
                  "predicted": jnp.sum(jax.nn.sigmoid(logits) * v) / n, "outcome": jnp.sum(y * v) / n}


def balanced_keep(quality: np.ndarray, keep: int, target: float) -> np.ndarray:
    """The rollouts each group keeps: quality [B, n] (predicted success) -> indices [B, keep] into each group's n,
    ascending: the ⌈target·keep⌉ of largest quality, then the others' `keep` − that of smallest quality (ties: the
    earlier rollout first)."""
    quality = np.asarray(quality, np.float64)
    b, n = quality.shape
    if not 0 < keep <= n:
        raise ValueError(f"balanced_keep: keep={keep} must be in [1, {n}]")
    top = min(math.ceil(target * keep), keep)
    kept = np.empty((b, keep), np.int64)
    for g in range(b):
        best = np.argsort(-quality[g], kind="stable")[:top]
        rest = np.setdiff1d(np.arange(n), best)
        worst = rest[np.argsort(quality[g, rest], kind="stable")[: keep - top]]
        kept[g] = np.sort(np.concatenate([best, worst]))
    return kept
