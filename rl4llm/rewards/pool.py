"""Host-side batched scoring in a process pool with a hard per-call timeout.

``BatchScorer(reward_fn, num_workers, timeout_s).score(completions, answers)`` scores one step's batch with
``reward_fn(completion, answer) -> float`` (a module-level function, e.g. ``rl4llm.rewards.get_reward(name)``;
it is pickled by reference): each (completion, answer) is one call in a ``pebble.ProcessPool`` of
``spawn``-started workers (never forked from the JAX process). A call that runs past
``timeout_s`` has its worker killed and replaced; a call that raises, or whose worker dies (segfault, OOM kill,
``os._exit``), or returns a non-finite value, is retried nowhere: every such completion scores 0.0 and is counted
in the returned metrics (``reward/timeouts``, ``reward/errors``), so a bad scorer never kills the run. A pool that
breaks as a whole is rebuilt before the next batch.

``num_workers=0`` scores inline in the calling process (no pool, no hard timeout; exceptions still score 0 and
are counted): for cheap pure rewards, and the one way to debug a reward with a debugger.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import math
import signal
from typing import Callable, Sequence

import numpy as np
import pebble


def _ignore_sigint() -> None:
    """Worker initializer: a Ctrl-C at a terminal reaches the whole process group; the trainer decides what it
    means (finish the step, checkpoint, stop: `train.preemption`), so the workers keep scoring."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _score_one(reward_fn: Callable[[str, str], float], completion: str, answer: str) -> float:
    """One reward call; a non-finite or non-numeric result is an error."""
    value = float(reward_fn(completion, answer))
    if not math.isfinite(value):
        raise ValueError(f"reward returned {value}")
    return value


class BatchScorer:
    """Scores batches with ``reward_fn``: in ``num_workers`` processes (0: inline), ``timeout_s`` per call."""

    def __init__(self, reward_fn: Callable[[str, str], float], *, num_workers: int = 2, timeout_s: float = 30.0):
        if num_workers < 0 or timeout_s <= 0:
            raise ValueError(f"BatchScorer: num_workers={num_workers} must be >= 0, timeout_s={timeout_s} > 0")
        self.reward_fn = reward_fn
        self.num_workers = num_workers
        self.timeout_s = timeout_s
        self._pool: pebble.ProcessPool | None = None

    def _get_pool(self) -> pebble.ProcessPool:
        if self._pool is None or not self._pool.active:
            self._pool = pebble.ProcessPool(
                max_workers=self.num_workers, context=multiprocessing.get_context("spawn"), initializer=_ignore_sigint
            )
        return self._pool

    def score_one(self, completion: str, answer: str) -> float:
        """One completion, inline and exception-safe (0.0 on any error). For per-item callers (evaluation)."""
        try:
            return _score_one(self.reward_fn, completion, answer)
        except Exception:  # a reward bug or a hostile input must not end the run
            return 0.0

    def score(self, completions: Sequence[str], answers: Sequence[str]) -> tuple[np.ndarray, dict[str, float]]:
        """Rewards [N] (float32) of the batch and {"reward/timeouts", "reward/errors"} counts."""
        if len(completions) != len(answers):
            raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
        scores = np.zeros(len(completions), np.float32)
        timeouts = errors = 0
        if self.num_workers == 0:
            for i, (c, a) in enumerate(zip(completions, answers)):
                try:
                    scores[i] = _score_one(self.reward_fn, c, a)
                except Exception:
                    errors += 1
            return scores, {"reward/timeouts": 0.0, "reward/errors": float(errors)}
        pool = self._get_pool()
        futures = [
            pool.schedule(_score_one, (self.reward_fn, c, a), timeout=self.timeout_s)
            for c, a in zip(completions, answers)
        ]
        for i, future in enumerate(futures):
            try:
                scores[i] = future.result()
            except concurrent.futures.TimeoutError:
                timeouts += 1
            except Exception:  # raised in the reward, worker died (pebble.ProcessExpired), or the pool broke
                errors += 1
        return scores, {"reward/timeouts": float(timeouts), "reward/errors": float(errors)}

    def close(self) -> None:
        """Stops the workers (idempotent)."""
        if self._pool is not None:
            self._pool.stop()
            self._pool.join()
            self._pool = None

    def __enter__(self) -> "BatchScorer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
