"""Selection methods that choose a step's groups by difficulty level or by their rolled-out rewards, wired into
`prompt_selection.Selector.collect` through `COLLECTORS` (method name -> collector; the rules are the pure functions
of `rl4llm.data.difficulty` and `rl4llm.data.selection`).

* `adaptive_difficulty` (RLVE): each prompt's level drawn from the controller's window, then the controller counts
  the samples at its upper level.
* `scaler` (SCALER): levels floor(d) / ceil(d) of a continuous difficulty d, which moves toward 50 % accuracy.
* `std_filter` (StarPO-S, RAGEN): num_prompts / ratio groups rolled out, the num_prompts of largest within-group
  reward std trained on, the rest dropped.

A collector is `collect(selector, state, step, key, generate) -> (Collected, new state)`; it draws its choices from
`selection.rng(seed, step, ·)` and the step key, so a resumed run collects what the uninterrupted run would have.
"""

from __future__ import annotations

import numpy as np

from rl4llm.data import difficulty
from rl4llm.data import selection as selection_lib
from rl4llm.train.rows import take

LEVELS = 3  # the sub-stream of selection_lib.rng(seed, step, ·) that draws difficulty levels


def _rollout_levels(selector, levels: np.ndarray, step: int, key, generate):
    """One problem of the task's ladder per level [B] (`difficulty.examples_at_levels`), G rollouts each. -> (rows,
    metrics, correctness [N] in [0, 1]; a sample solved only with a hint counts as a failure)."""
    examples = difficulty.examples_at_levels(selector.task.name, selector.task.source.what, levels,
                                             selector.data_offset + step)
    rows, metrics = selector.generate_groups(examples, key, generate)
    metrics["selection/difficulty_mean"] = float(levels.mean())
    return rows, metrics, np.where(rows.hint_chars > 0, 0.0, np.clip(rows.main, 0, 1))


def collect_adaptive(selector, state, step: int, key, generate):
    """RLVE: each prompt's level drawn from the controller's window, then the controller counts the samples at its
    upper level (`difficulty.update`)."""
    sel, g = selector.sel, selector.num_generations
    levels = difficulty.draw_levels(state, selector.num_prompts, sel.difficulty_window,
                                    selection_lib.rng(selector.seed, step, LEVELS))
    rows, metrics, correct = _rollout_levels(selector, levels, step, key, generate)
    state, check = difficulty.update(state, np.repeat(levels, g), correct,
                                     min_samples=sel.difficulty_min_prompts * g,
                                     threshold=sel.difficulty_threshold, max_level=sel.difficulty_max)
    metrics.update({"selection/difficulty_upper": float(state.upper), **check})
    return selector.finish(rows, metrics), state


def collect_scaler(selector, state, step: int, key, generate):
    """SCALER: the prompts' levels floor(d) / ceil(d) in proportion (`difficulty.scaler_levels`), then d moves by
    the batch accuracy's distance to the target (`difficulty.scaler_update`)."""
    sel = selector.sel
    levels = difficulty.scaler_levels(float(state.level), selector.num_prompts,
                                      selection_lib.rng(selector.seed, step, LEVELS))
    rows, metrics, correct = _rollout_levels(selector, levels, step, key, generate)
    state, moved = difficulty.scaler_update(state, correct, target=sel.scaler_target, gain=sel.scaler_gain,
                                            step_cap=sel.scaler_step_cap, max_level=sel.difficulty_max)
    metrics.update(moved)
    return selector.finish(rows, metrics), state


def collect_std_filter(selector, state, step: int, key, generate):
    """StarPO-S: the stream's first M = num_prompts / ratio prompts of the step (its first num_prompts are the
    uniform step's), G rollouts each, and the num_prompts groups of largest reward std (`selection.top_std_groups`
    on the trained scores, RAGEN's summed episode reward) kept in order; the dropped groups are not trained on.
    Logs `selection/kept_frac` (num_prompts / M), `selection/dropped_groups`, and the mean group std of all and of
    the kept groups (`selection/in_group_std`, `selection/chosen_in_group_std`; RAGEN's rollout/ metrics)."""
    b, g = selector.num_prompts, selector.num_generations
    rolled = int(round(b / selector.sel.std_filter_ratio))
    rows, metrics = selector.generate_groups(selector.stream_examples(step, rolled), key, generate)
    scores = rows.scores.reshape(rolled, g)
    kept = selection_lib.top_std_groups(scores, b)
    std = scores.astype(np.float64).std(axis=1, ddof=1)
    metrics.update({
        "selection/kept_frac": b / rolled,
        "selection/dropped_groups": float(rolled - b),
        "selection/in_group_std": float(std.mean()),
        "selection/chosen_in_group_std": float(std[kept].mean()),
    })
    chosen = take(rows, (kept[:, None] * g + np.arange(g)).reshape(-1))
    return selector.finish(chosen, metrics, generated=rows), state


COLLECTORS = {"adaptive_difficulty": collect_adaptive, "scaler": collect_scaler, "std_filter": collect_std_filter}
