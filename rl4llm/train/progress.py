"""Console progress of a stage (SFT, RL, evaluation, export): steps done / total, rate, elapsed and ETA.

On a terminal, a live tqdm bar (`StageProgress`, `over_batches`) with the metric lines written above it; otherwise
(CI, a log file, every process but process 0) no bar, and each metric line ends with the same figures
(`[rl] step 40 | reward ... | 40/100 | 1.82 s/step | elapsed 1:13 | ETA 1:49`). absl logging stays for warnings.
"""

from __future__ import annotations

import sys
import time
from typing import Iterable

import jax
import tqdm


def live() -> bool:
    """Whether this process draws live bars: process 0, with stdout a terminal."""
    return jax.process_index() == 0 and sys.stdout.isatty()


class StageProgress:
    """Steps `start`..`total` of a stage: `advance(step)` after each, `suffix()` for a metric line, `write(line)`
    prints a line (above the bar when there is one), `close()` at the end."""

    def __init__(self, stage: str, total: int, start: int = 0):
        self.total, self.start, self.step = total, start, start
        self.t0 = time.monotonic()
        self.t_first = None  # when the first step (with its compilation) was done
        self.bar = tqdm.tqdm(total=total, initial=start, desc=stage, unit="step", file=sys.stdout,
                             disable=not live(), dynamic_ncols=True, leave=False)

    def advance(self, step: int) -> None:
        if self.t_first is None:
            self.t_first = time.monotonic()
        self.bar.update(step - self.step)
        self.step = step

    def suffix(self) -> str:
        """`40/100 | 1.82 s/step | elapsed 01:13 | ETA 01:49`: the rate over this process's steps after the first
        (which includes compiling), or of the first alone."""
        now = time.monotonic()
        done = self.step - self.start
        if done >= 2:
            rate = (now - self.t_first) / (done - 1)
        else:
            rate = (now - self.t0) / done if done else float("nan")
        eta = tqdm.tqdm.format_interval(rate * (self.total - self.step)) if done else "?"
        elapsed = now - self.t0
        return (f"{self.step}/{self.total} | {rate:.2f} s/step | elapsed {tqdm.tqdm.format_interval(elapsed)} | "
                f"ETA {eta}")

    def write(self, line: str) -> None:
        if self.bar.disable:
            print(line, flush=True)
        else:
            self.bar.write(line, file=sys.stdout)

    def close(self) -> None:
        self.bar.close()


def over_batches(iterable: Iterable, total: int, stage: str) -> Iterable:
    """`iterable` (e.g. an evaluation's generation batches) with a live bar on a terminal, as is otherwise."""
    return tqdm.tqdm(iterable, total=total, desc=stage, unit="batch", file=sys.stdout, disable=not live(),
                     dynamic_ncols=True, leave=False)
