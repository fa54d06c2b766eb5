"""The entropy–performance law of Cui et al. 2025 ("The Entropy Mechanism of Reinforcement Learning for Reasoning
Language Models", §2): over the course of RL without entropy intervention, validation performance R and policy
entropy H follow

    R = −a·exp(H) + b

so performance is traded for entropy, and the ceiling is R(H = 0) = b − a. The paper fits (a, b) on the early
steps of a run and predicts the final performance from them.

R is linear in x = exp(H), so the least-squares fit is ordinary linear regression of R on x (closed form, no
iterative optimiser): with x̄, R̄ the means, a = −Σ(x − x̄)(R − R̄) / Σ(x − x̄)², b = R̄ + a·x̄.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class EntropyLawFit:
    """R = −a·exp(H) + b fitted by least squares on `n` (H, R) points."""

    a: float
    b: float
    r2: float  # coefficient of determination of the fit on its points (1 − SS_res / SS_tot)
    n: int

    @property
    def ceiling(self) -> float:
        """Predicted performance when the entropy is exhausted: R(H = 0) = b − a."""
        return self.b - self.a

    def predict(self, entropy) -> np.ndarray:
        """R(H) for entropies H (any shape)."""
        return -self.a * np.exp(np.asarray(entropy, np.float64)) + self.b


def fit_entropy_law(entropy, performance) -> EntropyLawFit:
    """Least-squares fit of `performance = −a·exp(entropy) + b` (module docstring) over matching 1-D arrays.

    Non-finite pairs are dropped. Needs at least 2 points with distinct entropies (else ValueError: the slope is
    undetermined). r2 is 1 when the performance is constant and fitted exactly.
    """
    h = np.asarray(entropy, np.float64).reshape(-1)
    r = np.asarray(performance, np.float64).reshape(-1)
    if h.shape != r.shape:
        raise ValueError(f"entropy and performance need the same length, got {h.size} and {r.size}")
    keep = np.isfinite(h) & np.isfinite(r)
    h, r = h[keep], r[keep]
    x = np.exp(h)
    if x.size < 2 or np.ptp(x) == 0:
        raise ValueError(f"the fit needs at least 2 points with distinct entropies, got {x.size} (entropies {h})")
    dx, dr = x - x.mean(), r - r.mean()
    a = -float(np.sum(dx * dr) / np.sum(dx * dx))
    b = float(r.mean() + a * x.mean())
    residual = r - (-a * x + b)
    total = float(np.sum(dr * dr))
    r2 = 1.0 - float(np.sum(residual * residual)) / total if total > 0 else 1.0
    return EntropyLawFit(a=a, b=b, r2=r2, n=int(x.size))
