"""Tests of paper_suite.attribution.cp_shapley against independent references: brute force, closed forms,
mapie and shap, and the properties the chapter derives (Eqs. 12, 13, 14-15)."""
import itertools
import math
import os

import numpy as np
import pytest

from paper_suite import games
from paper_suite.attribution import cp_shapley as cs


def _data(n=120, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = 0.5 * X[:, 1] + np.exp(0.8 * X[:, 0]) * rng.standard_normal(n)
    return X, y


def _fams(w_rho=(0.8, 0.1, 0.0, -0.2)):
    w = np.asarray(w_rho)
    mu = lambda X: 0.5 * X[:, 1] + 0.1 * X[:, 2] * X[:, 3]
    rho = lambda X: X @ w
    lo = lambda X: 0.5 * X[:, 1] - 1.6 * np.exp(0.5 * X[:, 0])
    hi = lambda X: 0.5 * X[:, 1] + 1.6 * np.exp(0.5 * X[:, 0]) + 0.1 * X[:, 3] ** 2
    return mu, rho, lo, hi


def test_conformal_quantile_is_the_kth_order_statistic():
    rng = np.random.default_rng(1)
    for n in (1, 9, 10, 57):
        for alpha in (0.05, 0.1, 0.3):
            s = rng.standard_normal(n)
            k = math.ceil((n + 1) * (1 - alpha))
            want = np.inf if k > n else sorted(s)[k - 1]
            assert cs.conformal_quantile(s, alpha) == want


def test_split_conformal_coverage_by_exchangeability():
    # exact finite-sample guarantee: P(r_{n+1} <= q) = k/(n+1) for continuous i.i.d. scores
    rng = np.random.default_rng(2)
    n, alpha, reps = 19, 0.2, 20000
    r = rng.standard_normal((reps, n + 1))
    q = cs.conformal_quantile(r[:, :n], alpha)
    k = math.ceil((n + 1) * (1 - alpha))
    assert abs(np.mean(r[:, n] <= q) - k / (n + 1)) < 0.01


def test_shapley_matrix_matches_permutation_enumeration():
    rng = np.random.default_rng(3)
    n = 4
    table = rng.standard_normal(2**n)
    phi = np.zeros(n)
    for perm in itertools.permutations(range(n)):
        mask = 0
        for i in perm:
            phi[i] += table[mask | (1 << i)] - table[mask]
            mask |= 1 << i
    phi /= math.factorial(n)
    assert np.allclose(table @ cs.shapley_matrix(n), phi)


def test_masked_predictions_closed_form_for_a_linear_model():
    rng = np.random.default_rng(4)
    w = rng.standard_normal(5)
    X, bg = rng.standard_normal((3, 5)), rng.standard_normal((6, 5))
    masks = games.all_coalitions(5)
    got = cs.masked_predictions(lambda Z: Z @ w, X, bg, masks)
    want = np.array([[np.mean([np.where(m, x, b) @ w for b in bg]) for x in X] for m in masks])
    assert np.allclose(got, want)


@pytest.mark.parametrize("convention", ["centered", "reference"])
def test_decomposition_exact_for_separable_families(convention):
    X, y = _data()
    mu, rho, lo, hi = _fams()
    bg = X[:10]
    for fam in (cs.AbsoluteCP({"mu": mu}, "width"), cs.AbsoluteCP({"mu": mu}, "log_width"),
                cs.NormalizedCP({"mu": mu, "rho": rho}, "log_width"), cs.CQR({"lo": lo, "hi": hi}, "width")):
        assert fam.separable
        a = cs.decompose_width(fam, X[20:80], y[20:80], X[80:95], bg, 0.1, convention=convention)
        assert a.total.shape == (15, 4)
        assert np.abs(a.gap).max() < 1e-10
        assert np.allclose(a.calibration, a.calibration[0])            # one calibration vector for all points
        if fam.name == "absolute":
            assert np.abs(a.instance).max() < 1e-12
        k = cs.decompose_width(fam, X[20:80], y[20:80], X[80:85], bg, 0.1, method="kernel", budget=10,
                               seed=1, convention=convention)
        assert np.abs(k.gap).max() < 1e-10


def test_total_game_is_the_restricted_pipelines_width_and_efficiency_holds():
    X, y = _data(seed=5)
    mu, rho, lo, hi = _fams()
    fam = cs.CQR({"lo": lo, "hi": hi}, "width")
    a = cs.decompose_width(fam, X[:60], y[:60], X[60:70], X[100:110], 0.1)
    l_, h_, _ = cs.conformal_interval(fam, X[:60], y[:60], X[60:70], 0.1)
    assert np.allclose(a.games.total[-1], h_ - l_)                     # v(N) = deployed width
    # v(empty) = width of the pipeline that knows nothing: background means of lo, hi, recalibrated
    lo0, hi0 = lo(X[100:110]).mean(), hi(X[100:110]).mean()
    q0 = cs.conformal_quantile(np.maximum(lo0 - y[:60], y[:60] - hi0), 0.1)
    assert np.allclose(a.games.total[0], hi0 - lo0 + 2 * q0)
    assert np.allclose(a.total.sum(1), a.games.total[-1] - a.games.total[0])


def test_non_separable_gap_matches_eq13():
    X, y = _data(seed=6)
    mu, rho, _, _ = _fams()
    fam = cs.NormalizedCP({"mu": mu, "rho": rho}, "width")
    assert not fam.separable
    a = cs.decompose_width(fam, X[:60], y[:60], X[60:70], X[100:110], 0.1, convention="reference")
    q, s = a.games.q, np.exp(cs.masked_predictions(rho, X[60:70], X[100:110], games.all_coalitions(4)))
    want = -2 * (q[-1] - q[0]) * (s[-1] - s[0])                          # Eq. (13), summed over features
    assert np.allclose(a.gap.sum(1), want)
    assert np.abs(a.gap).max() > 1e-3


def test_centered_games_are_invariant_to_the_scale_gauge():
    # With mu = 0 and a linear rho, shifting the background by delta shifts every masked rho_S by a
    # coalition-dependent constant k_S; restricted intervals are unchanged (q-hat absorbs exp(k_S)), so
    # the total and both centred views must not move, while the reference views do (Section 3 (ii)).
    X, y = _data(seed=7)
    w = np.array([0.8, 0.3, -0.4, 0.2])
    fam = cs.NormalizedCP({"mu": lambda Z: np.zeros(len(Z)), "rho": lambda Z: Z @ w}, "log_width")
    bg = X[100:110]
    bg2 = bg + np.array([0.7, -0.5, 0.3, 0.9])
    for conv, moves in (("centered", False), ("reference", True)):
        a = cs.decompose_width(fam, X[:60], y[:60], X[60:70], bg, 0.1, convention=conv)
        b = cs.decompose_width(fam, X[:60], y[:60], X[60:70], bg2, 0.1, convention=conv)
        assert np.allclose(a.total, b.total)
        same = np.allclose(a.calibration, b.calibration) and np.allclose(a.instance, b.instance)
        assert same != moves


def test_intervals_equal_mapie():
    from mapie.conformity_scores import ResidualNormalisedScore
    from mapie.regression import ConformalizedQuantileRegressor, SplitConformalRegressor
    from sklearn.base import BaseEstimator, RegressorMixin

    class ExpScale(RegressorMixin, BaseEstimator):
        def __init__(self, rho=None):
            self.rho = rho

        def fit(self, X, y):
            return self

        def predict(self, X):
            return np.exp(self.rho.predict(X))

        def __sklearn_is_fitted__(self):
            return True

    X, y, _ = cs.heteroscedastic_data(500, 5, 1.0, seed=0)
    m = cs.fit_cp_models(X[:250], y[:250], 0.1, "linear", seed=0)
    fams = cs.make_families(m)
    Xc, yc, Xt = X[250:400], y[250:400], X[400:]
    sc = ResidualNormalisedScore(residual_estimator=ExpScale(m["rho"]), prefit=True)
    refs = {
        "absolute": SplitConformalRegressor(m["mu"], confidence_level=0.9, conformity_score="absolute", prefit=True)
        .conformalize(Xc, yc).predict_interval(Xt)[1][:, :, 0],
        "normalized": SplitConformalRegressor(m["mu"], confidence_level=0.9, conformity_score=sc, prefit=True)
        .conformalize(Xc, yc).predict_interval(Xt)[1][:, :, 0],
        "cqr": ConformalizedQuantileRegressor([m["lo"], m["hi"], m["median"]], confidence_level=0.9, prefit=True)
        .conformalize(Xc, yc).predict_interval(Xt, symmetric_correction=True)[1][:, :, 0],
    }
    for name, fam in fams.items():
        lo, hi, _ = cs.conformal_interval(fam, Xc, yc, Xt, 0.1)
        assert np.allclose(lo, refs[name][:, 0], atol=1e-10) and np.allclose(hi, refs[name][:, 1], atol=1e-10)


def test_instance_view_equals_shap():
    os.environ.setdefault("NUMBA_DISABLE_JIT", "1")
    import shap
    X, y = _data(seed=8)
    mu, rho, _, _ = _fams()
    bg = X[100:110]
    fam = cs.NormalizedCP({"mu": mu, "rho": rho}, "log_width")
    a = cs.decompose_width(fam, X[:60], y[:60], X[60:64], bg, 0.1, convention="reference")
    ex = shap.explainers.Exact(rho, shap.maskers.Independent(bg, max_samples=len(bg)))
    assert np.allclose(ex(X[60:64]).values, a.instance, atol=1e-10)
    c = cs.decompose_width(fam, X[:60], y[:60], X[60:64], bg, 0.1, convention="centered")
    assert np.allclose(ex(X[60:64]).values - ex(X[:60]).values.mean(0), c.instance, atol=1e-10)


def test_recall_at_budget_and_errors():
    assert cs.recall_at_budget(np.arange(20.0), np.arange(20.0), 0.1) == 1.0
    assert cs.recall_at_budget(-np.arange(20.0), np.arange(20.0), 0.1) == 0.0
    assert cs.recall_at_budget(np.r_[np.arange(19.0), -1.0], np.arange(20.0), 0.1) == 0.5
    X, y = _data()
    fam = cs.AbsoluteCP({"mu": lambda Z: Z[:, 0]})
    with pytest.raises(ValueError):
        cs.decompose_width(fam, X[:30], y[:30], X[30:32], X[:5], method="nope")
    with pytest.raises(ValueError):
        cs.decompose_width(fam, X[:30], y[:30], X[30:32], X[:5], convention="nope")
    with pytest.raises(ValueError):
        cs.NormalizedCP({}, "area")


def test_data_generators():
    X, y, s = cs.heteroscedastic_data(200, 10, 1.0, seed=3)
    assert X.shape == (200, 10) and np.allclose(s, np.exp(X[:, 0]))
    Xd, yd, sd = cs.diabetes_task(seed=0)
    assert Xd.shape == (442, 11) and np.allclose(sd, 0.5 * np.exp(0.5 * (Xd[:, 2] + Xd[:, 8] + Xd[:, 10])))
    Xd2, yd2, _ = cs.diabetes_task(seed=0)
    assert np.array_equal(yd, yd2)
