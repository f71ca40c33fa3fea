"""paper_suite.games against independent references: shap's exact explainers, closed forms, axioms."""
import itertools
import math
import os

import numpy as np
import pytest

from paper_suite.games import (CountingGame, InterventionalGame, TableGame, all_coalitions, evaluate,
                               harsanyi_dividends, kernel_regression, kernel_shap, mask_index,
                               permutation_shapley, random_game, shapley_exact, shapley_from_table,
                               shapley_kernel, table_from_dividends)


def _shapley_by_orders(table, n):
    """Shapley values as the average marginal contribution over all n! orders (no shared code)."""
    phi = np.zeros(n)
    for order in itertools.permutations(range(n)):
        k = 0
        for i in order:
            phi[i] += table[k | (1 << i)] - table[k]
            k |= 1 << i
    return phi / math.factorial(n)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_exact_matches_average_over_orders(n):
    t = random_game(n, seed=n)
    assert np.allclose(shapley_exact(TableGame(t), n), _shapley_by_orders(t, n), atol=1e-12)


def test_axioms_efficiency_symmetry_null_linearity():
    n = 5
    rng = np.random.default_rng(0)
    d = rng.standard_normal(2**n)
    m = all_coalitions(n)
    d[m[:, 4]] = 0.0                       # player 4 in no dividend: a null player
    sym = m[:, 0] != m[:, 1]
    d[sym & m[:, 1]] = d[mask_index(m[sym & m[:, 1]] ^ np.eye(n, dtype=bool)[0] ^ np.eye(n, dtype=bool)[1])]
    t = table_from_dividends(d)
    phi = shapley_from_table(t)
    assert np.isclose(phi.sum(), t[-1] - t[0])
    assert phi[4] == 0.0
    assert np.isclose(phi[0], phi[1])
    t2 = random_game(n, seed=9)
    assert np.allclose(shapley_from_table(2 * t - 3 * t2), 2 * phi - 3 * shapley_from_table(t2))


def test_dividends_round_trip_and_unanimity():
    t = random_game(6, seed=4)
    assert np.allclose(table_from_dividends(harsanyi_dividends(t)), t)
    u = np.zeros(64); u[0b001011] = 1.0   # unanimity game of {0, 1, 3}
    phi = shapley_from_table(table_from_dividends(u))
    assert np.allclose(phi, [1 / 3, 1 / 3, 0, 1 / 3, 0, 0])


def test_kernel_regression_all_coalitions_is_exact():
    n = 7
    t = random_game(n, seed=5)
    masks = all_coalitions(n)[1:-1]
    phi = kernel_regression(masks, t[1:-1], t[0], t[-1], shapley_kernel(n, masks.sum(1)))
    assert np.allclose(phi, shapley_from_table(t), atol=1e-10)


def test_estimators_are_efficient_and_converge():
    n = 5
    t = random_game(n, seed=6)
    phi = shapley_from_table(t)
    for est in (lambda s: permutation_shapley(TableGame(t), n, 2 + 4 * 20_000, seed=s),
                lambda s: kernel_shap(TableGame(t), n, 20_000, seed=s)):
        e = est(0)
        assert np.isclose(e.sum(), t[-1] - t[0])
        assert np.abs(e - phi).max() < 0.1


def test_budgets_are_respected():
    t = random_game(6, seed=7)
    for f, b in ((permutation_shapley, 2 + 5 * 3), (kernel_shap, 30)):
        g = CountingGame(TableGame(t))
        f(g, 6, b, seed=0)
        assert g.calls == b


def test_evaluate_accepts_plain_and_batched_functions():
    masks = all_coalitions(3)
    plain = lambda m: float(m @ np.array([1.0, 2.0, 4.0]))
    assert np.array_equal(evaluate(plain, masks), np.arange(8.0))
    assert np.array_equal(evaluate(TableGame(np.arange(8.0)), masks), np.arange(8.0))


# --- against shap --------------------------------------------------------------------------------
# shap's explainers compile numba kernels on first use (about 10 s); interpreted, they are instant at
# these sizes. This only takes effect if numba was not imported before this module.
os.environ.setdefault("NUMBA_DISABLE_JIT", "1")
shap = pytest.importorskip("shap")


def _small_models(seed=0):
    from sklearn.neural_network import MLPRegressor
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((200, 6))
    y = X[:, 0] * X[:, 1] + np.sin(X[:, 2]) + 0.5 * X[:, 3] ** 2 + 0.1 * rng.standard_normal(200)
    mlp = MLPRegressor(hidden_layer_sizes=(16,), max_iter=300, random_state=seed).fit(X, y)
    return X, y, mlp


@pytest.mark.filterwarnings("ignore")
def test_exact_matches_shap_exact_explainer_on_mlp():
    X, _, mlp = _small_models()
    bg, xs = X[:20], X[100:103]
    ref = shap.explainers.Exact(mlp.predict, shap.maskers.Independent(bg, max_samples=len(bg)))(xs).values
    ours = np.array([shapley_exact(InterventionalGame(mlp.predict, x, bg), 6) for x in xs])
    assert np.allclose(ours, ref, atol=1e-8)


@pytest.mark.filterwarnings("ignore")
def test_exact_matches_interventional_treeshap_on_xgboost():
    xgb = pytest.importorskip("xgboost")
    X, y, _ = _small_models(1)
    model = xgb.XGBRegressor(n_estimators=30, max_depth=3, nthread=1, random_state=0).fit(X, y)
    bg, xs = X[:25], X[150:153]
    ref = shap.TreeExplainer(model, data=bg, feature_perturbation="interventional").shap_values(xs)
    ours = np.array([shapley_exact(InterventionalGame(model.predict, x, bg), 6) for x in xs])
    assert np.allclose(ours, ref, atol=1e-4)   # TreeSHAP works in float32
