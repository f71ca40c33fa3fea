"""Tests of paper_suite.dynamics.augmentation_theory against references that share none of its code:
scikit-learn's Ridge, numpy's lstsq on explicitly stacked augmented data, Monte Carlo over augmentations,
scipy's quad, the Marchenko-Pastur closed form, and simulation of the fitted estimators."""
import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.stats import norm
from sklearn.linear_model import Ridge

from paper_suite.dynamics.augmentation_theory import (SCHEMES, arccos_relu, augmentation_moments, augmented_ridge,
                                                      finite_k_additive, hermite_coeffs, mehler_moment,
                                                      relu_smoothed, rf_moments, ridge_risk_equivalent,
                                                      augmented_mse_equivalent)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_augmented_ridge_is_sklearn_ridge_without_augmentation(rng):
    M, y = rng.normal(size=(50, 7)), rng.normal(size=50)
    w = augmented_ridge(M, y, np.zeros((7, 7)), 0.3)
    sk = Ridge(alpha=0.3 * 50, fit_intercept=False).fit(M, y)
    np.testing.assert_allclose(w, sk.coef_, rtol=1e-10)


def test_augmented_ridge_penalty_equals_appended_rows(rng):
    M, y = rng.normal(size=(40, 6)), rng.normal(size=40)
    L = rng.normal(size=(6, 6)) * 0.3
    C = L @ L.T
    # w^T C w = ||L^T w||^2 / n * n: append sqrt(n) L^T rows with zero targets, then ridge
    A = np.vstack([M, math.sqrt(40) * L.T])
    sk = Ridge(alpha=0.2 * 40, fit_intercept=False).fit(A, np.concatenate([y, np.zeros(6)]))
    np.testing.assert_allclose(augmented_ridge(M, y, C, 0.2), sk.coef_, rtol=1e-9)


def test_augmented_ridge_equals_explicit_stack(rng):
    n, p, k, lam = 25, 5, 7, 0.05
    X, y = rng.normal(size=(n, p)), rng.normal(size=n)
    F = X[None] * (rng.random((k, n, p)) > 0.3) / 0.7                       # k masked copies
    A = np.vstack([F.reshape(-1, p) / math.sqrt(n * k), math.sqrt(lam) * np.eye(p)])
    w_ref = np.linalg.lstsq(A, np.concatenate([np.tile(y, k) / math.sqrt(n * k), np.zeros(p)]), rcond=None)[0]
    Fb = F.mean(0)
    C = np.einsum("lni,lnj->ij", F - Fb, F - Fb) / (n * k)
    np.testing.assert_allclose(augmented_ridge(Fb, y, C, lam), w_ref, rtol=1e-9, atol=1e-12)


def test_augmented_ridge_bad_input(rng):
    with pytest.raises(ValueError, match="C_bar"):
        augmented_ridge(rng.normal(size=(5, 3)), rng.normal(size=5), np.eye(4), 0.1)
    with pytest.raises(ValueError, match="lam"):
        augmented_ridge(rng.normal(size=(5, 3)), rng.normal(size=5), np.eye(3), -1.0)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_augmentation_moments_match_monte_carlo(scheme):
    r = np.random.default_rng(1)
    X = r.normal(size=(30, 4)) * [1.0, 2.0, 0.5, 1.5]
    mu = np.array([0.3, -0.5, 1.0, 0.0])
    Sa = np.diag([0.2, 0.4, 0.1, 0.3])
    draw = {"additive": (Sa, lambda: X + r.normal(size=X.shape) * np.sqrt(np.diag(Sa))),
            "mask": (0.3, lambda: X * (r.random(X.shape) > 0.3) / 0.7),
            "scale": (0.25, lambda: X * (1 + 0.5 * r.normal(size=(30, 1)))),
            "shift": ((mu, 0.2), lambda: X + mu + math.sqrt(0.2) * r.normal(size=X.shape))}
    st, f = draw[scheme]
    T = np.stack([f() for _ in range(6000)])
    M, C = augmentation_moments(X, scheme, st)
    Cmc = np.einsum("tni,tnj->ij", T - T.mean(0), T - T.mean(0)) / (T.shape[0] * T.shape[1])
    np.testing.assert_allclose(T.mean(0), M, atol=0.12)
    np.testing.assert_allclose(Cmc, C, atol=0.05 * np.abs(C).max() + 0.01)


def test_augmentation_moments_errors(rng):
    X = rng.normal(size=(10, 3))
    with pytest.raises(ValueError, match="allowed: additive, mask, scale, shift"):
        augmentation_moments(X, "rotate", 0.1)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        augmentation_moments(X, "mask", 1.0)
    with pytest.raises(ValueError, match="scale"):
        augmentation_moments(X, "scale", -0.1)


def test_ridge_risk_equivalent_isotropic_closed_form():
    n, p, lam, s2 = 300, 150, 0.2, 0.5
    g = p / n
    beta = np.ones(p) / math.sqrt(p)
    r = ridge_risk_equivalent(np.eye(p), lam * np.eye(p), beta, s2, n)
    k = ((lam + g - 1) + math.sqrt((lam + g - 1) ** 2 + 4 * lam)) / 2           # MP effective ridge
    d2 = g / (1 + k) ** 2
    assert math.isclose(r["bias"], k ** 2 / (1 + k) ** 2 / (1 - d2), rel_tol=1e-9)
    assert math.isclose(r["variance"], s2 * d2 / (1 - d2), rel_tol=1e-9)
    assert set(r) == {"kappa", "df1", "df2", "bias", "variance", "risk"}


def test_ridge_risk_equivalent_matches_simulation(rng):
    n, p = 120, 80
    e = np.arange(1, p + 1) ** -1.0 * p / np.sum(np.arange(1, p + 1) ** -1.0)
    beta = rng.normal(size=p) / np.sqrt(p * e)
    P = 0.01 * np.eye(p) + 0.4 * np.diag(e[::-1])
    pred = ridge_risk_equivalent(np.diag(e), P, beta, 0.3, n)["risk"]
    sims = []
    for _ in range(300):
        X = rng.normal(size=(n, p)) * np.sqrt(e)
        w = augmented_ridge(X, X @ beta + math.sqrt(0.3) * rng.normal(size=n), P - 0.01 * np.eye(p), 0.01)
        sims.append((w - beta) @ (e * (w - beta)))
    assert abs(np.mean(sims) / pred - 1) < 0.04


def test_mse_equivalent_reduces_and_handles_a_shift(rng):
    n, p = 150, 60
    e = np.linspace(2.0, 0.2, p)
    S = np.diag(e)
    beta = rng.normal(size=p) / math.sqrt(p)
    Ey2 = beta @ S @ beta + 0.2
    a = augmented_mse_equivalent(S, 0.3 * np.eye(p), S @ beta, Ey2, n)["mse"]
    assert math.isclose(a, 0.2 + ridge_risk_equivalent(S, 0.3 * np.eye(p), beta, 0.2, n)["risk"], rel_tol=1e-9)
    mu = np.ones(p) * 0.15
    pred = augmented_mse_equivalent(S + np.outer(mu, mu), 0.01 * np.eye(p) + 0.3 * np.eye(p), S @ beta, Ey2, n,
                                 Sigma_test=S, b=S @ beta)["mse"]
    sims = []
    for _ in range(300):
        X = rng.normal(size=(n, p)) * np.sqrt(e)
        M, C = augmentation_moments(X, "shift", (mu, 0.3))
        w = augmented_ridge(M, X @ beta + math.sqrt(0.2) * rng.normal(size=n), C, 0.01)
        sims.append(0.2 + (w - beta) @ S @ (w - beta))
    assert abs(np.mean(sims) / pred - 1) < 0.04


@pytest.mark.parametrize("a,s", [(-1.0, 0.5), (0.0, 1.0), (0.7, 0.3), (2.0, 2.0)])
def test_relu_smoothed_against_quad(a, s):
    ref = quad(lambda g: max(a + s * g, 0.0) * norm.pdf(g), -12, 12, points=[-a / s], limit=200)[0]
    assert math.isclose(float(relu_smoothed(a, s)), ref, rel_tol=1e-7, abs_tol=1e-10)


def test_arccos_and_mehler_against_monte_carlo():
    r = np.random.default_rng(3)
    A = r.normal(size=(4, 4))
    K = A @ A.T + 0.5 * np.eye(4)
    u = r.multivariate_normal(np.zeros(4), K, size=400_000)
    mc = np.maximum(u, 0).T @ np.maximum(u, 0) / len(u)
    np.testing.assert_allclose(arccos_relu(K), mc, rtol=0.02, atol=0.01)
    c = hermite_coeffs(lambda z: np.stack([z, z * z]), R=4)
    np.testing.assert_allclose(c, [[0, 1, 0, 0, 0], [1, 0, math.sqrt(2), 0, 0]], atol=1e-12)
    rho = np.array([[1.0, 0.4], [0.4, 1.0]])
    # E z_j z_k = rho, E z_j^2 z_k^2 = 1 + 2 rho^2 for unit Gaussians
    np.testing.assert_allclose(mehler_moment(c[:1], c[:1], rho[:1, :1]), [[1.0]])
    np.testing.assert_allclose(mehler_moment(c[1:], c[1:], np.array([[0.4]])), [[1 + 2 * 0.16]])


def test_rf_moments_against_monte_carlo():
    r = np.random.default_rng(4)
    d, p = 8, 6
    W, Sx, beta = r.normal(size=(p, d)), np.diag(np.linspace(1.5, 0.3, d)), r.normal(size=d)
    mo = rf_moments(W, Sx, beta, 0.5, 0.1, 0.3)
    x = r.normal(size=(200_000, d)) * np.sqrt(np.diag(Sx))
    U = x @ W.T / math.sqrt(d)
    v = x @ beta / math.sqrt(beta @ Sx @ beta)
    y = v + math.sqrt(0.5) * (v * v - 1) / math.sqrt(2)
    xt = x + math.sqrt(0.3) * r.normal(size=x.shape)
    Ft = np.maximum(xt @ W.T / math.sqrt(d), 0)
    m = relu_smoothed(U, mo["s"][None, :])
    tol = lambda A: 0.02 * np.abs(A).max() + 0.005
    np.testing.assert_allclose(m.T @ m / len(m), mo["Sigma_m"], atol=tol(mo["Sigma_m"]))
    np.testing.assert_allclose(Ft.T @ Ft / len(Ft) - m.T @ m / len(m), mo["C_bar"], atol=tol(mo["C_bar"]))
    np.testing.assert_allclose(m.T @ y / len(m), mo["q"], atol=tol(mo["q"]))
    np.testing.assert_allclose(np.maximum(U, 0).T @ y / len(U), mo["b"], atol=tol(mo["b"]))
    assert math.isclose(mo["Ey2"], 1.6)


def test_finite_k_additive_law_and_limit(rng):
    n, p = 20, 5
    X, y = rng.normal(size=(n, p)), rng.normal(size=n)
    g1, g2 = np.random.default_rng(7), np.random.default_rng(8)
    ours = np.mean([finite_k_additive(X, y, 0.4, 0.1, 3, g1) for _ in range(3000)], 0)
    stack = []
    for _ in range(3000):                                    # the explicit k-stack: lstsq on n k rows
        F = X[None] + math.sqrt(0.4) * g2.normal(size=(3, n, p))
        A = np.vstack([F.reshape(-1, p) / math.sqrt(3 * n), math.sqrt(0.1) * np.eye(p)])
        stack.append(np.linalg.lstsq(A, np.concatenate([np.tile(y, 3) / math.sqrt(3 * n), np.zeros(p)]), rcond=None)[0])
    np.testing.assert_allclose(ours, np.mean(stack, 0), atol=0.02 * np.abs(ours).max() + 5e-3)
    w_inf = augmented_ridge(X, y, 0.4 * np.eye(p), 0.1)
    w_big = finite_k_additive(X, y, 0.4, 0.1, 10**6, np.random.default_rng(9))
    np.testing.assert_allclose(w_big, w_inf, atol=0.02 * np.abs(w_inf).max())
    with pytest.raises(ValueError, match="positive integer"):
        finite_k_additive(X, y, 0.4, 0.1, 0, g1)
