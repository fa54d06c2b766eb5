"""Adaptive difficulty over the procedural tasks: RLVE's controller (Zeng et al. 2025, "RLVE: Scaling Up RL with
Adaptive Verifiable Environments"; digest multi_turn_agents.md 4.31).

Each task has a ladder of difficulty levels d = 0, 1, 2, ... (:data:`LADDERS`: level -> the task config of that
level). The controller keeps an upper level h:

* a problem's level is drawn uniformly from the window ``{max(0, h - w + 1), ..., h}`` (w = ``window``, 4);
* only samples at level h count: their correct / total are accumulated; once at least ``min_samples`` have been
  seen (RLVE: ``min_prompts_before_difficulty_check`` (8) x ``n_samples_per_prompt`` (16)), h rises by one if their
  accuracy is at least ``threshold`` (0.9), and the counters are reset either way.

This follows the official code (`tinker_cookbook/recipes/rlve/procgen_env.py`, ``RLVEManager``): the check runs
after a whole batch is counted, and the counters reset whether or not h rose. Departures: h stops at
``max_level`` (RLVE's ladders are unbounded; ours are bounded by the response budget), and a level's problems are
the task's own generator at that level's parameters (RLVE samples one parameter set from a level's list; each of
our levels has one).

SCALER's controller (Xu et al. 2026, "SCALER: Synthetic Scalable Adaptive Learning Environment for Reasoning";
digest rewards_and_data_efficiency.md 7.8) is its sibling on the same ladders: a continuous difficulty d, problems
at ``floor(d)`` and ``ceil(d)`` in proportion (:func:`scaler_levels`), and after each step
``d ← clip(d + clip(k·(acc - target), ±cap), 0, max_level)`` (:func:`scaler_update`). The digest had only the
abstract and reconstructed a "target band" with thresholds; we follow the official code instead
(molumolua/SCALER ``recipe/environment/difficulty_control.py``, ``DifficultyControl``, with the per-environment
settings of ``SCALER/set_max_difficulty_and_process_train_data.py``): target 0.5, k = 2, cap 1, d_min = 0, d_0 = 0,
``activate_function="base"`` (the error is the batch's mean correctness minus the target, every sample counted).
Not here: SCALER's environment curation (an active set of environments, retired after K_zero / K_sat steps at zero
accuracy / the top level or a non-rising difficulty): a run here trains one task, one environment.

The states are host numpy (:class:`DifficultyState`, :class:`ScalerState`), carried and checkpointed as the run's
selection state.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import flax
import numpy as np

from rl4llm.data import arithmetic
from rl4llm.data import countdown
from rl4llm.data import sorting


class DifficultyState(flax.struct.PyTreeNode):
    """upper: [] int32, the level h; frontier_correct: [] float32 and frontier_samples: [] int32, the correct
    answers and samples at level h since the last check."""

    upper: np.ndarray
    frontier_correct: np.ndarray
    frontier_samples: np.ndarray


def init_state(initial_level: int = 0) -> DifficultyState:
    """RLVE's initial state: h = ``initial_level`` (RLVE: 0), no samples counted."""
    return DifficultyState(np.asarray(initial_level, np.int32), np.asarray(0.0, np.float32), np.asarray(0, np.int32))


def window(upper: int, size: int) -> np.ndarray:
    """The levels problems are drawn from: ``{max(0, upper - size + 1), ..., upper}`` (RLVE's sliding window)."""
    return np.arange(max(0, upper - size + 1), upper + 1)


def draw_levels(state: DifficultyState, n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """[n] int levels, each uniform over :func:`window` (RLVE draws one per problem)."""
    return rng.choice(window(int(state.upper), size), size=n).astype(np.int32)


def update(
    state: DifficultyState, levels: np.ndarray, correct: np.ndarray, *, min_samples: int, threshold: float,
    max_level: int,
) -> tuple[DifficultyState, dict]:
    """Counts the samples (levels [N], correctness [N] in [0, 1]) at level h, then checks (module docstring).
    -> (state, metrics: ``selection/frontier_accuracy`` when a check ran, ``selection/difficulty_raised`` 1.0 when h
    rose, else 0.0)."""
    levels, correct = np.asarray(levels), np.asarray(correct, np.float64)
    upper = int(state.upper)
    if np.any(levels > upper):
        raise ValueError(f"a sample's level {int(levels.max())} is above the controller's upper level {upper}")
    at_frontier = levels == upper
    total = float(state.frontier_correct) + float(correct[at_frontier].sum())
    samples = int(state.frontier_samples) + int(at_frontier.sum())
    metrics = {"selection/difficulty_raised": 0.0}
    if samples >= min_samples:
        accuracy = total / samples
        metrics["selection/frontier_accuracy"] = accuracy
        if accuracy >= threshold and upper < max_level:
            upper, metrics["selection/difficulty_raised"] = upper + 1, 1.0
        total, samples = 0.0, 0
    return DifficultyState(np.asarray(upper, np.int32), np.asarray(total, np.float32),
                           np.asarray(samples, np.int32)), metrics


class ScalerState(flax.struct.PyTreeNode):
    """level: [] float32, SCALER's continuous difficulty d (float32 as every selection state; the official code's
    is a Python float, so where ``n·(d - floor d)`` is a half the proportion may round the other way)."""

    level: np.ndarray


def init_scaler_state(initial_level: float = 0.0) -> ScalerState:
    """SCALER's initial state: d = ``initial_level`` (SCALER: 0)."""
    return ScalerState(np.asarray(initial_level, np.float32))


def scaler_levels(level: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """[n] int levels for continuous difficulty d (official ``propose_distances``): ``round(n·(d - floor d))`` at
    ``ceil d``, the rest at ``floor d``, in random order (Python's round: halves to even)."""
    low, high = int(np.floor(level)), int(np.ceil(level))
    num_high = round(n * (level - low))
    return rng.permutation(np.array([high] * num_high + [low] * (n - num_high), np.int32))


def scaler_update(
    state: ScalerState, correct: np.ndarray, *, target: float, gain: float, step_cap: float, max_level: int,
) -> tuple[ScalerState, dict]:
    """SCALER's step (official ``DifficultyControl.update``, ``activate_function="base"``): with ``acc`` the mean
    correctness of the batch's samples [N] in [0, 1], ``Δ = clip(gain·(acc - target), -step_cap, step_cap)`` and
    ``d ← clip(d + Δ, 0, max_level)``. -> (state, metrics: ``selection/difficulty_level`` (the new d),
    ``selection/difficulty_step`` (Δ), ``selection/batch_accuracy`` (acc))."""
    accuracy = float(np.mean(np.asarray(correct, np.float64)))
    step = float(np.clip(gain * (accuracy - target), -step_cap, step_cap))
    level = float(np.clip(float(state.level) + step, 0.0, max_level))
    metrics = {"selection/difficulty_level": level, "selection/difficulty_step": step,
               "selection/batch_accuracy": accuracy}
    return ScalerState(np.asarray(level, np.float32)), metrics


@dataclasses.dataclass(frozen=True)
class Ladder:
    """A task's difficulty levels: ``at_level(task_config, d)`` is the task config of level d (every field but
    the level's parameters kept), ``source(config)`` its problem source."""

    at_level: Callable[[object, int], object]
    source: Callable[[object], object]
    what: str  # what grows with the level, for the docs and errors


def _arithmetic_at_level(cfg: arithmetic.ArithmeticConfig, level: int) -> arithmetic.ArithmeticConfig:
    return dataclasses.replace(cfg, min_operands=2 + level, max_operands=2 + level)


def _sorting_at_level(cfg: sorting.SortingConfig, level: int) -> sorting.SortingConfig:
    return dataclasses.replace(cfg, min_length=2 + level, max_length=2 + level)


def _countdown_at_level(cfg: countdown.CountdownConfig, level: int) -> countdown.CountdownConfig:
    return dataclasses.replace(cfg, min_numbers=2 + level, max_numbers=2 + level)


# task name -> its ladder; level d has 2 + d operands / list items / numbers, the task's other fields as configured.
LADDERS = {
    "arithmetic": Ladder(_arithmetic_at_level, arithmetic.source, "operands = 2 + level"),
    "sorting": Ladder(_sorting_at_level, sorting.source, "list length = 2 + level"),
    "countdown": Ladder(_countdown_at_level, countdown.source, "numbers = 2 + level"),
}


def examples_at_levels(task_name: str, task_config, levels: np.ndarray, stream_step: int) -> list:
    """One training example of the stream's step `stream_step` per entry of `levels` [n], each drawn from its level
    of task `task_name`'s ladder (`task_config` at that level), in order."""
    ladder = LADDERS[task_name]
    examples = [None] * len(levels)
    for level in np.unique(levels):
        at = np.flatnonzero(levels == level)
        source = ladder.source(ladder.at_level(task_config, int(level)))
        for i, example in zip(at, source.train_examples(stream_step, at.size)):
            examples[i] = example
    return examples
