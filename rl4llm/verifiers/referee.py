"""The referee half of URPO (Lu et al. 2025, "URPO: A Unified Reward & Policy Optimization Framework for Large Language
Models", arXiv 2507.17515): the policy itself judges a candidate solution of a problem, in text, and is rewarded for
agreeing with the verifier. Pure text and numpy, no model: the RL step's use is `rl4llm.train.urpo`.

- **Referee prompt** (`referee_prompt`): `template` with {question} (the problem's prompt) and {completion} (the
  candidate's text), default "{question}{completion}=" — in the arithmetic task's character vocabulary, so the char
  tokenizer reads it; the paper's referee prompt is a natural-language instruction (not published in what we could
  read) over a preference triple.
- **Verdict** (`parse_verdict`): the completion's text must START with `yes_token` ("1": correct) or `no_token` ("0":
  wrong); what follows is ignored. Anything else (an empty completion, another first character) is garbage: no
  verdict. The tokens are R17's judgement tokens "1" / "0" (`verifiers.generative`'s convention).
- **Referee reward** (`referee_reward`): r = 1[verdict == label], label the verifier's (1: the candidate's answer
  is right); garbage gets 0 whatever the label. The paper rewards a referee by agreement with ground-truth
  preferences (an N-way ranking of a preference triple); ours is the pointwise form on one candidate.
- **Candidates** (`candidate_plan`, `corrupted_candidate`): a group's candidate is one of the step's own rollouts
  of the problem (its label: the verifier's main reward; drawn toward a balanced label, `pick_rollout`) or the
  problem's reference solution (label 1) or `data.arithmetic.wrong_solution` of it (label 0), 50/50.
"""

from __future__ import annotations

import numpy as np

from rl4llm.data import arithmetic
from rl4llm.verifiers import templates

REFEREE_FIELDS = ("question", "completion")
DEFAULT_TEMPLATE = "{question}{completion}="


def template_pieces(template: str) -> list[tuple[str, str | None]]:
    """(literal, field) pieces of a referee template: fields {question} and exactly one {completion}; ValueError
    otherwise (`verifiers.templates.template_pieces`)."""
    return templates.template_pieces(template, REFEREE_FIELDS)


def referee_prompt(template: str, question: str, candidate: str) -> str:
    """The referee's prompt text: `template` with {question} and {completion} filled in."""
    values = {"question": question, "completion": candidate}
    return "".join(literal + ("" if field is None else values[field]) for literal, field in template_pieces(template))


def parse_verdict(text: str, yes_token: str, no_token: str) -> int | None:
    """1 if `text` starts with `yes_token`, 0 if with `no_token`, None (garbage) otherwise."""
    if text.startswith(yes_token):
        return 1
    if text.startswith(no_token):
        return 0
    return None


def referee_reward(text: str, label: int, yes_token: str, no_token: str) -> float:
    """r = 1[parse_verdict(text) == label] (garbage: 0)."""
    verdict = parse_verdict(text, yes_token, no_token)
    return float(verdict is not None and verdict == int(label))


def pick_rollout(labels: np.ndarray, rng: np.random.Generator) -> int:
    """The index of one of a group's rollouts (their verifier labels [G] 0/1) as the referee's candidate: a target
    label drawn 50/50, then a uniform rollout with that label, or a uniform one when the group has none (so a group
    that is all right or all wrong still gives a candidate, unbalanced)."""
    target = int(rng.integers(2))
    matching = np.flatnonzero(np.asarray(labels) == target)
    pool = matching if matching.size else np.arange(len(labels))
    return int(rng.choice(pool))


def corrupted_candidate(solution: str, rng: np.random.Generator, corruption: str) -> tuple[str, int]:
    """(candidate text, label): the reference solution (label 1) or `arithmetic.wrong_solution` of it under
    `corruption` (label 0: its final answer is always wrong), 50/50."""
    if rng.integers(2):
        return solution, 1
    return arithmetic.wrong_solution(solution, rng, corruption), 0


def candidate_plan(num_groups: int, rollout_share: float, rng: np.random.Generator) -> np.ndarray:
    """[num_groups] bool: which referee groups judge a rollout (the others a reference / corrupted solution): exactly
    ⌊rollout_share · num_groups + ½⌋ of them (halves round up), at uniformly drawn positions."""
    plan = np.zeros(num_groups, bool)
    plan[rng.permutation(num_groups)[: int(np.floor(rollout_share * num_groups + 0.5))]] = True
    return plan


def held_out_pairs(examples, n: int, corruption: str, seed: int) -> tuple[list[str], list[str], list[int]]:
    """The held-out referee set: for each of the first `n` `examples` its reference solution (label 1) and one
    `wrong_solution` of it (label 0), drawn from `seed` -> (questions [2n], candidates [2n], labels [2n])."""
    rng = np.random.default_rng(seed)
    questions, candidates, labels = [], [], []
    for e in examples[:n]:
        questions += [e.prompt, e.prompt]
        candidates += [e.solution, arithmetic.wrong_solution(e.solution, rng, corruption)]
        labels += [1, 0]
    return questions, candidates, labels
