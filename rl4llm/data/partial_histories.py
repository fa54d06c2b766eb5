"""ExIt's buffer of partial histories (Jiang, Lupu and Bachrach 2025, "Bootstrapping Task Spaces for
Self-Improvement", Exploratory Iteration).

ExIt grows its task space from the policy's own episodes: a partial history of an episode becomes a new task
instance, "continue from here", and the instances are replayed by how informative they were, the variance of the
returns of the GRPO group that was rolled out from them (learnability; for 0/1 rewards p(1 − p)):

    priority(instance) = Var_{i ≤ G}[R_i] of its latest group,    P(draw instance) ∝ priority.

A group of equal returns has zero advantage everywhere: its instance gets priority 0 and leaves the buffer, so
a zero-variance instance is never drawn. Each step, the groups whose returns vary each give one new instance: one of
their rollouts, chosen uniformly, cut after a uniformly chosen step of those it wrote (a step ends with the
task's separator; the final answer is never part of a history), inserted with its group's variance. A full buffer
replaces its lowest-priority entries by higher-priority newcomers.

Departures (single-turn, no language instruction available to a character-level task): ExIt's "improve this
solution" and self-divergence prompts and its embedding diversity bonus are not built; a resumed instance is
the problem followed by the policy's own first steps, and the policy writes the rest (its reward is the whole
solution's). ExIt replays by PLR's rank-based priorities with a replay probability; here a fixed fraction of each
step's groups comes from the buffer, drawn with probability proportional to the variance (the digest's reading).

Everything is a fixed-shape numpy pytree (:class:`HistoryBuffer`), checkpointed with the selection state: an
instance is its training example's address in the stream (RL step, index) and the history's characters as code
points.
"""

from __future__ import annotations

import dataclasses

import flax
import numpy as np

EMPTY = -1


class HistoryBuffer(flax.struct.PyTreeNode):
    """C slots of one instance each; ``stream_step == EMPTY`` marks a free slot."""

    stream_step: np.ndarray  # [C] int32 RL step whose training stream holds the instance's problem
    example_index: np.ndarray  # [C] int32 the problem's index among that step's examples
    history: np.ndarray  # [C, L] int32 code points of the partial history (the policy's first steps)
    history_len: np.ndarray  # [C] int32 characters of it
    priority: np.ndarray  # [C] float32 return variance of the instance's latest group


def init_buffer(capacity: int, max_chars: int) -> HistoryBuffer:
    """An empty buffer of `capacity` instances whose histories hold at most `max_chars` characters."""
    return HistoryBuffer(
        stream_step=np.full(capacity, EMPTY, np.int32),
        example_index=np.zeros(capacity, np.int32),
        history=np.zeros((capacity, max_chars), np.int32),
        history_len=np.zeros(capacity, np.int32),
        priority=np.zeros(capacity, np.float32),
    )


def size(buf: HistoryBuffer) -> int:
    return int(np.sum(buf.stream_step != EMPTY))


def history_text(buf: HistoryBuffer, slot: int) -> str:
    """The partial history stored in `slot`."""
    return "".join(map(chr, buf.history[slot, : buf.history_len[slot]]))


def group_variance(returns: np.ndarray) -> np.ndarray:
    """ExIt's learnability of each group: the population variance of its returns. [B, G] -> [B] float32."""
    return np.asarray(returns, np.float64).var(axis=1).astype(np.float32)


def draw(buf: HistoryBuffer, n: int, rng: np.random.Generator) -> np.ndarray:
    """Up to `n` distinct slots, drawn without replacement with probability ∝ priority among the occupied slots of
    positive priority (fewer when fewer have one)."""
    live = np.flatnonzero((buf.stream_step != EMPTY) & (buf.priority > 0))
    n = min(n, live.size)
    if n == 0:
        return np.zeros(0, np.int64)
    weights = buf.priority[live].astype(np.float64)
    return np.sort(rng.choice(live, size=n, replace=False, p=weights / weights.sum()))


def rescore(buf: HistoryBuffer, slots: np.ndarray, variances: np.ndarray) -> HistoryBuffer:
    """The instances in `slots` after their groups were rolled out again: priority := the new `variances`; an
    instance whose group had equal returns (variance 0) leaves the buffer."""
    priority, stream_step = buf.priority.copy(), buf.stream_step.copy()
    priority[slots] = variances
    stream_step[slots[np.asarray(variances) <= 0]] = EMPTY
    priority[stream_step == EMPTY] = 0.0
    return buf.replace(priority=priority, stream_step=stream_step)


def insert(buf: HistoryBuffer, instances: list[tuple[int, int, str, float]]) -> HistoryBuffer:
    """The buffer with the new `instances`, (stream step, example index, history of at most L characters, priority
    > 0), inserted in order of decreasing priority, each into a free slot, else over the lowest-priority entry if
    its own priority is higher (else it is dropped)."""
    buf = buf.replace(**{f.name: np.array(getattr(buf, f.name)) for f in dataclasses.fields(buf)})
    for i in np.argsort([-priority for *_, priority in instances], kind="stable"):
        stream_step, example_index, text, priority = instances[i]
        if len(text) > buf.history.shape[1]:
            raise ValueError(f"partial history of {len(text)} characters > the buffer's {buf.history.shape[1]} "
                             "(config.selection.exit_max_chars)")
        free = np.flatnonzero(buf.stream_step == EMPTY)
        slot = free[0] if free.size else int(np.argmin(buf.priority))
        if not free.size and buf.priority[slot] >= priority:
            continue
        buf.stream_step[slot], buf.example_index[slot] = stream_step, example_index
        buf.history[slot] = 0
        buf.history[slot, : len(text)] = [ord(c) for c in text]
        buf.history_len[slot], buf.priority[slot] = len(text), priority
    return buf


def step_ends(completion: str, separator: str) -> list[int]:
    """Lengths of the completion's prefixes that end a step: just after each `separator` (the final answer, after
    the last one, is never included)."""
    return [i + len(separator) for i in range(len(completion)) if completion.startswith(separator, i)]


def cut(history: str, completion: str, separator: str, rng: np.random.Generator) -> str | None:
    """A new partial history from a rollout: its instance's `history` followed by the rollout's `completion` up to
    the end of one of its steps, chosen uniformly; None when the completion wrote no complete step."""
    ends = step_ends(completion, separator)
    if not ends:
        return None
    return history + completion[: ends[rng.integers(len(ends))]]
