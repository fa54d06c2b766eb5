"""Process judges and FAPO's flawed-positive penalty.

A *process judge* reads a response's reasoning, not only its final answer: ``judge(prompt, completion) -> int`` is the
index of the first flawed step (``-1``: every step sound), never raising on any completion. `JUDGES` holds them by
name (``config.task.flaw_judge``); the arithmetic task's is exact (``rewards.arithmetic.first_flawed_step``).

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

Judge = Callable[[str, str], int]

JUDGES: dict[str, Judge] = {
    "arithmetic_steps": arithmetic.first_flawed_step,  # exact: each step's operands, operator and result
}
# The task whose prompts a judge reads (`config.task.name`).
JUDGE_TASKS = {"arithmetic_steps": "arithmetic"}


def first_flaws(judge: Judge, prompts: Sequence[str], completions: Sequence[str]) -> np.ndarray:
    """[N] int: `judge`'s first flawed step of each (prompt, completion), -1 where none."""
    return np.array([judge(p, c) for p, c in zip(prompts, completions)], np.int64)


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
