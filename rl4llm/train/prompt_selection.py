"""One RL step's training groups under `config.selection` (the selection rules are in `rl4llm.data.selection`,
`replay`, `allocation`, `curriculum`).

`Selector.collect` decides which prompts are rolled out (uniform stream, curriculum stage, refill rounds, the
DOTS / BOTS / uniform pool draw, Knapsack rollout counts; `curricula`: RLVE's and SCALER's difficulty levels,
StarPO-S's variance filter, SELF's greedy probe), calls the trainer's
`generate(prompts, answers, counts, key, prefixes) -> Rows` for each generation round, adds hinted rollouts
(`hints`: GHPO's staged, SEELE's fitted, ADHint's prior, HeRL's hindsight guidance), mixes in replayed groups, and
returns the step's training rows
(N = num_prompts x num_generations) with the updated selection state (`SelectionState`, `DifficultyState`,
`ScalerState` or None) and the step's selection metrics.
Everything it draws comes from the step key (generation) and `selection.rng(seed, step, ·)` (choices), so a resumed
run selects what the uninterrupted run would have.

Shapes stay static: every round generates the full num_prompts x num_generations rows, hint rounds a power-of-two
number of groups, and the step's rows always number N (a refill that hits the round bound is completed with
dropped groups; under `accuracy_band` their completion masks are emptied, so no loss trains on them).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import numpy as np

from rl4llm.data import allocation
from rl4llm.data import arithmetic
from rl4llm.data import curriculum
from rl4llm.data import difficulty
from rl4llm.data import partial_histories
from rl4llm.data import replay as replay_lib
from rl4llm.data import selection as selection_lib
from rl4llm.rewards import process as process_lib
from rl4llm.train import curricula
from rl4llm.train import hints
from rl4llm.train.rows import Rows, concat, take

# Stream of fold_in(step_key, ·) for generation rounds after the first (round 0 uses the step key itself, so a
# one-round step rolls out exactly what the plain trainer does); hint rounds use `hints.HINT_STREAM`.
_ROUND_STREAM = 2000
# Sub-streams of selection_lib.rng(seed, step, ·) (curricula.LEVELS = 3 draws the difficulty levels).
_CHOICE, _REPLAY, _THOMPSON = 0, 1, 2


# generate(prompts [b], answers [b], counts [b], key, prefixes [b] of the scored text[, traces [b]][, greedy=False]
# [, solutions=[b]]) -> (Rows, reward metrics); prompts of b are rolled out counts[b] times each (greedily with
# greedy=True), in order, each group followed by its off-policy traces (texts; none when traces is None); the rows
# carry their example's reference solution when `solutions` is given (Rows.solutions).
GenerateFn = Callable[[list, list, np.ndarray, jax.Array, list], tuple[Rows, dict]]
# encode(prompts [b]) -> left-padded prompt tokens [b, P] int32 and mask [b, P] bool (the trainer's encoding)
EncodeFn = Callable[[list], tuple[np.ndarray, np.ndarray]]
# decode(completion tokens [b, T], mask [b, T]) -> the completions' texts [b]
DecodeFn = Callable[[np.ndarray, np.ndarray], list]


@dataclasses.dataclass
class Collected:
    """A step's training rows and group ids [N] (groups in order, contiguous)."""

    rows: Rows
    group_ids: np.ndarray  # [N] int32
    metrics: dict


class Selector:
    """The run's prompt selection (built once per run from the config and the task)."""

    def __init__(self, config, task, *, data_offset: int, pad_id: int, encode: EncodeFn,
                 tokenize: Callable[[str], list], decode: DecodeFn):
        self.sel = config.selection
        self.seed = config.seed
        self.num_prompts = config.rl.num_prompts
        self.num_generations = config.rl.num_generations
        self.off_policy_traces = config.rl.off_policy_traces
        self.completion_len = config.sampling.max_new_tokens
        self.task = task
        self.data_offset = data_offset
        self.pad_id = pad_id
        self.encode = encode
        self.decode = decode
        self.place_hints = hints.placement(self.sel, encode, tokenize, pad_id)
        self.rubric = process_lib.RUBRICS.get(config.task.name)  # HeRL's (hint_schedule 'hindsight')
        self.method = self.sel.method
        # The pool is drawn from the training stream's step data_offset - 1 (no SFT or RL step reads it).
        self.pool = (
            selection_lib.build_pool(task.source, self.sel.pool_size, draw_step=data_offset - 1)
            if self.method in selection_lib.POOL_METHODS
            else None
        )

    # ------------------------------------------------------------------------------------------ state

    def init_state(self) -> (selection_lib.SelectionState | difficulty.DifficultyState | difficulty.ScalerState
                             | partial_histories.HistoryBuffer | None):
        """The fresh selection state: per-prompt statistics (pool methods), the difficulty controller's
        (`adaptive_difficulty`, `scaler`), ExIt's buffer of partial histories (`exit`), or None."""
        if self.method == "adaptive_difficulty":
            return difficulty.init_state(self.sel.difficulty_initial)
        if self.method == "scaler":
            return difficulty.init_scaler_state(self.sel.difficulty_initial)
        if self.method == "exit":
            return partial_histories.init_buffer(self.sel.exit_capacity, self.sel.exit_max_chars)
        if self.pool is None:
            return None
        buf = None
        if self.sel.replay_capacity:
            buf = replay_lib.init_replay(self.sel.replay_capacity, self.num_generations, self.completion_len)
        prior = self.sel.bots_prior
        return selection_lib.init_state(len(self.pool), prior_alpha=prior, prior_beta=prior, replay=buf)

    # ---------------------------------------------------------------------------------------- prompts

    def stream_examples(self, step: int, n: int) -> list:
        """`n` training examples of RL step `step` from the task's stream (the curriculum's stage when on)."""
        if self.sel.curriculum_steps:
            stage = curriculum.arithmetic_at_step(
                self.task.source.what, step,
                start_operands=self.sel.curriculum_start_operands,
                start_max_value=self.sel.curriculum_start_max_value,
                steps=self.sel.curriculum_steps,
            )
            return arithmetic.source(stage).train_examples(self.data_offset + step, n)
        return self.task.source.train_examples(self.data_offset + step, n)

    def stream_example(self, step: int, index: int):
        """Example `index` of RL step `step`'s stream (a shorter request of the stream is a prefix of a longer one)."""
        return self.stream_examples(step, index + 1)[index]

    # ---------------------------------------------------------------------------------------- collect

    def collect(self, state, step: int, key, generate: GenerateFn) -> tuple[Collected, object]:
        """The step's training rows (module docstring) and the updated selection state."""
        if self.method in selection_lib.REFILL_METHODS:
            return self._collect_refill(step, key, generate), state
        if self.method == "knapsack":
            return self._collect_knapsack(state, step, key, generate)
        if self.method == "dots" or self.method in selection_lib.POSTERIOR_METHODS:
            return self._collect_targeted(state, step, key, generate)
        if self.method in curricula.COLLECTORS:
            return curricula.COLLECTORS[self.method](self, state, step, key, generate)
        examples = self.stream_examples(step, self.num_prompts)
        rows, metrics = self.generate_groups(examples, key, generate)
        return self.finish(rows, metrics), state

    def generate_groups(self, examples, key, generate: GenerateFn) -> tuple[Rows, dict]:
        """G rollouts of each example (and their reward metrics), then hints for the all-fail groups when on. With
        `rl.off_policy_traces` = k, G − k rollouts and k copies of the example's reference solution (LUFFY)."""
        if self.sel.hints and self.sel.hint_schedule in curriculum.ROUND_RATES:
            return hints.round_groups(self.sel, self.num_generations, self.pad_id, examples, key, generate,
                                      self.place_hints)
        k = self.off_policy_traces
        counts = np.full(len(examples), self.num_generations - k)
        traces = [[e.solution] * k for e in examples] if k else None
        rows, metrics = generate([e.prompt for e in examples], [e.answer for e in examples], counts, key,
                                 [""] * len(examples), traces, solutions=[e.solution for e in examples])
        if self.sel.hints and self.sel.hint_schedule == "hindsight":
            rows, hint_metrics = hints.hindsight_groups(self.sel, self.num_generations, self.pad_id, examples, rows,
                                                        key, generate, self.place_hints, self.decode, self.rubric)
            metrics = {**metrics, **hint_metrics}
        elif self.sel.hints:  # hint_schedule 'staged'
            rows, hint_metrics = hints.staged_groups(self.sel, self.num_generations, self.pad_id, examples, rows, key,
                                                     generate, self.place_hints)
            metrics = {**metrics, **hint_metrics}
        return rows, metrics

    def _collect_refill(self, step: int, key, generate: GenerateFn) -> Collected:
        """DAPO dynamic sampling / PRIME accuracy band: rounds of B fresh prompts until B groups are kept.

        Dropped groups that complete the batch at the round bound keep their rows (static shapes) with empty
        completion masks, so nothing trains on them: PRIME trains its PRM and the policy only on groups inside the
        band (its estimators would give out-of-band groups non-zero advantages from process rewards), and DAPO's
        batch holds only groups with distinct rewards (zero-advantage rows would still count in a token-mean's
        denominator and shrink every update)."""
        b, g = self.num_prompts, self.num_generations
        # A smaller request of the stream is a prefix of a larger one: round 0 = the uniform step's prompts.
        examples = self.stream_examples(step, b * self.sel.max_gen_rounds)
        rounds, masks, metrics = [], [], {}
        for r in range(self.sel.max_gen_rounds):
            round_key = key if r == 0 else jax.random.fold_in(key, _ROUND_STREAM + r)
            rows, round_metrics = self.generate_groups(examples[r * b : (r + 1) * b], round_key, generate)
            for k, v in round_metrics.items():  # hint counts add up over rounds; reward metrics: the last round's
                metrics[k] = metrics.get(k, 0.0) + v if k.startswith("selection/") else v
            rounds.append(rows)
            if self.method == "dynamic_sampling":  # DAPO filters on accuracy (verl filter_groups.metric=acc)
                masks.append(selection_lib.keep_nonuniform_groups(rows.main.reshape(b, g)))
            else:
                masks.append(selection_lib.keep_accuracy_band(
                    np.clip(rows.main.reshape(b, g), 0, 1), self.sel.acc_low, self.sel.acc_high))
            if sum(int(m.sum()) for m in masks) >= b:
                break
        chosen, kept = selection_lib.choose_groups(masks, b)
        parts = [take(rounds[r], np.arange(i * g, (i + 1) * g)) for r, i in chosen]
        generated = concat(rounds, self.pad_id)
        metrics.update({
            "selection/gen_rounds": float(len(rounds)),
            "selection/kept_groups": float(sum(int(m.sum()) for m in masks)),
            "selection/dropped_groups": float(sum(int((~m).sum()) for m in masks)),
            "selection/filled_with_dropped": float(b - kept),
            "selection/generated_reward": float(generated.scores.mean()),
        })
        collected = self.finish(concat(parts, self.pad_id), metrics, generated=generated)
        collected.rows.completion_mask[kept * g :] = False  # chosen groups after the kept ones: dropped groups
        return collected

    def _collect_targeted(self, state, step: int, key, generate: GenerateFn) -> tuple[Collected, object]:
        """DOTS / BOTS / InSight from the pool, with rollout replay when configured."""
        b, g = self.num_prompts, self.num_generations
        buf = state.replay
        fresh_n = b if buf is None else replay_lib.num_fresh(b, self.sel.replay_fresh_fraction, replay_lib.size(buf))
        if self.method == "dots":
            p_hat = selection_lib.predicted_success(state.success)
            ids = selection_lib.softmax_sample_without_replacement(
                selection_lib.dots_scores(p_hat, self.sel.target), fresh_n, self.sel.dots_temperature,
                selection_lib.rng(self.seed, step, _CHOICE),
            )
            metrics = {"selection/predicted_success": float(p_hat[ids].mean())}
        elif self.method == "insight":
            ids = selection_lib.insight_select(state, fresh_n, selection_lib.rng(self.seed, step, _CHOICE),
                                               temperature=self.sel.bots_temperature)
            gain = selection_lib.information_gain(state.alpha[ids], state.beta[ids])
            mean = state.alpha / (state.alpha + state.beta)
            metrics = {"selection/predicted_success": float(mean[ids].mean()),
                       "selection/information_gain": float(gain.mean())}
        else:
            ids = selection_lib.bots_select(state, fresh_n, selection_lib.rng(self.seed, step, _THOMPSON),
                                            target=self.sel.target, temperature=self.sel.bots_temperature)
            mean = state.alpha / (state.alpha + state.beta)
            metrics = {"selection/predicted_success": float(mean[ids].mean())}
        examples = [self.pool[i] for i in ids]
        rows, round_metrics = self.generate_groups(examples, key, generate)
        metrics.update(round_metrics)
        # Statistics from the policy's own success on the (unhinted) prompt: a group solved only with a hint
        # still counts as a failure.
        success = np.where(rows.hint_chars.reshape(fresh_n, g).max(axis=1) > 0, 0.0,
                           np.clip(rows.main, 0, 1).reshape(fresh_n, g).mean(axis=1))
        metrics["selection/unseen_frac"] = float(np.mean(state.visits[ids] == 0))
        state = selection_lib.record_success(state, ids, success)
        if self.method in selection_lib.POSTERIOR_METHODS:
            state = selection_lib.bots_update(
                state, ids, success, g, decay=self.sel.bots_decay, implicit_weight=self.sel.bots_implicit_weight,
                prior_alpha=self.sel.bots_prior, prior_beta=self.sel.bots_prior,
            )
        parts = [rows]
        if buf is not None:
            slots = replay_lib.sample_slots(buf, b - fresh_n, selection_lib.rng(self.seed, step, _REPLAY))
            if slots.size:
                parts.append(self._replayed_rows(buf, slots, rows.components.shape[1]))
            informative = selection_lib.keep_nonuniform_groups(rows.scores.reshape(fresh_n, g))
            keep = np.flatnonzero(informative)
            shape = (fresh_n, g, -1)
            buf = replay_lib.insert(
                buf, ids[keep], rows.hint_chars.reshape(fresh_n, g)[keep, 0],
                rows.completion_tokens.reshape(shape)[keep], rows.completion_mask.reshape(shape)[keep],
                rows.logprobs.reshape(shape)[keep], rows.scores.reshape(fresh_n, g)[keep],
            )
            state = state.replace(replay=buf)
            metrics.update({"selection/replayed_groups": float(slots.size), "selection/buffer_size": float(replay_lib.size(buf))})
        metrics["selection/pool_seen_frac"] = float(np.mean(state.visits > 0))
        return self.finish(concat(parts, self.pad_id), metrics), state

    def _replayed_rows(self, buf, slots: np.ndarray, num_components: int) -> Rows:
        """Rows of replayed groups: prompts re-encoded from the pool (with their hint), stored completions,
        behaviour log-probs and rewards (reward components are not stored: NaN)."""
        g = self.num_generations
        ids, chars = np.asarray(buf.prompt_ids)[slots], np.asarray(buf.hint_chars)[slots]
        prompts = [curriculum.hinted_prompt(self.pool[i].prompt, self.pool[i].solution, c) for i, c in zip(ids, chars)]
        prompt_tokens, prompt_mask = self.encode(prompts)
        completion_mask = np.asarray(buf.completion_mask)[slots].reshape(-1, self.completion_len) > 0
        scores = np.asarray(buf.scores)[slots].reshape(-1)
        n = scores.size
        return Rows(
            prompt_tokens=np.repeat(prompt_tokens, g, axis=0),
            prompt_mask=np.repeat(prompt_mask, g, axis=0),
            completion_tokens=np.asarray(buf.completion_tokens)[slots].reshape(n, -1),
            completion_mask=completion_mask,
            logprobs=np.asarray(buf.behaviour_logp)[slots].reshape(n, -1),
            finished=completion_mask.sum(-1) < self.completion_len,
            scores=scores,
            main=np.full(n, np.nan, np.float32),
            components=np.full((n, num_components), np.nan, np.float32),
            hint_chars=np.repeat(chars, g).astype(np.int32),
            fresh=np.zeros(n, bool),
            off_policy=np.zeros(n, bool),
            hint_tokens=np.zeros(n, np.int32),
        )

    def _collect_knapsack(self, state, step: int, key, generate: GenerateFn) -> tuple[Collected, object]:
        """Knapsack RL: B prompts uniformly from the pool, the B·G rollouts allocated by success rate."""
        b, g = self.num_prompts, self.num_generations
        ids = np.sort(selection_lib.rng(self.seed, step, _CHOICE).choice(len(self.pool), size=b, replace=False))
        p = np.where(state.visits[ids] > 0, state.success[ids], -1.0)
        counts = allocation.allocate(p, b * g, default_n=g, min_n=self.sel.knapsack_min_n,
                                     max_n=self.sel.knapsack_max_n)
        examples = [self.pool[i] for i in ids]
        rows, reward_metrics = generate([e.prompt for e in examples], [e.answer for e in examples], counts, key,
                                        [""] * b, solutions=[e.solution for e in examples])
        group_ids = np.repeat(np.arange(b), counts).astype(np.int32)
        sums = np.bincount(group_ids, weights=np.clip(rows.main, 0, 1), minlength=b)
        state = selection_lib.record_success(state, ids, sums / counts)
        metrics = {
            **reward_metrics,
            "selection/rollouts_max": float(counts.max()),
            "selection/rollouts_min": float(counts.min()),
            "selection/unseen_frac": float(np.mean(p < 0)),
            "selection/pool_seen_frac": float(np.mean(state.visits > 0)),
        }
        return self.finish(rows, metrics, group_ids=group_ids), state

    # ----------------------------------------------------------------------------------------- finish

    def finish(self, rows: Rows, metrics: dict, *, generated: Rows | None = None,
                group_ids: np.ndarray | None = None) -> Collected:
        """The Collected record with the step's rollout metrics over the fresh training rows."""
        n = self.num_prompts * self.num_generations
        if group_ids is None:
            group_ids = np.repeat(np.arange(self.num_prompts), self.num_generations).astype(np.int32)
        if group_ids.size != n:
            raise AssertionError(f"selection produced {group_ids.size} rows, expected {n}")
        fresh = rows.fresh & ~rows.off_policy  # the policy's rollouts of this step
        fresh_ids = group_ids[fresh]
        correct = np.bincount(fresh_ids, weights=rows.main[fresh], minlength=self.num_prompts)
        size = np.bincount(fresh_ids, minlength=self.num_prompts)
        present = size > 0
        generated = rows if generated is None else generated
        generated = take(generated, np.flatnonzero(generated.fresh & ~generated.off_policy))  # sampled this step
        lengths = rows.completion_mask[fresh].sum(-1)
        metrics.update({
            "reward": float(rows.scores[fresh].mean()),
            "reward_std": float(rows.scores[fresh].std()),
            "response_length": float(lengths.mean()),
            "truncated_frac": float(1.0 - rows.finished[fresh].mean()),
            # solved = the main (correctness) reward, per fresh group
            "solve_none_frac": float(np.mean(correct[present] == 0)),
            "solve_all_frac": float(np.mean(correct[present] == size[present])),
            "generated_tokens": float(generated.completion_mask.sum()),
            "selection/generated_rollouts": float(generated.scores.size),
        })
        if rows.off_policy.any():  # LUFFY's traces: their reward (1 when the reference solutions are right)
            metrics["off_policy/trace_reward"] = float(rows.scores[rows.off_policy].mean())
        return Collected(rows=rows, group_ids=group_ids, metrics=metrics)
