"""Sorting by repeated selection, with a worked answer: a multi-step procedural task.

A problem is ``length`` distinct-or-not integers in ``[0, max_value]``; the solution takes the smallest remaining
number at each step, writing it and what is left, then the sorted list after ``#``::

    prompt   = "sort 5 3 9 3:"
    solution = "3|5 9 3;3|5 9;5|9;9|;#3 3 5 9"
    answer   = "3 3 5 9"             # checked by rl4llm.rewards.final_text

Difficulty grows with ``length`` (more steps) and ``max_value``. Split and determinism: ``rl4llm.data.procedural``.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from rl4llm.data import procedural
from rl4llm.data.procedural import Example

ALPHABET = "sort0123456789 :|;#"
_STREAMS = (0x5071, 0x5077, 0x507C)  # train, test, corpus


@dataclasses.dataclass(frozen=True)
class SortingConfig:
    """List length uniform in [min_length, max_length], values uniform in [0, max_value]."""

    min_length: int = 3
    max_length: int = 5
    max_value: int = 9
    test_fraction: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if not 2 <= self.min_length <= self.max_length:
            raise ValueError(
                f"SortingConfig: need 2 <= min_length <= max_length, got {self.min_length}, {self.max_length}."
            )
        if self.max_value < 1:
            raise ValueError(f"SortingConfig.max_value={self.max_value}: must be >= 1.")
        if not 0.0 <= self.test_fraction < 1.0:
            raise ValueError(f"SortingConfig.test_fraction={self.test_fraction}: must be in [0, 1).")


def render(values: Sequence[int]) -> Example:
    """The :class:`Example` of sorting ``values`` by selection."""
    remaining = [int(v) for v in values]
    steps = []
    while remaining:
        smallest = min(remaining)
        remaining.remove(smallest)
        steps.append(f"{smallest}|{' '.join(map(str, remaining))};")
    answer = " ".join(map(str, sorted(int(v) for v in values)))
    return Example(prompt=f"sort {' '.join(map(str, values))}:", solution="".join(steps) + f"#{answer}", answer=answer)


def _draw(rng: np.random.Generator, cfg: SortingConfig, k: int) -> list[Example]:
    lengths = rng.integers(cfg.min_length, cfg.max_length + 1, size=k)
    values = rng.integers(0, cfg.max_value, size=(k, cfg.max_length), endpoint=True)
    return [render(values[i, :n].tolist()) for i, n in enumerate(lengths.tolist())]


def source(cfg: SortingConfig) -> procedural.ProblemSource:
    """Train / held-out / corpus streams of the task (``rl4llm.data.procedural.ProblemSource``)."""
    return procedural.ProblemSource.of(
        cfg, _draw, streams=_STREAMS, alphabet=ALPHABET, hint="enlarge max_value/max_length"
    )
