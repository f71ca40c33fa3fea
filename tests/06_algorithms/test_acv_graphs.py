"""Tests of paper_suite.algorithms.acv_graphs against references that share no code with it: explicit
least-squares and lasso refits (numpy, scikit-learn's Lasso/LassoCV), scikit-learn's metrics, closed forms
and properties (symmetry, invariance, KKT)."""
import math

import networkx as nx
import numpy as np
import pytest
from sklearn.linear_model import Lasso, LassoCV
from sklearn.metrics import matthews_corrcoef, precision_score, recall_score

from paper_suite.algorithms.acv_graphs import (GRAPHS, acv_graph, acv_score, acv_sizes, alo_curve, alo_residuals,
                                               and_graph, delete_d_residuals, delete_d_splits, ebic, edge_metrics,
                                               entry_order, ggm_precision, ggm_sample, glasso_ebic_graph,
                                               kfold_curve, lambda_grid, lasso_coefs, loo_curve, make_graph,
                                               node_paths, prefix_ols, prefix_scores, split_grams, standardize,
                                               stars_index)


def ols(X, y):
    return np.linalg.lstsq(X, y, rcond=None)[0]


@pytest.fixture(scope="module")
def reg():
    r = np.random.default_rng(0)
    X = r.standard_normal((90, 7))
    y = X @ np.array([1.2, -0.8, 0, 0, 0.5, 0, 0]) + 0.7 * r.standard_normal(90)
    return X - X.mean(0), y - y.mean()


@pytest.fixture(scope="module")
def ggm():
    Th = ggm_precision(make_graph("er", 15, seed=5), seed=5)
    return Th, standardize(ggm_sample(Th, 500, seed=5))


# ---- data ---------------------------------------------------------------------------------------

def test_make_graph_kinds_and_errors():
    assert make_graph("chain", 12).number_of_edges() == 11
    lat = make_graph("lattice", 20)
    assert lat.number_of_edges() == 31 and max(d for _, d in lat.degree()) == 4 and nx.is_connected(lat)
    hub = make_graph("hub", 25)
    assert sorted(d for _, d in hub.degree())[-3:] == [4, 9, 9]
    assert set(make_graph("er", 30, seed=1).edges()) == set(make_graph("er", 30, seed=1).edges())
    assert set(GRAPHS) == {"chain", "lattice", "er", "hub"}
    with pytest.raises(ValueError, match="allowed: chain, lattice, er, hub"):
        make_graph("star", 10)


def test_precision_pattern_dominance_and_sampler():
    G = make_graph("er", 20, seed=2)
    Th = ggm_precision(G, seed=2)
    A = nx.to_numpy_array(G, nodelist=range(20)) > 0
    assert np.array_equal(Th != 0, A | np.eye(20, dtype=bool)) and np.allclose(Th, Th.T)
    off = np.abs(Th).sum(1) - np.diag(Th)
    assert np.allclose(np.diag(Th) - off, 0.2)
    assert np.all((np.abs(Th[A]) >= 0.3) & (np.abs(Th[A]) <= 0.5))
    assert np.linalg.eigvalsh(Th).min() >= 0.2 - 1e-12
    X = ggm_sample(Th, 100_000, seed=0)
    assert np.abs(np.cov(X.T) - np.linalg.inv(Th)).max() < 0.05
    assert np.array_equal(ggm_sample(Th, 5, seed=3), ggm_sample(Th, 5, seed=3))


def test_edge_metrics_against_sklearn():
    r = np.random.default_rng(1)
    for _ in range(5):
        T = np.triu(r.random((12, 12)) < 0.2, 1)
        H = np.triu(r.random((12, 12)) < 0.25, 1)
        T, H = T | T.T, H | H.T
        iu = np.triu_indices(12, 1)
        m = edge_metrics(H, T)
        assert math.isclose(m["precision"], precision_score(T[iu], H[iu]))
        assert math.isclose(m["recall"], recall_score(T[iu], H[iu]))
        assert math.isclose(m["mcc"], matthews_corrcoef(T[iu], H[iu]))
    assert edge_metrics(T, T)["exact"] == 1.0 and edge_metrics(T, T)["false_edges"] == 0


# ---- leave-one-out and ALO ----------------------------------------------------------------------

def test_alo_residuals_equal_loo_refits_for_least_squares(reg):
    X, y = reg
    loo = [y[i] - X[i] @ ols(np.delete(X, i, 0), np.delete(y, i)) for i in range(len(y))]
    np.testing.assert_allclose(alo_residuals(X, y, ols(X, y)), loo, atol=1e-12)


def test_alo_is_exact_lasso_loo_when_the_active_set_is_stable(reg):
    """With the summed-loss penalty λ = nα held fixed (sklearn alpha n α / (n - 1) on n - 1 rows), deleting a
    point that keeps the active set and signs gives exactly the ALO residual, Eq. (6)."""
    X, y = reg
    n, a = len(y), 0.05
    fit = Lasso(alpha=a, fit_intercept=False, tol=1e-14, max_iter=10**6).fit(X, y).coef_
    alo = alo_residuals(X, y, fit)
    stable = 0
    for i in range(n):
        b = Lasso(alpha=n * a / (n - 1), fit_intercept=False, tol=1e-14, max_iter=10**6).fit(
            np.delete(X, i, 0), np.delete(y, i)).coef_
        if np.array_equal(np.sign(b), np.sign(fit)):
            stable += 1
            assert abs(y[i] - X[i] @ b - alo[i]) < 1e-7
    assert stable > n // 2


def test_alo_empty_active_set_and_curve(reg):
    X, y = reg
    assert np.array_equal(alo_residuals(X, y, np.zeros(7)), y)
    al = np.geomspace(0.5, 0.01, 8)
    C = lasso_coefs(X, y, al)
    assert np.allclose(alo_curve(X, y, C), [np.mean(alo_residuals(X, y, C[:, l]) ** 2) for l in range(8)])


# ---- delete-d -----------------------------------------------------------------------------------

@pytest.mark.parametrize("nv", [1, 7, 60])
def test_delete_d_residuals_equal_refits(reg, nv):
    X, y = reg
    V = np.random.default_rng(nv).choice(len(y), nv, replace=False)
    keep = np.setdiff1d(np.arange(len(y)), V)
    ref = y[V] - X[V] @ ols(X[keep], y[keep])
    np.testing.assert_allclose(delete_d_residuals(X, y, V), ref, atol=1e-10)
    mask = np.zeros(len(y), bool)
    mask[V] = True
    np.testing.assert_allclose(delete_d_residuals(X, y, mask), ref[np.argsort(V)], atol=1e-10)   # mask: row order


def test_delete_d_edge_cases(reg):
    X, y = reg
    assert np.array_equal(delete_d_residuals(X[:, :0], y, [3, 4]), y[[3, 4]])
    with pytest.raises(ValueError, match="training rows"):
        delete_d_residuals(X, y, np.arange(85))
    with pytest.raises(ValueError, match="length n"):
        delete_d_residuals(X, y, np.ones(10, bool))


def test_splits_shape_nesting_and_errors():
    V = delete_d_splits(40, 9, 6, seed=2)
    assert V.shape == (6, 40) and V.dtype == bool and np.all((~V).sum(1) == 9)
    assert np.array_equal(delete_d_splits(40, 9, 2, seed=2), V[:2])
    assert not np.array_equal(V[0], V[1])
    with pytest.raises(ValueError):
        delete_d_splits(40, 40, 2)


def test_acv_score_against_refits(reg):
    X, y = reg
    sp = delete_d_splits(len(y), 25, 4, seed=0)
    ref = np.mean([np.mean((y[v] - X[v][:, [0, 1, 4]] @ ols(X[~v][:, [0, 1, 4]], y[~v])) ** 2) for v in sp])
    assert math.isclose(acv_score(X, y, [0, 1, 4], sp), ref, rel_tol=1e-12)
    assert math.isclose(acv_score(X, y, [], sp), np.mean([np.mean(y[v] ** 2) for v in sp]), rel_tol=1e-12)


def test_prefix_scores_equal_acv_score(ggm):
    _, X = ggm
    sp = delete_d_splits(len(X), 60, 25, seed=1)
    GT, GV = split_grams(X, sp)
    o = [4, 9, 2, 11, 7, 1]
    fast = prefix_scores(GT, GV, 3, o, len(X) - 60)
    np.testing.assert_allclose(fast, [acv_score(X, X[:, 3], o[:k], sp) for k in range(len(o) + 1)], rtol=1e-10)


def test_acv_sizes_rules():
    n, p = 800, 20
    n_c, B = acv_sizes(n, p)
    assert n_c == int(n / (math.log(n) + 2 * math.log(190)))
    lam = 1 + n / n_c
    assert math.comb(p, 2) * math.exp(-lam / 2) <= math.exp(-0.5) / math.sqrt(n)      # Eq. (15)
    assert B == math.ceil((n / n_c) ** 2 * math.log(math.log(n)))
    assert acv_sizes(1600, 20, "shao")[0] == int(1600 ** 0.75)
    with pytest.raises(ValueError, match="allowed: union, shao"):
        acv_sizes(100, 10, "loo")
    with pytest.raises(ValueError, match="too small"):
        acv_sizes(20, 50)


# ---- paths and selectors ------------------------------------------------------------------------

def test_lambda_grid_top_is_the_kkt_threshold(ggm):
    _, X = ggm
    al = lambda_grid(X)
    C = node_paths(X, al)
    assert not C[:, :, 0].any() and C[:, :, 1].any()                 # α_max: every node empty; just below: not
    assert np.all(C[np.arange(15), np.arange(15)] == 0)


def test_node_paths_match_sklearn_lasso(ggm):
    _, X = ggm
    al = lambda_grid(X)
    C = node_paths(X, al)
    o = np.delete(np.arange(15), 6)
    ref = Lasso(alpha=al[12], fit_intercept=False, tol=1e-12, max_iter=10**6).fit(X[:, o], X[:, 6]).coef_
    np.testing.assert_allclose(C[6, o, 12], ref, atol=1e-5)


def test_entry_order_and_and_graph():
    c = np.array([[0, 0, 1, 2], [0, 3, 3, 3], [0, 0, 0, 0], [0, 0, -2, 1]], float)
    assert entry_order(c).tolist() == [1, 3, 0] and entry_order(c, 2).tolist() == [1, 3]
    S = np.array([[1, 1, 1], [1, 0, 0], [0, 1, 0]], bool)
    assert and_graph(S).tolist() == [[False, True, False], [True, False, False], [False, False, False]]


def test_kfold_curve_is_lassocv(ggm):
    _, X = ggm
    al = lambda_grid(X)
    m = LassoCV(alphas=al, cv=10, fit_intercept=False, tol=1e-8).fit(X[:, 1:], X[:, 0])
    np.testing.assert_allclose(kfold_curve(X[:, 1:], X[:, 0], al), m.mse_path_.mean(1), rtol=1e-4)


def test_loo_curve_against_explicit_refits(reg):
    X, y = reg[0][:40], reg[1][:40]
    al = np.array([0.3, 0.05])
    ref = [np.mean([(y[i] - X[i] @ Lasso(alpha=a, fit_intercept=False, tol=1e-12, max_iter=10**6)
                     .fit(np.delete(X, i, 0), np.delete(y, i)).coef_) ** 2 for i in range(40)]) for a in al]
    np.testing.assert_allclose(loo_curve(X, y, al), ref, rtol=1e-5)


def test_prefix_ols_rss_and_press(reg):
    X, y = reg
    rss, press = prefix_ols(X, y, [4, 0, 1])
    for k, S in enumerate([[], [4], [4, 0], [4, 0, 1]]):
        if S:
            b = ols(X[:, S], y)
            e = y - X[:, S] @ b
            loo = [y[i] - X[i, S] @ ols(np.delete(X[:, S], i, 0), np.delete(y, i)) for i in range(len(y))]
        else:
            e, loo = y, y
        assert math.isclose(rss[k], np.sum(e ** 2), rel_tol=1e-10)
        assert math.isclose(press[k], np.sum(np.square(loo)), rel_tol=1e-10)


def test_ebic_formula():
    assert math.isclose(ebic(np.array([50.0]), np.array([3]), 100, 21, 0.5)[0],
                        100 * math.log(0.5) + 3 * math.log(100) + 3 * math.log(20))


def test_stars_instability_rule(ggm):
    _, X = ggm
    al = lambda_grid(X)
    l, D = stars_index(X, al, N=6, beta=0.05, seed=0)
    assert np.all(np.diff(D) >= 0) and 0 <= D[0] and D[-1] <= 0.5 and D[l] <= 0.05
    assert l == len(al) - 1 or D[l + 1] > 0.05


def test_acv_graph_properties_and_recovery():
    Th = ggm_precision(make_graph("chain", 12), seed=1)
    X = ggm_sample(Th, 3000, seed=1)
    A = acv_graph(X, seed=0)
    assert A.dtype == bool and np.array_equal(A, A.T) and not A.diagonal().any()
    assert edge_metrics(A, Th != 0)["exact"] == 1.0
    assert np.array_equal(acv_graph(3.0 * X + 5.0, seed=0), A)                # centred and scaled inside
    perm = np.random.default_rng(0).permutation(12)
    assert np.array_equal(acv_graph(X[:, perm], seed=0), A[np.ix_(perm, perm)])   # relabelling nodes


def test_acv_rejects_what_plain_cv_keeps():
    """On one Erdős–Rényi data set ACV keeps no false edge where delete-1 CV on the same candidates keeps many."""
    Th = ggm_precision(make_graph("er", 20, seed=3), seed=3)
    X = standardize(ggm_sample(Th, 1600, seed=3))
    assert edge_metrics(acv_graph(X, seed=0), Th != 0)["false_edges"] == 0
    C = node_paths(X, lambda_grid(X))
    S = np.zeros((20, 20), bool)
    for j in range(20):
        o = entry_order(C[j])
        S[j, o[:int(np.argmin(prefix_ols(X, X[:, j], o)[1]))]] = True
    assert edge_metrics(and_graph(S), Th != 0)["false_edges"] >= 3


def test_glasso_ebic_recovers_an_easy_chain():
    Th = ggm_precision(make_graph("chain", 8), seed=0)
    A = glasso_ebic_graph(standardize(ggm_sample(Th, 4000, seed=0)))
    assert np.array_equal(A, A.T) and edge_metrics(A, Th != 0)["recall"] == 1.0
