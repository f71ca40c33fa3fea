"""paper_suite.dynamics.fisher_memorization against sklearn, numpy's lstsq and pinv, brute force and properties."""
import numpy as np
import pytest
import torch
import torch.nn as nn
from sklearn.linear_model import LinearRegression

from paper_suite.curvature import per_sample_jacobians
from paper_suite.dynamics.fisher_memorization import (noisy_leverage, project_top_fisher, projected_interpolator,
                                                      true_fisher)


def test_projected_interpolator_full_rank_is_min_norm_interpolator():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((20, 35)), rng.standard_normal(20)
    w = projected_interpolator(X, y, 20)
    assert np.allclose(w, np.linalg.pinv(X) @ y) and np.allclose(X @ w, y)


@pytest.mark.parametrize("k", [1, 3, 7])
def test_projected_interpolator_is_principal_component_regression(k):
    """Eq. (3) = least squares on the top-k right singular directions (sklearn, no intercept)."""
    rng = np.random.default_rng(k)
    X, y = rng.standard_normal((25, 40)), rng.standard_normal(25)
    V = np.linalg.eigh(X.T @ X / 25)[1][:, ::-1][:, :k]                   # top-k Fisher eigenvectors
    coef = LinearRegression(fit_intercept=False).fit(X @ V, y).coef_
    assert np.allclose(projected_interpolator(X, y, k), V @ coef)


def test_noisy_leverage_is_expected_fitted_fraction():
    """Monte Carlo of Eq. (4) with Gaussian corruption on N against Eq. (5)."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((40, 60)) * np.r_[np.full(3, 6.0), np.ones(57)]
    N = np.arange(0, 40, 5)
    k = 6
    eta = np.zeros((20000, 40))
    eta[:, N] = rng.standard_normal((20000, N.size))
    fitted = np.stack([X @ projected_interpolator(X, e, k) for e in eta[:300]])
    frac_model = np.mean((fitted * eta[:300]).sum(1) / (eta[:300] ** 2).sum(1))
    U = np.linalg.svd(X, full_matrices=False)[0][:, :k]
    frac_mc = np.mean(((eta @ U) ** 2).sum(1) / (eta ** 2).sum(1))
    lev = noisy_leverage(X, N, k)
    assert abs(frac_mc - lev) < 0.01 and abs(frac_model - lev) < 0.04
    assert np.isclose(noisy_leverage(X, np.arange(40), k), k / 40)
    assert noisy_leverage(X, N, 0) == 0.0 and np.isclose(noisy_leverage(X, N, 40), 1.0)


def test_bad_input():
    X = np.ones((4, 6))
    with pytest.raises(ValueError, match="k must be"):
        projected_interpolator(np.eye(4, 6), np.ones(4), 5)
    with pytest.raises(ValueError, match="noisy must be"):
        noisy_leverage(X, [7], 1)
    with pytest.raises(ValueError, match="disagree"):
        project_top_fisher(torch.zeros(3), torch.zeros(3), torch.eye(4), 1)


def test_project_top_fisher_against_eigh_projector():
    g = torch.Generator().manual_seed(0)
    A = torch.randn(10, 10, generator=g, dtype=torch.float64)
    F = A @ A.T
    th, ref = torch.randn(10, generator=g, dtype=torch.float64), torch.randn(10, generator=g, dtype=torch.float64)
    vals, vecs = np.linalg.eigh(F.numpy())
    U = vecs[:, ::-1][:, :3]
    want = ref.numpy() + U @ U.T @ (th - ref).numpy()
    assert np.allclose(project_top_fisher(th, ref, F, 3).numpy(), want)
    assert torch.allclose(project_top_fisher(th, ref, F, 10), th) and torch.allclose(project_top_fisher(th, ref, F, 0), ref)


def test_true_fisher_gauss_newton_form_and_linear_softmax_closed_form():
    """For a linear softmax model z = Wx + b the Jacobian is known: F = mean (H_i ⊗ [x_i;1][x_i;1]ᵀ) in θ order (W row-major, b)."""
    torch.manual_seed(0)
    m = nn.Linear(3, 4).double()
    X = torch.randn(6, 3, dtype=torch.float64)
    F = true_fisher(m, X)
    p = torch.softmax(m(X), -1).detach()
    ref = torch.zeros(16, 16, dtype=torch.float64)
    for i in range(6):
        H = torch.diag(p[i]) - torch.outer(p[i], p[i])
        Jw = torch.kron(torch.eye(4, dtype=torch.float64), X[i:i + 1])          # ∂z/∂vec_row(W), (4, 12)
        J = torch.cat([Jw, torch.eye(4, dtype=torch.float64)], 1)
        ref += J.T @ H @ J / 6
    assert torch.allclose(F, ref) and torch.allclose(per_sample_jacobians(m, X)[0], torch.cat(
        [torch.kron(torch.eye(4, dtype=torch.float64), X[:1]), torch.eye(4, dtype=torch.float64)], 1))
