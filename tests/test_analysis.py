"""rl4llm.analysis: the entropy–performance law fit and seed statistics."""

import numpy as np
import pytest

from rl4llm.analysis import entropy_law


def test_exact_recovery_on_the_law():
    h = np.linspace(0.05, 0.9, 12)
    fit = entropy_law.fit_entropy_law(h, -0.3 * np.exp(h) + 1.2)
    np.testing.assert_allclose([fit.a, fit.b, fit.r2], [0.3, 1.2, 1.0], rtol=1e-12)
    assert fit.n == 12
    np.testing.assert_allclose(fit.ceiling, 0.9, rtol=1e-12)  # R(H = 0) = b − a
    np.testing.assert_allclose(fit.predict([0.0, np.log(2.0)]), [0.9, 0.6], rtol=1e-12)


def test_hand_case_least_squares():
    # x = e^H = [1, 2, 3], R = [1, 0, 0.5]: slope of R on x = Σdx·dR / Σdx² = (−1·0.5 + 0 + 1·0) / 2 = −0.25,
    # so a = 0.25, b = R̄ + a·x̄ = 0.5 + 0.5 = 1.0; residuals [0.25, −0.5, 0.25] -> SS_res 0.375, SS_tot 0.5
    fit = entropy_law.fit_entropy_law(np.log([1.0, 2.0, 3.0]), [1.0, 0.0, 0.5])
    np.testing.assert_allclose([fit.a, fit.b, fit.r2], [0.25, 1.0, 0.25], rtol=1e-12)


def test_noise_lowers_r2_and_non_finite_points_are_dropped():
    rng = np.random.default_rng(0)
    h = rng.uniform(0.1, 1.0, 200)
    r = -0.2 * np.exp(h) + 1.0 + rng.normal(0, 0.02, 200)
    fit = entropy_law.fit_entropy_law(np.append(h, np.nan), np.append(r, 0.5))
    assert fit.n == 200
    assert 0.8 < fit.r2 < 1.0
    np.testing.assert_allclose([fit.a, fit.b], [0.2, 1.0], atol=0.02)


@pytest.mark.parametrize("h, r", [([0.5], [1.0]), ([0.5, 0.5], [1.0, 0.0]), ([0.1, 0.2], [1.0])])
def test_underdetermined_or_mismatched_inputs_raise(h, r):
    with pytest.raises(ValueError):
        entropy_law.fit_entropy_law(h, r)
