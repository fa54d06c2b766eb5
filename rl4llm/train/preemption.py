"""Stopping a run cleanly when it is preempted (SIGTERM) or interrupted (SIGINT, Ctrl-C).

Spot / preemptible Cloud TPU VMs, GKE and SLURM stop a job with SIGTERM and a grace period. Within `StopSignal`:

* one process: the first SIGTERM or SIGINT only sets a flag (and says so on stderr). The stage's loop finishes the
  step it is in, writes a checkpoint of that step and raises `Preempted`; the binary prints where to resume and
  exits 0. Running the same command again resumes from that checkpoint exactly as the uninterrupted run would have
  gone on (every random draw and batch of a step is a pure function of the step). A second signal aborts at once
  (the signal's default action: exit 143 for SIGTERM, 130 for SIGINT).
* several processes (`jax.distributed`): every process must save at the same step. JAX's preemption service
  (started by `jax.distributed.initialize`) receives the cluster's notice on any host and the processes agree on
  the step to stop at: `multihost_utils.reached_preemption_sync_point(step)`, called by every process at every
  step (as MaxText and Orbax do). No Python handler is installed there, so the service's own one stays in place.

The scoring worker processes ignore SIGINT (`rewards.pool`), so a Ctrl-C at a terminal, which reaches the whole
process group, lets the step being finished score its batch.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import jax
from jax.experimental import multihost_utils

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(Exception):
    """The run stopped on a signal after writing the checkpoint of `step` of `stage` (in `directory`)."""

    def __init__(self, stage: str, step: int, directory: str):
        super().__init__(f"stopped on a signal after {stage.upper()} step {step}; its checkpoint is in {directory}. "
                         "Run the same command again to resume from it.")
        self.stage, self.step, self.directory = stage, step, directory


class StopSignal:
    """Context manager turning SIGTERM / SIGINT into a request to stop after the current step (module docstring).
    `should_stop(step)`, called once per step by every process, says whether to save and stop after `step`."""

    def __init__(self):
        self.received: int | None = None  # the first signal's number
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopSignal":
        if jax.process_count() == 1 and threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def _handle(self, signum: int, frame) -> None:
        del frame
        if self.received is not None:  # the second signal: abort now, as without this handler
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.received = signum
        print(f"received {signal.Signals(signum).name}: finishing the current step, then writing a checkpoint "
              "(send it again to abort at once)", file=sys.stderr, flush=True)

    def should_stop(self, step: int) -> bool:
        """Whether to checkpoint `step` and stop: this process got a signal (one process), or all processes
        reached JAX's preemption sync point at `step` (several)."""
        if jax.process_count() > 1:
            return multihost_utils.reached_preemption_sync_point(step)
        return self.received is not None
