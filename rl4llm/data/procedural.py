"""What every built-in procedural task shares: the example record, the hash split, rejection sampling.

Split: a prompt is held out iff the first 8 bytes of ``sha256(prompt)``, read as a fraction of 2**64, fall below
``test_fraction`` (:func:`is_held_out`): a function of the prompt text alone, so no seed or step ever produces a
held-out problem for training, and raising ``test_fraction`` only adds problems to the held-out set.

Determinism: a task draws step ``s``'s training problems from ``numpy.random.default_rng([stream, seed, s])`` and
its held-out set from ``default_rng([test_stream])``, in fixed-size chunks, so a smaller request is a prefix of a
larger one and any step regenerates without replaying earlier ones.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Callable

import numpy as np

# Problems are drawn in fixed-size chunks, so a smaller request is a prefix of a larger one.
CHUNK = 256
# Rejection sampling gives up (with a clear error) after this many draws per requested example.
MAX_DRAWS_PER_EXAMPLE = 1000


@dataclasses.dataclass(frozen=True)
class Example:
    """One problem: ``prompt`` is fed to the model, ``solution`` is the reference completion (no EOS),
    ``answer`` the reference the task's reward compares with (a canonical string, or JSON for structured ones)."""

    prompt: str
    solution: str
    answer: str


def is_held_out(prompt: str, test_fraction: float) -> bool:
    """True iff ``prompt`` belongs to the held-out split (module docstring)."""
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") < test_fraction * 2**64


def sample(
    rng: np.random.Generator,
    draw: Callable[[np.random.Generator, int], list[Example]],
    n: int,
    *,
    test: bool,
    test_fraction: float,
    distinct: bool,
    what: object,
    hint: str,
    key: Callable[[Example], str] = lambda ex: ex.prompt,
) -> list[Example]:
    """Rejection-samples ``n`` problems from ``draw(rng, CHUNK)`` whose split is ``test``; raises a ValueError
    naming ``what`` (the task config) and ``hint`` (how to enlarge the problem space) if the split is too small.
    ``key(problem)`` is the text the split and distinctness go by (the prompt; multi-turn envs, whose prompt may
    not show the hidden instance, pass their own)."""
    out: list[Example] = []
    seen: set[str] = set()
    draws = 0
    while len(out) < n:
        if draws > MAX_DRAWS_PER_EXAMPLE * max(n, 10):
            split = "held-out" if test else "train"
            raise ValueError(
                f"found only {len(out)} of {n} {'distinct ' if distinct else ''}{split} problems after {draws} "
                f"draws for {what}: the {split} split is too small; {hint}, adjust "
                f"test_fraction, or ask for fewer examples."
            )
        batch = draw(rng, CHUNK)
        draws += len(batch)
        for ex in batch:
            text = key(ex)
            if is_held_out(text, test_fraction) != test or (distinct and text in seen):
                continue
            seen.add(text)
            out.append(ex)
            if len(out) == n:
                break
    return out


@dataclasses.dataclass(frozen=True)
class ProblemSource:
    """A procedural task's train / held-out / tokenizer-corpus streams, from its ``draw(rng, k)`` function.

    ``streams`` = (train, test, corpus) SeedSequence prefixes, distinct per task; ``what`` (the task config) and
    ``hint`` go into the error raised when a split is too small; ``key`` is the text the split goes by (``sample``).
    """

    draw: Callable[[np.random.Generator, int], list[Example]]
    streams: tuple[int, int, int]
    test_fraction: float
    seed: int
    alphabet: str
    what: object
    hint: str
    key: Callable[[Example], str] = lambda ex: ex.prompt

    @classmethod
    def of(
        cls, cfg, draw: Callable, *, streams: tuple[int, int, int], alphabet: str, hint: str, **kwargs
    ) -> "ProblemSource":
        """The source of task config ``cfg`` (its ``test_fraction`` and ``seed``) drawing ``draw(rng, cfg, k)``;
        ``kwargs``: ``key``."""
        return cls(
            draw=lambda rng, k: draw(rng, cfg, k),
            streams=streams,
            test_fraction=cfg.test_fraction,
            seed=cfg.seed,
            alphabet=alphabet,
            what=cfg,
            hint=hint,
            **kwargs,
        )

    def _sample(self, rng: np.random.Generator, n: int, *, test: bool, distinct: bool) -> list[Example]:
        return sample(
            rng, self.draw, n, test=test, test_fraction=self.test_fraction, distinct=distinct, what=self.what,
            hint=self.hint, key=self.key,
        )

    def train_examples(self, step: int, batch_size: int) -> list[Example]:
        """The ``batch_size`` training problems of ``step``: a pure function of (config, step, batch_size), never a
        held-out problem; a smaller batch is a prefix of a larger one."""
        if step < 0:
            raise ValueError(f"step={step}: must be >= 0.")
        rng = np.random.default_rng([self.streams[0], self.seed, step])
        return self._sample(rng, batch_size, test=False, distinct=False)

    def test_examples(self, n: int) -> list[Example]:
        """The fixed held-out set: ``n`` distinct problems, independent of the seed; a prefix of any larger set."""
        if self.test_fraction == 0.0:
            raise ValueError(f"test_fraction=0 leaves no held-out problems for {self.what}; set it > 0.")
        return self._sample(np.random.default_rng([self.streams[1]]), n, test=True, distinct=True)

    def corpus_examples(self, n: int) -> list[Example]:
        """The ``n`` training-split problems whose texts make the tokenizer corpus."""
        return self._sample(np.random.default_rng([self.streams[2], self.seed]), n, test=False, distinct=False)

    def corpus(self, n: int) -> list[str]:
        """Tokenizer-training text: the alphabet line, then ``n`` training ``prompt + solution`` texts."""
        return [self.alphabet] + [ex.prompt + ex.solution for ex in self.corpus_examples(n)]
