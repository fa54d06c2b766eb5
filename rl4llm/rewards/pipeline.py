"""One step's rewards: pseudo-labels -> main and extra components -> combination -> length shaping.

``RewardPipeline.score(texts, answers, lengths, group_ids, max_length)`` returns the rewards [N] the advantage
estimator sees, the main component [N] (correctness: what ``solve_all`` / ``solve_none`` and evaluation use),
the reward components [N, K] (for multi-reward estimators: GDPO, BNPO's decomposition) and metrics. The order,
each step optional:

1. **pseudo-labels** (``pseudo_labels="majority_vote"``, TTRL): the reference answers are replaced by each group's
   majority extracted answer (``rl4llm.rewards.combine.majority_vote``); a group without any answer scores 0;
2. **main** reward and every **extra** component, each batch scored by a ``BatchScorer`` (process pool with a hard
   per-call timeout, or inline);
3. **combination** ``main + Σ w_k extra_k`` or its ``if_correct`` form (``rl4llm.rewards.combine.combine``);
4. **process judge** (``flaw_judge``, ``rl4llm.rewards.process.JUDGES``): with its verdicts (each completion's first
   flawed step, judged by the caller, who has the prompts) flawed positives (correct answers from flawed steps) are
   logged as ``judge/*``, and with ``flaw_penalty`` λ > 0 FAPO's ``R − λ·1[flawed positive]`` is applied
   (``process.fapo_rewards``; ``judge/penalty_mean``: the mean reward it took);
5. **length shaping** by name (``rl4llm.rewards.length.LENGTH_SHAPING``) with its hyper-parameters, applied to
   the combined reward only: the components never carry it.

With none of the options set, the rewards are the main reward's scores, computed exactly as a plain loop would.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from rl4llm import rewards
from rl4llm.rewards import combine as combine_lib
from rl4llm.rewards import length as length_lib
from rl4llm.rewards import pool as pool_lib
from rl4llm.rewards import process as process_lib

PSEUDO_LABELS = ("none", "majority_vote")


@dataclasses.dataclass(frozen=True)
class RewardSpec:
    """What a run's rewards are made of (``config.task``: reward, extra_rewards, extra_rewards_mode,
    length_shaping, length_shaping_kwargs, pseudo_labels, flaw_judge, flaw_penalty, reward_workers,
    reward_timeout_s)."""

    reward: str
    extra_weights: tuple[tuple[str, float], ...] = ()
    extra_mode: str = "sum"
    length_shaping: str = "none"
    length_kwargs: tuple[tuple[str, object], ...] = ()
    pseudo_labels: str = "none"
    flaw_judge: str = "none"
    flaw_penalty: float = 0.0
    num_workers: int = 0
    timeout_s: float = 30.0


class RewardPipeline:
    """Scores batches per a :class:`RewardSpec` (module docstring). Close it (or use ``with``) to stop the pools."""

    def __init__(self, spec: RewardSpec):
        if spec.pseudo_labels not in PSEUDO_LABELS:
            raise ValueError(f"pseudo_labels={spec.pseudo_labels!r}; known: {', '.join(PSEUDO_LABELS)}")
        if spec.pseudo_labels == "majority_vote" and spec.reward not in rewards.EXTRACTORS:
            raise ValueError(f"majority_vote needs a reward with an answer extractor: {', '.join(rewards.EXTRACTORS)}")
        if spec.length_shaping != "none" and spec.length_shaping not in length_lib.LENGTH_SHAPING:
            known = ", ".join(length_lib.LENGTH_SHAPING)
            raise ValueError(f"length_shaping={spec.length_shaping!r}; known: none, {known}")
        if spec.flaw_judge != "none" and spec.flaw_judge not in process_lib.JUDGES:
            raise ValueError(f"flaw_judge={spec.flaw_judge!r}; known: none, {', '.join(process_lib.JUDGES)}")
        if spec.flaw_penalty and spec.flaw_judge == "none":
            raise ValueError(f"flaw_penalty={spec.flaw_penalty} needs a flaw_judge")
        self.spec = spec

        def scorer(name: str) -> pool_lib.BatchScorer:
            reward_fn = rewards.get_reward(name)
            return pool_lib.BatchScorer(reward_fn, num_workers=spec.num_workers, timeout_s=spec.timeout_s)

        self.main = scorer(spec.reward)
        self.extras = {name: scorer(name) for name, _ in spec.extra_weights}

    def score_one(self, completion: str, answer: str) -> float:
        """The main reward of one completion, inline and exception-safe (evaluation's per-item scorer)."""
        return self.main.score_one(completion, answer)

    def score(
        self,
        texts: Sequence[str],
        answers: Sequence[str],
        lengths: np.ndarray,
        group_ids: np.ndarray,
        *,
        max_length: int,
        first_flaws: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, float]]:
        """(rewards [N] float32, main component [N] float32, components [N, K] float32, metrics) of one batch;
        `first_flaws` [N] int: the process judge's verdicts (`process.first_flaws`; -1 sound), needed with a judge.

        ``components[:, 0]`` is the main reward and ``components[:, k]`` the k-th extra reward in config order,
        unweighted and as it enters the combination (``if_correct``: ``1[main >= 1] · extra_k``), so that before
        FAPO's penalty and length shaping ``rewards = components @ (1, w_1, ..., w_{K-1})``; both change the
        combined rewards only.
        """
        metrics: dict[str, float] = {}
        labelled = np.ones(len(texts), bool)
        if self.spec.pseudo_labels == "majority_vote":
            extract = rewards.EXTRACTORS[self.spec.reward]
            votes = [extract(t) for t in texts]
            labels = combine_lib.majority_vote(votes, group_ids.tolist())
            labelled = np.array([label is not None for label in labels])
            agree = [v == label for v, label in zip(votes, labels) if v is not None]  # answered samples only
            metrics["pseudo_label/agreement"] = float(np.mean(agree)) if agree else 0.0
            metrics["pseudo_label/labelled_frac"] = float(labelled.mean())
            answers = [label if label is not None else "" for label in labels]
        main, timeouts, errors = self._components(self.main, texts, answers, labelled)
        extras = {}
        for name, scorer in self.extras.items():
            extras[name], t, e = self._components(scorer, texts, answers, labelled)
            timeouts, errors = timeouts + t, errors + e
            metrics[f"reward/{name}"] = float(extras[name].mean())
        metrics["reward/timeouts"], metrics["reward/errors"] = float(timeouts), float(errors)
        scores = main
        if extras:
            scores = combine_lib.combine(main, extras, dict(self.spec.extra_weights), mode=self.spec.extra_mode)
            metrics[f"reward/{self.spec.reward}"] = float(main.mean())
        components = np.stack([main, *combine_lib.conditioned(main, extras, mode=self.spec.extra_mode).values()], -1)
        if self.spec.flaw_judge != "none":
            if first_flaws is None:
                raise ValueError(f"flaw_judge={self.spec.flaw_judge!r}: pass its verdicts, first_flaws=")
            correct, flawed = main >= 1.0, np.asarray(first_flaws) >= 0
            metrics.update(process_lib.flaw_metrics(correct, flawed, "judge/"))
            if self.spec.flaw_penalty:
                penalised = process_lib.fapo_rewards(scores, correct, flawed, self.spec.flaw_penalty)
                metrics["judge/penalty_mean"] = float(np.mean(scores - penalised))  # the reward FAPO took away
                metrics[f"reward/{self.spec.reward}"] = float(main.mean())
                scores = penalised
        if self.spec.length_shaping != "none":
            shape = length_lib.LENGTH_SHAPING[self.spec.length_shaping]
            shaped = shape(scores, lengths, group_ids, max_length=max_length, **dict(self.spec.length_kwargs))
            metrics[f"reward/{self.spec.reward}"] = float(main.mean())
            # the shaping's mechanism acting: the fraction of samples whose reward it changed, and the mean change
            metrics["length_shaping/changed_frac"] = float(np.mean(shaped != scores))
            metrics["length_shaping/mean_delta"] = float(np.mean(shaped - scores))
            scores = shaped
        return scores, main, components.astype(np.float32), metrics

    @staticmethod
    def _components(scorer, texts, answers, labelled) -> tuple[np.ndarray, int, int]:
        """Scores [N] of the labelled samples (0 elsewhere), and the call's timeout / error counts."""
        if labelled.all():
            scores, m = scorer.score(texts, answers)
        else:
            index = np.flatnonzero(labelled)
            scores = np.zeros(len(texts), np.float32)
            part, m = scorer.score([texts[i] for i in index], [answers[i] for i in index])
            scores[index] = part
        return scores, int(m["reward/timeouts"]), int(m["reward/errors"])

    def close(self) -> None:
        """Stops every worker pool."""
        for scorer in (self.main, *self.extras.values()):
            scorer.close()

    def __enter__(self) -> "RewardPipeline":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
