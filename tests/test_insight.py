"""InSight's information gain (rl4llm.data.selection.information_gain) against a numerical integral and its
properties, and the selection taking its top-k."""

import numpy as np
import pytest
from scipy import integrate
from scipy import stats

from rl4llm.data import selection


def _gain_by_quadrature(a: float, b: float) -> float:
    """h(mu) - integral of h(theta) Beta(theta; a, b) dtheta, by adaptive quadrature."""
    h = lambda p: -(p * np.log(p) + (1 - p) * np.log(1 - p)) if 0 < p < 1 else 0.0  # noqa: E731
    expected, _ = integrate.quad(lambda p: h(p) * stats.beta.pdf(p, a, b), 0, 1, limit=200)
    return h(a / (a + b)) - expected


@pytest.mark.parametrize("a,b", [(1.0, 1.0), (2.0, 5.0), (0.5, 0.5), (30.0, 10.0), (1.3, 7.9)])
def test_closed_form_equals_the_integral(a, b):
    assert selection.information_gain(np.array([a]), np.array([b]))[0] == pytest.approx(_gain_by_quadrature(a, b),
                                                                                       abs=1e-7)


def test_uniform_prior_by_hand():
    # Beta(1, 1): h(1/2) = log 2, E[h] = psi(3) - psi(2) = 1/2, so I = log 2 - 1/2
    assert selection.information_gain(np.array([1.0]), np.array([1.0]))[0] == pytest.approx(np.log(2) - 0.5)


def test_gain_shrinks_with_evidence_and_peaks_at_one_half():
    evidence = np.array([2.0, 4.0, 16.0, 128.0])
    gains = selection.information_gain(0.3 * evidence, 0.7 * evidence)  # fixed mean 0.3
    assert np.all(gains > 0) and np.all(np.diff(gains) < 0)
    means = np.linspace(0.05, 0.95, 19)
    gains = selection.information_gain(10 * means, 10 * (1 - means))  # fixed evidence 10
    assert means[np.argmax(gains)] == pytest.approx(0.5)
    np.testing.assert_allclose(gains, gains[::-1], rtol=1e-9)  # symmetric in mu <-> 1 - mu


def test_selection_takes_the_largest_gains():
    state = selection.init_state(6)
    state = state.replace(alpha=np.array([1, 9, 5, 50, 2, 1], np.float32), beta=np.array([1, 1, 5, 50, 8, 30], np.float32))
    gains = selection.information_gain(state.alpha, state.beta)
    chosen = selection.insight_select(state, 2, np.random.default_rng(0))
    assert set(chosen) == set(np.argsort(-gains)[:2]) == {0, 2}  # the uniform prior and Beta(5, 5)
