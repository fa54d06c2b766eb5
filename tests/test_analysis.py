"""rl4llm.analysis: the entropy–performance law fit and seed statistics."""

import numpy as np
import pytest

from rl4llm.analysis import entropy_law
from rl4llm.analysis import results


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


def _records():
    # two seeds of one arm: entropy every step, accuracy at steps 2 and 4
    rows = []
    for seed, shift in ((0, 0.0), (1, 0.1)):
        for step in range(1, 5):
            row = {"arm": "grpo", "seed": seed, "step": step, "entropy": step + shift, "rollouts": 10.0 * seed + step}
            if step % 2 == 0:
                row["acc"] = 0.5 + 0.1 * step + shift
            rows.append(row)
    rows.append({"arm": "other", "seed": 0, "step": 1, "entropy": np.nan})
    return rows


def test_seed_curve_final_values_and_mean_std():
    curve = results.seed_curve(_records(), "grpo", "acc")
    np.testing.assert_array_equal(curve.steps, [2, 4])
    np.testing.assert_allclose(curve.mean, [0.75, 0.95])
    np.testing.assert_allclose(curve.std, [np.sqrt(0.005)] * 2)  # two values 0.1 apart: ddof-1 std = 0.1/√2
    np.testing.assert_allclose(results.final_values(_records(), "grpo", "acc"), [0.9, 1.0])
    assert results.mean_std([1.0, 2.0, 3.0]) == "2.000 ± 1.000 (n=3)"
    assert results.arms(_records()) == ["grpo", "other"]
    with pytest.raises(KeyError):
        results.seed_curve(_records(), "other", "entropy")  # no finite value


def test_paired_at_uses_a_trailing_window():
    x, y = results.paired_at(_records(), "grpo", "entropy", "acc", window=2)
    # seed 0: steps 2 (entropy mean of steps 1, 2 = 1.5) and 4 (3.5); seed 1: + 0.1
    np.testing.assert_allclose(x, [1.5, 3.5, 1.6, 3.6])
    np.testing.assert_allclose(y, [0.7, 0.9, 0.8, 1.0])


def test_cumulative_curve_sums_per_seed():
    curve = results.cumulative_curve(_records(), "grpo", "rollouts")
    # seed 0: 1, 3, 6, 10; seed 1: 11, 23, 36, 50
    np.testing.assert_allclose(curve.values, [[1, 3, 6, 10], [11, 23, 36, 50]])


def test_results_file_round_trip(tmp_path):
    path = str(tmp_path / "r.jsonl")
    assert results.write_results(path, [{"arm": "b", "seed": 0, "step": 1, "x": 1 / 3, "y": float("nan")},
                                        {"arm": "a", "seed": 0, "step": 2, "x": 2.0}]) == 2
    back = results.read_results(path)
    assert [r["arm"] for r in back] == ["a", "b"]  # sorted by (arm, seed, step)
    assert back[1]["x"] == 0.333333 and np.isnan(back[1]["y"])
