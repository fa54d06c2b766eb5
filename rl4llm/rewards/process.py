"""Process judges and FAPO's flawed-positive penalty.

A *process judge* reads a response's reasoning, not only its final answer: ``judge(prompt, completion) -> list[bool]``
labels each segment (the steps, then the final answer) sound or not, never raising on any completion; the first
unsound one is the response's *first flaw* (`first_flaws`). `JUDGES` holds them by name (``config.task.flaw_judge``);
the arithmetic task's is exact (``rewards.arithmetic.step_labels``). Step-level rewards from the labels (TP-GRPO's
thoughts, PRM Clip / Delta) are `rl4llm.rl.process`'s.

FAPO (Ding et al. 2025, "Flawed-Aware Policy Optimization for Efficient and Reliable Reasoning") penalises *flawed
positives*, responses whose final answer the verifier accepts but whose reasoning a judge (FAPO: a generative reward
model) flags:

    R_FAPO(o) = R_RLVR(o) + R_Δ(o),   R_Δ(o) = −λ · 1[o is a flawed positive],

with λ = 1 on outcome rewards in {−1, +1}, so a flawed positive scores 0: half-way. On this library's {0, 1} rewards
the same half-way point is a penalty of 0.5 (``config.task.flaw_penalty``; group-normalised advantages do not change
under an affine map of the rewards). Under GRPO's group normalisation a flawed positive's advantage then has the sign
of (wrong − fully correct) in its group: positive while wrong answers outnumber sound ones (FAPO's warm-up: it still
learns from the right answer) and negative once sound answers dominate (refinement: it learns to drop the flaw),
without a schedule (`fapo_rewards`).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from rl4llm.rewards import arithmetic

Judge = Callable[[str, str], list[bool]]

JUDGES: dict[str, Judge] = {
    "arithmetic_steps": arithmetic.step_labels,  # exact: each step's operands, operator and result
}
# The task whose prompts a judge reads (`config.task.name`).
JUDGE_TASKS = {"arithmetic_steps": "arithmetic"}
# A task's rubric (`config.task.name`; HeRL's hindsight guidance, `rl4llm.train.hints.hindsight_groups`):
# items(prompt) -> the items' texts [K], and scores(prompt, completion, answer) -> whether it meets each [K].
Rubric = tuple[Callable[[str], list], Callable[[str, str, str], list]]
RUBRICS: dict[str, Rubric] = {"arithmetic": (arithmetic.rubric_items, arithmetic.rubric_scores)}


def first_flaws(labels: Sequence[Sequence[bool]]) -> np.ndarray:
    """[N] int: the first unsound segment of each response's judge labels, -1 where none."""
    return np.array([list(ls).index(False) if False in ls else -1 for ls in labels], np.int64)


def token_char_ends(decode: Callable[[Sequence[int]], str], ids: Sequence[int]) -> np.ndarray:
    """[n] int: the length of the text of tokens ``ids[:i + 1]``, for each i (``decode``: the tokenizer's), so token i
    holds the characters [ends[i-1], ends[i]) of the decoded completion. Made non-decreasing: a token that decodes to
    nothing on its own (part of a multi-byte character) holds no character."""
    return np.maximum.accumulate([len(decode(ids[: i + 1])) for i in range(len(ids))]) if len(ids) else np.zeros(0, int)


def step_layout(decode: Callable[[Sequence[int]], str], labels: Sequence[Sequence[bool]], texts: Sequence[str],
                prefix_chars: Sequence[int], completion_tokens: np.ndarray, completion_mask: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """A judge's segment labels placed on the completions' tokens: (step_scores [N, T] float32, step_ends [N, T] bool),
    where step_ends marks the token that holds each segment's last character (its ``;``, or the completion's last
    token for the final segment) and step_scores is that segment's label (1 sound, 0 not), 0 off the ends.

    ``texts[i]`` is what the judge read: ``prefix_chars[i]`` characters scored before the completion (a hint the
    prompt holds), then the decoded completion; segments that end inside the prefix have no token and are left out.
    Segments that end in the same token (an empty final segment after a last ``;``) leave the later one's label."""
    n, width = completion_tokens.shape
    scores, ends = np.zeros((n, width), np.float32), np.zeros((n, width), bool)
    for i, (row_labels, text, prefix) in enumerate(zip(labels, texts, prefix_chars)):
        valid = int(completion_mask[i].sum())
        if valid == 0:
            continue
        char_ends = token_char_ends(decode, completion_tokens[i, :valid].tolist())
        segment_ends = [k + 1 for k, ch in enumerate(text) if ch == ";"][: len(row_labels) - 1] + [len(text)]
        for label, end in zip(row_labels, segment_ends):
            if end - prefix <= 0:
                continue
            t = min(int(np.searchsorted(char_ends, end - prefix)), valid - 1)
            scores[i, t], ends[i, t] = float(label), True
    return scores, ends


def sound_prefix(first_flaws: np.ndarray, num_steps: np.ndarray) -> np.ndarray:
    """[N] float in [0, 1]: the share of each response's steps before its first flawed one, 1 when sound — the process
    score of a response under a judge that names only the first flaw (PROF averages a PRM's step scores instead).
    `num_steps` [N]: each response's segments (steps and final answer), >= 1."""
    steps = np.maximum(np.asarray(num_steps, np.float64), 1.0)
    return np.where(first_flaws < 0, 1.0, np.minimum(first_flaws, steps) / steps).astype(np.float32)


def prof_kept(correct: np.ndarray, process_scores: np.ndarray, keep: int) -> np.ndarray:
    """PROF's consistency filter (Ye et al. 2025, "Beyond Correctness: Harmonizing Process and Outcome Rewards through
    RL Training") on one prompt's n' > `keep` responses: the indices (ascending) of the `keep` it trains on.

    Kept correct k_c = clip(⌈keep/2⌉, keep − #wrong, #correct), kept wrong k_w = keep − k_c: as balanced between right
    and wrong as the counts allow (the README: "the number to remove ... balances the correct-incorrect ratio"; the
    odd one goes to the correct side — our choice). Removed: the correct responses of LOWEST process score and the
    wrong ones of HIGHEST (the "deceptive" ones); ties by index (the earlier is kept). `correct` [n'] bool,
    `process_scores` [n'] float."""
    correct = np.asarray(correct, bool)
    scores = np.asarray(process_scores, np.float64)
    right, wrong = np.flatnonzero(correct), np.flatnonzero(~correct)
    keep_right = int(np.clip((keep + 1) // 2, keep - wrong.size, right.size))
    best_right = right[np.argsort(-scores[right], kind="stable")[:keep_right]]
    least_wrong = wrong[np.argsort(scores[wrong], kind="stable")[:keep - keep_right]]
    return np.sort(np.concatenate([best_right, least_wrong]))


def fapo_rewards(rewards: np.ndarray, correct: np.ndarray, flawed: np.ndarray, penalty: float) -> np.ndarray:
    """R − λ · 1[correct ∧ flawed] [N] (FAPO's R_Δ; module docstring): `rewards` [N], `correct` [N] bool (the verifier
    accepts the answer), `flawed` [N] bool (the judge flags a step), λ = `penalty`."""
    return (rewards - penalty * (correct & flawed)).astype(rewards.dtype)


def flaw_metrics(correct: np.ndarray, flawed: np.ndarray, prefix: str) -> dict[str, float]:
    """`<prefix>flawed_positive_frac` (flawed among the correct; 0 when none is correct), `<prefix>sound_accuracy`
    (correct and unflawed among all) and `<prefix>flawed_frac` (flawed among all) of [N] bool arrays."""
    positives = int(correct.sum())
    return {
        f"{prefix}flawed_positive_frac": float((correct & flawed).sum() / positives) if positives else 0.0,
        f"{prefix}sound_accuracy": float(np.mean(correct & ~flawed)) if correct.size else 0.0,
        f"{prefix}flawed_frac": float(np.mean(flawed)) if flawed.size else 0.0,
    }
