"""Rollout replay (DOTS, Sun et al. 2025): a FIFO buffer of recent rollout groups with their behaviour log-probs.

Each RL step trains on ``σ·B`` fresh groups plus ``(1-σ)·B`` groups drawn uniformly (without replacement) from the
buffer; then the fresh groups are appended and the oldest evicted. The buffer keeps at most one group per prompt
(the most recent) and never more than ``capacity`` groups. Only groups whose rewards are not all equal are stored
(a group of equal rewards has zero group-relative advantage, so replaying it adds nothing).

Replayed tokens get DOTS's off-policy-corrected clip, ``max(-A·r, -A·clip(r, r_old(1-ε), r_old(1+ε)))`` with
``r = π_θ/μ_b`` and ``r_old = π_old/μ_b``. Since ``clip(r, r_old(1-ε), r_old(1+ε)) = r_old·clip(π_θ/π_old, 1-ε,
1+ε)`` and ``r_old > 0``, this is ``r_old`` times the PPO clip loss: the learner's truncated importance weights
(``rl.tis_cap``, ``rl4llm.rl.losses.truncated_is_weights``) against ``sampler_logp = μ_b`` give exactly it (up to the
cap), so replayed rows simply carry their stored behaviour log-probs as ``sampler_logp``.

The buffer is a pytree of fixed-shape arrays (:class:`ReplayState`), checkpointed with the selection state.
"""

from __future__ import annotations

import flax
import numpy as np

EMPTY = -1


class ReplayState(flax.struct.PyTreeNode):
    """C slots of one group each (G completions of T tokens); ``prompt_ids == EMPTY`` marks a free slot."""

    prompt_ids: np.ndarray  # [C] int32 pool index of the slot's prompt
    hint_chars: np.ndarray  # [C] int32 characters of reference-solution hint in the prompt (0: none)
    inserted: np.ndarray  # [C] int32 insertion order (larger = newer)
    counter: np.ndarray  # [] int32 insertions so far
    completion_tokens: np.ndarray  # [C, G, T] int32
    completion_mask: np.ndarray  # [C, G, T] float32
    behaviour_logp: np.ndarray  # [C, G, T] float32 sampler log-probs μ_b
    scores: np.ndarray  # [C, G] float32 rewards


def init_replay(capacity: int, group_size: int, completion_len: int) -> ReplayState:
    """An empty buffer."""
    shape = (capacity, group_size, completion_len)
    return ReplayState(
        prompt_ids=np.full((capacity,), EMPTY, np.int32),
        hint_chars=np.zeros((capacity,), np.int32),
        inserted=np.zeros((capacity,), np.int32),
        counter=np.zeros((), np.int32),
        completion_tokens=np.zeros(shape, np.int32),
        completion_mask=np.zeros(shape, np.float32),
        behaviour_logp=np.zeros(shape, np.float32),
        scores=np.zeros(shape[:2], np.float32),
    )


def size(buf: ReplayState) -> int:
    """Groups held."""
    return int(np.sum(np.asarray(buf.prompt_ids) != EMPTY))


def insert(
    buf: ReplayState,
    prompt_ids: np.ndarray,  # [b]
    hint_chars: np.ndarray,  # [b]
    completion_tokens: np.ndarray,  # [b, G, T]
    completion_mask: np.ndarray,  # [b, G, T]
    behaviour_logp: np.ndarray,  # [b, G, T]
    scores: np.ndarray,  # [b, G]
) -> ReplayState:
    """The buffer after appending b groups in order: a group replaces its prompt's older group if held, else takes
    a free slot, else evicts the oldest group (FIFO)."""
    arrays = {k: np.array(getattr(buf, k)) for k in ReplayState.__dataclass_fields__}
    counter = int(arrays["counter"])
    ids = arrays["prompt_ids"]
    for i, pid in enumerate(np.asarray(prompt_ids).tolist()):
        same = np.flatnonzero(ids == pid)
        free = np.flatnonzero(ids == EMPTY)
        if same.size:
            slot = same[0]
        elif free.size:
            slot = free[0]
        else:
            slot = int(np.argmin(arrays["inserted"]))
        ids[slot] = pid
        arrays["hint_chars"][slot] = hint_chars[i]
        arrays["inserted"][slot] = counter
        arrays["completion_tokens"][slot] = completion_tokens[i]
        arrays["completion_mask"][slot] = completion_mask[i]
        arrays["behaviour_logp"][slot] = behaviour_logp[i]
        arrays["scores"][slot] = scores[i]
        counter += 1
    arrays["counter"] = np.asarray(counter, np.int32)
    return ReplayState(**arrays)


def sample_slots(buf: ReplayState, k: int, generator: np.random.Generator) -> np.ndarray:  # [k] int
    """``k`` distinct filled slots, uniformly at random; ValueError if fewer are held."""
    filled = np.flatnonzero(np.asarray(buf.prompt_ids) != EMPTY)
    if k > filled.size:
        raise ValueError(f"replay buffer holds {filled.size} groups < {k} requested")
    return np.sort(generator.choice(filled, size=k, replace=False)).astype(np.int32)


def num_fresh(batch_groups: int, fresh_fraction: float, buffer_size: int) -> int:
    """Fresh groups of a step: ``round(σ·B)`` once the buffer holds the ``B - round(σ·B)`` groups to replay,
    else all B (DOTS's first epoch)."""
    fresh = max(1, int(round(fresh_fraction * batch_groups)))
    return fresh if buffer_size >= batch_groups - fresh else batch_groups
