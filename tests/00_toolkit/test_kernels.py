"""Unit tests for paper_suite.kernels against references that share none of its code: scikit-learn's
KernelRidge and pairwise kernels, SciPy distances, and brute-force leave-one-out refits."""
import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist, pdist
from sklearn.kernel_ridge import KernelRidge as SkKernelRidge
from sklearn.metrics.pairwise import linear_kernel as sk_linear
from sklearn.metrics.pairwise import rbf_kernel as sk_rbf

from paper_suite.kernels import (KernelRidge, as_tensor, gamma_from_sigma, krr_loo_residuals, krr_solve,
                                 linear_kernel, median_heuristic, rbf_kernel, sq_dists)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X, Z = rng.normal(size=(40, 6)), rng.normal(size=(11, 6))
    y = np.sin(X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=40)
    return X, Z, y


def test_as_tensor_dtype_and_passthrough():
    t = as_tensor(np.ones((2, 3), dtype=np.float32))
    assert t.dtype == torch.float64 and t.shape == (2, 3)
    assert as_tensor(torch.ones(2), dtype=torch.float32).dtype == torch.float32


def test_sq_dists_matches_scipy(data):
    X, Z, _ = data
    assert np.allclose(sq_dists(X, Z).numpy(), cdist(X, Z, "sqeuclidean"))
    D = sq_dists(X).numpy()
    assert (D >= 0).all() and np.allclose(np.diag(D), 0, atol=1e-10)


def test_sq_dists_is_hamming_on_binary():
    B = (np.random.default_rng(1).random((9, 13)) < 0.5).astype(float)
    assert np.array_equal(sq_dists(B).numpy().round(), cdist(B, B, "hamming") * 13)


@pytest.mark.parametrize("gamma", [0.01, 0.3, 2.0])
def test_rbf_matches_sklearn(data, gamma):
    X, Z, _ = data
    assert np.allclose(rbf_kernel(X, Z, gamma=gamma).numpy(), sk_rbf(X, Z, gamma=gamma))


def test_linear_matches_sklearn(data):
    X, Z, _ = data
    assert np.allclose(linear_kernel(X, Z).numpy(), sk_linear(X, Z))
    assert np.allclose(linear_kernel(X).numpy(), sk_linear(X))


def test_median_heuristic_matches_scipy(data):
    X, _, _ = data
    assert median_heuristic(X) == pytest.approx(np.median(pdist(X)), rel=1e-12)
    assert gamma_from_sigma(2.0) == pytest.approx(1 / 8)


def test_median_heuristic_subsample_and_degenerate():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 3))
    s = median_heuristic(X, max_n=100, seed=0)
    assert s == median_heuristic(X, max_n=100, seed=0)               # seeded
    assert abs(s - np.median(pdist(X))) / np.median(pdist(X)) < 0.15  # a subsample of the same distribution
    assert median_heuristic(np.zeros((5, 2))) == 1.0
    D = np.zeros((10, 2))
    D[0] = 3.0                                                        # 9 of 45 pairs at distance > 0
    assert median_heuristic(D) == pytest.approx(np.hypot(3, 3))


def test_krr_solve_matches_sklearn_dual(data):
    X, _, y = data
    K = rbf_kernel(X, gamma=0.2)
    ref = SkKernelRidge(alpha=0.05, kernel="rbf", gamma=0.2).fit(X, y)
    assert np.allclose(krr_solve(K, y, 0.05).numpy(), ref.dual_coef_)
    Y2 = np.column_stack([y, -2 * y])                                 # several targets at once
    assert np.allclose(krr_solve(K, Y2, 0.05).numpy(), np.column_stack([ref.dual_coef_, -2 * ref.dual_coef_]))


@pytest.mark.parametrize("lam", [1e-3, 0.1, 3.0])
def test_loo_residuals_match_refits(data, lam):
    X, _, y = data
    K = rbf_kernel(X, gamma=0.2)
    brute = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        m = SkKernelRidge(alpha=lam, kernel="rbf", gamma=0.2).fit(X[keep], y[keep])
        brute.append(y[i] - m.predict(X[i:i + 1])[0])
    assert np.allclose(krr_loo_residuals(K, y, lam).numpy(), brute, atol=1e-8)


def test_estimator_rbf_matches_sklearn(data):
    X, Z, y = data
    m = KernelRidge("rbf", lam=0.1, gamma=0.3, fit_intercept=False).fit(X, y)
    ref = SkKernelRidge(alpha=0.1, kernel="rbf", gamma=0.3).fit(X, y)
    assert np.allclose(m.predict(Z).numpy(), ref.predict(Z))


def test_estimator_intercept_and_median_default(data):
    X, Z, y = data
    m = KernelRidge("rbf", lam=0.1).fit(X, y)
    g = 1 / (2 * np.median(pdist(X)) ** 2)
    ref = SkKernelRidge(alpha=0.1, kernel="rbf", gamma=g).fit(X, y - y.mean())
    assert m.gamma_ == pytest.approx(g)
    assert np.allclose(m.predict(Z).numpy(), ref.predict(Z) + y.mean())


def test_estimator_linear_is_ridge(data):
    from sklearn.linear_model import Ridge
    X, Z, y = data
    mu = X.mean(0)
    m = KernelRidge("linear", lam=0.7).fit(X - mu, y)
    assert np.allclose(m.predict(Z - mu).numpy(), Ridge(alpha=0.7).fit(X, y).predict(Z))


def test_lam_grid_picks_brute_force_loo_minimum(data):
    X, _, y = data
    grid = [1e-4, 1e-2, 1e-1, 1.0, 10.0]
    m = KernelRidge("rbf", lam=grid, gamma=0.2, fit_intercept=False).fit(X, y)
    loo = []
    for lam in grid:
        err = 0.0
        for i in range(len(y)):
            keep = np.arange(len(y)) != i
            r = SkKernelRidge(alpha=lam, kernel="rbf", gamma=0.2).fit(X[keep], y[keep])
            err += (y[i] - r.predict(X[i:i + 1])[0]) ** 2
        loo.append(err)
    assert m.lam_ == grid[int(np.argmin(loo))]
    assert m.loo_mse_ == pytest.approx(min(loo) / len(y), rel=1e-8)


def test_unknown_kernel_raises():
    with pytest.raises(ValueError, match="unknown kernel"):
        KernelRidge("poly")
