"""Modular exponentiation by repeated multiplication, with a worked answer: a multi-step procedural task.

A problem is ``base ** exponent mod modulus`` with ``base`` in ``[2, modulus - 1]``, ``exponent`` in
``[2, max_exponent]`` and ``modulus`` in ``[min_modulus, max_modulus]``; each step multiplies the running
residue by the base and reduces it::

    prompt   = "3^4%7="
    solution = "3*3=9%7=2;2*3=6%7=6;6*3=18%7=4;#4"
    answer   = "4"                   # checked by rl4llm.rewards.arithmetic (integer after the last '#')

Difficulty grows with ``max_exponent`` (steps) and the modulus (size of the numbers). Split and determinism:
``rl4llm.data.procedural``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rl4llm.data import procedural
from rl4llm.data.procedural import Example

ALPHABET = "0123456789^%=*;#"
_STREAMS = (0x30D1, 0x30D7, 0x30DC)  # train, test, corpus


@dataclasses.dataclass(frozen=True)
class ModularConfig:
    """Uniform base, exponent and modulus in their ranges (module docstring)."""

    max_exponent: int = 4
    min_modulus: int = 5
    max_modulus: int = 13
    test_fraction: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_exponent < 2:
            raise ValueError(f"ModularConfig.max_exponent={self.max_exponent}: must be >= 2.")
        if not 3 <= self.min_modulus <= self.max_modulus:
            raise ValueError(
                f"ModularConfig: need 3 <= min_modulus <= max_modulus, got {self.min_modulus}, {self.max_modulus}."
            )
        if not 0.0 <= self.test_fraction < 1.0:
            raise ValueError(f"ModularConfig.test_fraction={self.test_fraction}: must be in [0, 1).")


def render(base: int, exponent: int, modulus: int) -> Example:
    """The :class:`Example` of ``base ** exponent % modulus`` worked by repeated multiplication."""
    residue, steps = base % modulus, []
    for _ in range(exponent - 1):
        product = residue * base
        steps.append(f"{residue}*{base}={product}%{modulus}={product % modulus};")
        residue = product % modulus
    return Example(prompt=f"{base}^{exponent}%{modulus}=", solution="".join(steps) + f"#{residue}", answer=str(residue))


def _draw(rng: np.random.Generator, cfg: ModularConfig, k: int) -> list[Example]:
    moduli = rng.integers(cfg.min_modulus, cfg.max_modulus, size=k, endpoint=True)
    exponents = rng.integers(2, cfg.max_exponent, size=k, endpoint=True)
    bases = [int(rng.integers(2, m)) for m in moduli.tolist()]
    return [render(b, int(e), int(m)) for b, e, m in zip(bases, exponents, moduli)]


def source(cfg: ModularConfig) -> procedural.ProblemSource:
    """Train / held-out / corpus streams of the task (``rl4llm.data.procedural.ProblemSource``)."""
    return procedural.ProblemSource.of(
        cfg, _draw, streams=_STREAMS, alphabet=ALPHABET, hint="enlarge max_exponent/max_modulus"
    )
