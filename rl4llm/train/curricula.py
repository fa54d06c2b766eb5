"""Selection methods that choose a step's groups by difficulty level or by their rolled-out rewards, wired into
`prompt_selection.Selector.collect` through `COLLECTORS` (method name -> collector; the rules are the pure functions
of `rl4llm.data.difficulty` and `rl4llm.data.selection`).

* `adaptive_difficulty` (RLVE): each prompt's level drawn from the controller's window, then the controller counts
  the samples at its upper level.
* `scaler` (SCALER): levels floor(d) / ceil(d) of a continuous difficulty d, which moves toward 50 % accuracy.
* `std_filter` (StarPO-S, RAGEN): num_prompts / ratio groups rolled out, the num_prompts of largest within-group
  reward std trained on, the rest dropped.
* `low_likelihood` (SELF): one greedy completion per prompt, and the prompts it gets wrong rolled out.
* `prof` (PROF): n' = `prof_rollouts` rollouts per prompt, num_generations kept by the process judge's consistency
  filter (`rewards.process.prof_kept`).
* `exit` (ExIt): a fraction of the groups resume partial histories of the policy's own solutions from a buffer
  prioritised by their groups' return variance (`rl4llm.data.partial_histories`).

A collector is `collect(selector, state, step, key, generate) -> (Collected, new state)`; it draws its choices from
`selection.rng(seed, step, ·)` and the step key, so a resumed run collects what the uninterrupted run would have.
"""

from __future__ import annotations

import jax
import numpy as np

from rl4llm.data import difficulty
from rl4llm.data import partial_histories
from rl4llm.data import selection as selection_lib
from rl4llm.rewards import process
from rl4llm.train.rows import take

LEVELS = 3  # the sub-stream of selection_lib.rng(seed, step, ·) that draws difficulty levels
_PROBE_STREAM = 4000  # fold_in(step key, ·) of SELF's greedy probe rounds
EXIT_DRAW, EXIT_GROW = 4, 5  # sub-streams of selection_lib.rng(seed, step, ·): ExIt's replayed and new instances


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


def collect_low_likelihood(selector, state, step: int, key, generate):
    """SELF: rounds of num_prompts fresh stream prompts (round 0: the uniform step's), one greedy completion each;
    the prompts whose greedy completion is wrong (`selection.keep_greedy_failures`, on the main reward) are kept,
    until num_prompts are or `max_gen_rounds` rounds were probed (`selection.choose_groups`), then G rollouts of
    each. The official code trains on the smaller batch when fewer were kept; shapes are static here, so the batch is
    completed with greedy-solved prompts whose completion masks are emptied (no loss trains on them)."""
    b, g = selector.num_prompts, selector.num_generations
    examples = selector.stream_examples(step, b * selector.sel.max_gen_rounds)
    masks = []
    for r in range(selector.sel.max_gen_rounds):
        batch = examples[r * b : (r + 1) * b]
        probe, _ = generate([e.prompt for e in batch], [e.answer for e in batch], np.ones(b, int),
                            jax.random.fold_in(key, _PROBE_STREAM + r), [""] * b, greedy=True)
        masks.append(selection_lib.keep_greedy_failures(probe.main))
        if sum(int(m.sum()) for m in masks) >= b:
            break
    chosen, kept = selection_lib.choose_groups(masks, b)
    rows, metrics = selector.generate_groups([examples[r * b + i] for r, i in chosen], key, generate)
    metrics.update({
        "selection/probe_rounds": float(len(masks)),
        "selection/greedy_solved_frac": float(1.0 - np.concatenate(masks).mean()),
        "selection/kept_groups": float(kept),
        "selection/filled_with_dropped": float(b - kept),
    })
    collected = selector.finish(rows, metrics)
    mask = collected.rows.completion_mask.copy()  # the sampler's host arrays are read-only
    mask[kept * g :] = False  # the greedy-solved prompts that only complete the batch
    collected.rows.completion_mask = mask
    return collected, state


def collect_prof(selector, state, step: int, key, generate):
    """PROF: the uniform step's prompts, n' = `selection.prof_rollouts` rollouts each, and in each group the G =
    num_generations kept by `process.prof_kept` (the correct ones of highest and the wrong ones of lowest process
    score, `Rows.process_scores` from `config.task.flaw_judge`, as balanced as the counts allow); the advantages are
    then the kept groups'. Logs `selection/prof_generated_accuracy` and `selection/prof_kept_accuracy` (main reward
    before / after), `selection/prof_balance_gain` (the groups' mean |accuracy − ½| before minus after), and the mean
    process score of the correct rollouts before / after
    (`selection/prof_correct_score_generated`, `selection/prof_correct_score_kept`; 0 when a step has none).
    `selection.prof_balance_only` (an ablation) keeps the same counts of each side in sampled order (the samples are
    i.i.d., so a random choice), separating PROF's balancing from its process filtering."""
    b, g, n = selector.num_prompts, selector.num_generations, selector.sel.prof_rollouts
    examples = selector.stream_examples(step, b)
    rows, metrics = generate([e.prompt for e in examples], [e.answer for e in examples], np.full(b, n), key,
                             [""] * b, solutions=[e.solution for e in examples])
    correct = rows.main >= 1.0
    order = np.zeros(b * n) if selector.sel.prof_balance_only else rows.process_scores  # zeros: sampled order
    groups = [slice(i * n, (i + 1) * n) for i in range(b)]
    kept = np.concatenate([i * n + process.prof_kept(correct[group], order[group], g)
                           for i, group in enumerate(groups)])

    def correct_score(idx):
        right = idx[correct[idx]]
        return float(rows.process_scores[right].mean()) if right.size else 0.0

    metrics.update({
        "selection/prof_generated_accuracy": float(correct.mean()),
        "selection/prof_kept_accuracy": float(correct[kept].mean()),
        # how much closer to half right the kept groups are than the sampled ones (the filter's balancing acting)
        "selection/prof_balance_gain": float(np.mean(np.abs(correct.reshape(b, n).mean(1) - 0.5))
                                             - np.mean(np.abs(correct[kept].reshape(b, g).mean(1) - 0.5))),
        "selection/prof_correct_score_generated": correct_score(np.arange(b * n)),
        "selection/prof_correct_score_kept": correct_score(kept),
    })
    return selector.finish(take(rows, kept), metrics, generated=rows), state


def collect_exit(selector, buf: partial_histories.HistoryBuffer, step: int, key, generate):
    """ExIt: round(`exit_resume_fraction` · B) groups resume instances drawn from the buffer (∝ priority; fewer
    while it holds fewer of positive priority), the rest are the step's first stream prompts. A resumed instance's
    prompt is its problem followed by its partial history, which is also scored before the completion (the reward
    reads the whole solution) and stays in the trained prompt, so the update is on-policy for the longer prompt.
    Then each replayed instance takes its group's return variance as priority (0: it leaves), and every group of
    varying returns gives a new instance (`partial_histories.cut` of one of its rollouts, at most `exit_max_chars`
    characters). Logs `selection/exit_resumed_groups`, `exit_new_instances`, `exit_buffer_size`,
    `exit_buffer_priority` (mean over the buffer), and over the resumed groups, when there are some,
    `exit_resumed_reward` and `exit_history_chars`."""
    sel, b, g = selector.sel, selector.num_prompts, selector.num_generations
    slots = partial_histories.draw(buf, int(round(sel.exit_resume_fraction * b)),
                                   selection_lib.rng(selector.seed, step, EXIT_DRAW))
    fresh = b - slots.size
    addresses = [(step, i) for i in range(fresh)] + [(int(buf.stream_step[s]), int(buf.example_index[s]))
                                                     for s in slots]
    examples = selector.stream_examples(step, fresh) + [selector.stream_example(*a) for a in addresses[fresh:]]
    histories = [""] * fresh + [partial_histories.history_text(buf, s) for s in slots]
    rows, metrics = generate([e.prompt + h for e, h in zip(examples, histories)], [e.answer for e in examples],
                             np.full(b, g), key, histories, solutions=[e.solution for e in examples])
    variance = partial_histories.group_variance(rows.scores.reshape(b, g))
    buf = partial_histories.rescore(buf, slots, variance[fresh:])
    rng = selection_lib.rng(selector.seed, step, EXIT_GROW)
    texts = selector.decode(rows.completion_tokens, rows.completion_mask)
    new = []  # (stream step, example index, history, priority) of the new instances
    for i in np.flatnonzero(variance > 0):
        history = partial_histories.cut(histories[i], texts[i * g + rng.integers(g)], sel.exit_separator, rng)
        if history is not None and len(history) <= sel.exit_max_chars:
            new.append((*addresses[i], history, float(variance[i])))
    buf = partial_histories.insert(buf, new)
    live = buf.stream_step != partial_histories.EMPTY
    metrics.update({
        "selection/exit_resumed_groups": float(slots.size),
        "selection/exit_new_instances": float(len(new)),
        "selection/exit_buffer_size": float(live.sum()),
        "selection/exit_buffer_priority": float(buf.priority[live].mean()) if live.any() else 0.0,
    })
    if slots.size:
        metrics["selection/exit_resumed_reward"] = float(rows.scores[fresh * g :].mean())
        metrics["selection/exit_history_chars"] = float(np.mean([len(h) for h in histories[fresh:]]))
    return selector.finish(rows, metrics), buf


COLLECTORS = {"adaptive_difficulty": collect_adaptive, "scaler": collect_scaler, "std_filter": collect_std_filter,
              "low_likelihood": collect_low_likelihood, "prof": collect_prof, "exit": collect_exit}
