"""Rubric rewards (Huang et al. 2025, *Reinforcement Learning with Rubric Anchors*, arXiv 2508.12790; digest
entropy_and_general_rl.md R7): each prompt carries rubric items {criterion, weight w_k, veto}; each item scores the
completion s_k ∈ [0, 1] and the reward is

    R = Σ_k w_k s_k / Σ_k w_k,   and R = 0 if any veto item fails (s_k < veto_threshold).

A criterion is either a rule checker — a name of `rl4llm.rewards.REWARDS` (`score(completion, reference)`) — or
`judge:<text>`, asked to the generative verifier (`rl4llm.verifiers.generative`) with `<text>` in its template's
{criterion} field; the item's score is then the verifier's P(Yes). All judge items of a batch go to the verifier in
one call (one forward over every (row, item) pair).

Conventions and departures from the paper, all here:

- veto items are gates AND ordinary items: they count in the weighted mean with their weight (0 makes a pure gate),
  and a veto item "fails" when its score is below `veto_threshold` (0.5 by default: a 0/1 checker fails at 0, a
  soft judge when P(Yes) < 0.5). Rubicon's veto "nullifies the total reward"; its threshold is the judge's verdict;
- Rubicon's items have ordered score tiers judged by an LLM, and its aggregation adds saturation-aware weighting,
  pairwise interactions and a non-linear shaping of the total; here an item's score is one number in [0, 1] (a
  checker's score, or P(Yes) of "does the answer satisfy <criterion>?") and the aggregation is the weighted mean
  and the veto only, the form of R7 and of Rubrics as Rewards (Gunjal et al. 2025, arXiv 2507.17746);
- a rubric whose weights sum to 0 (no item, or only weight-0 gates) gives R = 0 when vetoed and 0 otherwise
  (nothing to average), not NaN.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import jax.numpy as jnp
import numpy as np

JUDGE_PREFIX = "judge:"


@dataclasses.dataclass(frozen=True)
class RubricItem:
    """One rubric item: `criterion` (a REWARDS name, or "judge:<text>"), its weight w_k >= 0, and whether it vetoes."""

    criterion: str
    weight: float = 1.0
    veto: bool = False


def rubric_reward(scores, weights, veto, valid, veto_threshold: float = 0.5):
    """Rubric rewards [N] and the vetoed rows [N] bool of item scores [N, K] in [0, 1], weights [N, K] >= 0, veto
    [N, K] bool and valid [N, K] bool (rubrics of fewer than K items are padded with valid = False):
    R = Σ_k w_k s_k / Σ_k w_k over the valid items (0 when Σ_k w_k = 0), and 0 where a valid veto item has
    s_k < veto_threshold (arXiv 2508.12790; module docstring)."""
    scores = jnp.asarray(scores, jnp.float32)
    w = jnp.where(valid, jnp.asarray(weights, jnp.float32), 0.0)
    total = w.sum(-1)
    mean = jnp.where(total > 0, (w * scores).sum(-1) / jnp.where(total > 0, total, 1.0), 0.0)
    vetoed = jnp.any(valid & veto & (scores < veto_threshold), axis=-1)
    return jnp.where(vetoed, 0.0, mean), vetoed


def pad_rubrics(rubrics: Sequence[Sequence[RubricItem]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights [N, K], veto [N, K], valid [N, K]) of N rubrics, K = the most items; ValueError on a negative
    weight."""
    k = max((len(r) for r in rubrics), default=0)
    weights, veto, valid = np.zeros((len(rubrics), k), np.float32), np.zeros((len(rubrics), k), bool), \
        np.zeros((len(rubrics), k), bool)
    for i, rubric in enumerate(rubrics):
        for j, item in enumerate(rubric):
            if item.weight < 0:
                raise ValueError(f"rubric item {item}: weight must be >= 0")
            weights[i, j], veto[i, j], valid[i, j] = item.weight, item.veto, True
    return weights, veto, valid


def item_scores(rubrics: Sequence[Sequence[RubricItem]], completions: Sequence[str], references: Sequence[str],
                questions: Sequence[str], rules: dict[str, Callable[[str, str], float]],
                judge: Callable | None = None) -> np.ndarray:
    """Scores [N, K] of each row's rubric items (0 in the padding): a rule item is `rules[criterion](completion,
    reference)` clipped to [0, 1]; every judge item of the batch goes to `judge` in ONE call, a
    `verifiers.generative.Verifier` with a {criterion} template (`Verifier.for_rubric`): `judge(questions,
    references, completions, criteria)[0]` is P(Yes) [M]. ValueError naming an unknown checker, or a judge item
    without a judge."""
    k = max((len(r) for r in rubrics), default=0)
    scores = np.zeros((len(rubrics), k), np.float32)
    asked = []  # (row, item, criterion text) of the judge items
    for i, rubric in enumerate(rubrics):
        for j, item in enumerate(rubric):
            if item.criterion.startswith(JUDGE_PREFIX):
                asked.append((i, j, item.criterion[len(JUDGE_PREFIX):]))
            elif item.criterion in rules:
                scores[i, j] = np.clip(rules[item.criterion](completions[i], references[i]), 0.0, 1.0)
            else:
                raise ValueError(f"rubric criterion {item.criterion!r}: neither a rule checker "
                                 f"({', '.join(sorted(rules))}) nor '{JUDGE_PREFIX}<text>'")
    if asked:
        if judge is None:
            raise ValueError(f"rubric criterion {JUDGE_PREFIX!r}...: asks the generative verifier, but none is set")
        rows = [i for i, _, _ in asked]
        p_yes = judge([questions[i] for i in rows], [references[i] for i in rows], [completions[i] for i in rows],
                      [text for _, _, text in asked])[0]
        for (i, j, _), p in zip(asked, np.asarray(p_yes)):
            scores[i, j] = p
    return scores


def score_rubrics(rubrics: Sequence[Sequence[RubricItem]], completions: Sequence[str], references: Sequence[str],
                  questions: Sequence[str], rules: dict[str, Callable[[str, str], float]],
                  judge: Callable | None = None, veto_threshold: float = 0.5
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rubric rewards [N], vetoed [N], item scores [N, K]) of the completions: `item_scores`, then
    `rubric_reward`."""
    scores = item_scores(rubrics, completions, references, questions, rules, judge)
    weights, veto, valid = pad_rubrics(rubrics)
    reward, vetoed = rubric_reward(scores, weights, veto, valid, veto_threshold)
    return np.asarray(reward), np.asarray(vetoed), scores
