"""Tests of paper_suite.probes against references that share none of its code: scikit-learn's
LogisticRegression, Ridge, BayesianRidge, KNeighborsClassifier, mutual_info_score, balanced_accuracy_score
and calibration_curve; SciPy's generalised eigenvalues and entropy; brute-force loops and invariances."""
import math

import numpy as np
import pytest
import torch
from scipy.linalg import eigh
from scipy.stats import entropy
from sklearn.calibration import calibration_curve
from sklearn.linear_model import BayesianRidge, LogisticRegression, Ridge
from sklearn.metrics import balanced_accuracy_score, mutual_info_score
from sklearn.neighbors import KNeighborsClassifier

from paper_suite.probes import (budget_draws, ece, fit_logistic, fit_ridge, h_score, knn_accuracy, knn_predict,
                                label_demand, learning_curve, leep, logistic_newton, logme, nce, score_labels,
                                signed_margin)


def blobs(n, d, K, seed=0, shift=1.0):
    r = np.random.default_rng(seed)
    y = r.integers(0, K, n)
    X = r.normal(size=(n, d))
    X[:, 0] += shift * y
    X[:, 1] -= 0.5 * shift * (y == 1)
    return X, y


@pytest.mark.parametrize("K", [2, 3, 5])
@pytest.mark.parametrize("C", [0.05, 1.0, 20.0])
def test_logistic_matches_sklearn(K, C):
    X, y = blobs(160, 6, K, seed=K)
    sk = LogisticRegression(C=C, tol=1e-12, max_iter=100_000).fit(X, y)
    pr = fit_logistic(X, y, C=C)
    np.testing.assert_allclose(pr.predict_proba(X), sk.predict_proba(X), atol=1e-6)
    if K == 2:
        np.testing.assert_allclose(pr.W, sk.coef_[0], atol=1e-5)
        assert isinstance(pr.b, float) and abs(pr.b - sk.intercept_[0]) < 1e-5
    else:
        np.testing.assert_allclose(pr.W, sk.coef_.T, atol=1e-5)
        np.testing.assert_allclose(pr.b, sk.intercept_ - sk.intercept_.mean(), atol=1e-5)
    assert (pr.predict(X) == sk.predict(X)).all()


@pytest.mark.parametrize("K", [2, 4])
def test_logistic_sample_weights_and_no_intercept(K):
    X, y = blobs(120, 5, K, seed=7)
    w = np.random.default_rng(1).random(120) * 3
    sk = LogisticRegression(C=0.5, tol=1e-12, max_iter=100_000).fit(X, y, sample_weight=w)
    np.testing.assert_allclose(fit_logistic(X, y, C=0.5, sample_weight=w).predict_proba(X), sk.predict_proba(X),
                               atol=1e-6)
    sk0 = LogisticRegression(C=0.5, fit_intercept=False, tol=1e-12, max_iter=100_000).fit(X, y)
    pr0 = fit_logistic(X, y, C=0.5, fit_intercept=False)
    np.testing.assert_allclose(pr0.predict_proba(X), sk0.predict_proba(X), atol=1e-6)
    assert np.all(np.asarray(pr0.b) == 0)


def test_logistic_labels_kept_and_separable():
    r = np.random.default_rng(2)
    X, y = r.normal(size=(10, 40)), np.array(["cat", "dog"] * 5)        # separable: only the penalty bounds w
    pr = fit_logistic(X, y)
    sk = LogisticRegression(tol=1e-12, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(pr.W, sk.coef_[0], atol=1e-6)
    assert set(pr.predict(X)) <= {"cat", "dog"} and (pr.predict(X) == sk.predict(X)).all()
    with pytest.raises(ValueError, match="two classes"):
        fit_logistic(X, np.zeros(10))


@pytest.mark.parametrize("K", [2, 3])
def test_batched_newton_equals_single_fits_and_zero_weights_pad(K):
    X, y = blobs(90, 4, K, seed=3)
    idx = np.stack([np.random.default_rng(s).choice(90, 30, replace=False) for s in range(4)])
    Xb = torch.as_tensor(X[idx])
    th = logistic_newton(Xb, torch.as_tensor(y[idx]), K, 0.8)
    for i in range(4):
        one = logistic_newton(Xb[i:i + 1], torch.as_tensor(y[idx[i]])[None], K, 0.8)[0]
        np.testing.assert_allclose(th[i].numpy(), one.numpy(), atol=1e-8)
    # padding a problem with zero-weight rows does not change its solution
    Xp = torch.cat([Xb[:1], torch.as_tensor(X[:10])[None]], 1)
    yp = torch.cat([torch.as_tensor(y[idx[0]])[None], torch.as_tensor(y[:10])[None]], 1)
    wp = torch.cat([torch.ones(1, 30), torch.zeros(1, 10)], 1).double()
    np.testing.assert_allclose(logistic_newton(Xp, yp, K, 0.8, sample_weight=wp)[0].numpy(), th[0].numpy(), atol=1e-8)


def test_ridge_matches_sklearn_and_psd_penalty():
    r = np.random.default_rng(4)
    X, Y = r.normal(size=(60, 7)), r.normal(size=(60, 3))
    for fi in (True, False):
        sk = Ridge(alpha=1.7, fit_intercept=fi).fit(X, Y)
        W, b = fit_ridge(X, Y, 1.7, fit_intercept=fi)
        np.testing.assert_allclose(W, sk.coef_.T, atol=1e-12)
        np.testing.assert_allclose(b, sk.intercept_, atol=1e-12)
    w, b = fit_ridge(X, Y[:, 0], 1.7)
    assert w.shape == (7,) and isinstance(b, float)
    M = r.normal(size=(7, 7))
    P = M @ M.T + 0.05 * np.eye(7)
    L = np.linalg.cholesky(P)
    sk = Ridge(alpha=1.7).fit(X @ np.linalg.inv(L).T, Y)                 # V = L^T W: ordinary ridge
    W, b = fit_ridge(X, Y, 1.7, P=P)
    np.testing.assert_allclose(W, np.linalg.inv(L).T @ sk.coef_.T, atol=1e-10)
    np.testing.assert_allclose(b, sk.intercept_, atol=1e-10)


def test_ridge_singular_psd_penalty_is_a_stationary_point():
    r = np.random.default_rng(5)
    X, y = r.normal(size=(40, 5)), r.normal(size=40)
    v = r.normal(size=5)
    P = np.outer(v, v)                                                   # rank one: penalise one direction only
    w, b = fit_ridge(X, y, 3.0, P=P)
    grad = -2 * X.T @ (y - X @ w - b) + 2 * 3.0 * P @ w
    assert np.abs(grad).max() < 1e-9 and abs((y - X @ w - b).sum()) < 1e-9
    with pytest.raises(ValueError, match=r"\(5, 5\)"):
        fit_ridge(X, y, 1.0, P=np.eye(4))


def test_budget_draws_balanced_proportional_and_errors():
    y = np.array([0] * 30 + [1] * 10 + [2] * 5)
    d = budget_draws(y, 10, 50, seed=1)
    assert d.shape == (50, 10) and all(len(set(r)) == 10 for r in d)
    counts = np.stack([np.bincount(y[r], minlength=3) for r in d])
    assert counts.min() >= 3 and counts.max() <= 4 and (counts.sum(1) == 10).all()
    p = budget_draws(y, 9, 5, seed=2, balanced=False)
    assert (np.stack([np.bincount(y[r], minlength=3) for r in p]) == [6, 2, 1]).all()
    assert not np.array_equal(budget_draws(y, 10, 3, seed=1), budget_draws(y, 10, 3, seed=2))
    np.testing.assert_array_equal(budget_draws(y, 10, 3, seed=1), budget_draws(y, 10, 3, seed=1))
    with pytest.raises(ValueError, match="class 2, which has 5"):
        budget_draws(y, 18, 2)
    with pytest.raises(ValueError, match="cannot cover"):
        budget_draws(y, 2, 2)


@pytest.mark.parametrize("metric", ["accuracy", "balanced_accuracy"])
@pytest.mark.parametrize("K", [2, 3])
def test_learning_curve_equals_sklearn_refits(metric, K):
    X, y = blobs(300, 6, K, seed=11, shift=0.8)
    budgets = [6, 12, 24]
    lc = learning_curve(X[:200], y[:200], X[200:], y[200:], budgets, draws=4, C=0.5, seed=9, metric=metric)
    assert lc.shape == (3, 4)
    for j, n in enumerate(budgets):
        for i, rows in enumerate(budget_draws(y[:200], n, 4, 9 + 7919 * j)):
            pred = LogisticRegression(C=0.5, tol=1e-12, max_iter=100_000).fit(X[rows], y[rows]).predict(X[200:])
            ref = (pred == y[200:]).mean() if metric == "accuracy" else balanced_accuracy_score(y[200:], pred)
            assert abs(lc[j, i] - ref) < 1e-12
    with pytest.raises(ValueError, match="allowed: accuracy, balanced_accuracy"):
        learning_curve(X[:200], y[:200], X[200:], y[200:], budgets, metric="f1")


def test_score_labels_and_label_demand():
    r = np.random.default_rng(6)
    yt, yp = r.integers(0, 3, 80), r.integers(0, 3, 80)
    assert math.isclose(score_labels(yt, yp, "balanced_accuracy"), balanced_accuracy_score(yt, yp))
    b = [8, 16, 32, 64]
    assert label_demand([0.5, 0.7, 0.9, 0.99], b, 1.0, frac=0.9) == 32
    assert label_demand([0.5, 0.7, 0.9, 0.99], b, 1.0, frac=0.995) == math.inf
    assert label_demand([0.5, 0.7, 0.9, 0.99], b, 1.0, frac=0.995, interpolate=True) == 128
    assert label_demand([0.96, 0.97], b[:2], 1.0, interpolate=True) == 8
    # halfway between the scores in log2 budget: 2 ** 4.5
    assert math.isclose(label_demand([0.5, 0.9, 1.0], [8, 16, 32], 1.0, frac=0.95, interpolate=True), 2 ** 4.5)


def logme_by_sklearn(F, y):
    out = []
    for k in np.unique(y):
        br = BayesianRidge(fit_intercept=False, alpha_1=0, alpha_2=0, lambda_1=0, lambda_2=0, compute_score=True,
                           tol=1e-14, max_iter=100_000).fit(F, (y == k).astype(float))
        out.append(br.scores_[-1] / len(y))
    return float(np.mean(out))


@pytest.mark.parametrize("shape", [(150, 8), (40, 12), (25, 50)])
def test_logme_is_bayesian_ridge_evidence(shape):
    r = np.random.default_rng(shape[1])
    F = r.normal(size=shape)
    y = r.integers(0, 3, shape[0])
    F[:, 0] += y
    assert math.isclose(logme(F, y), logme_by_sklearn(F, y), rel_tol=1e-7)


def test_logme_prefers_informative_features():
    r = np.random.default_rng(8)
    y = r.integers(0, 2, 200)
    noise = r.normal(size=(200, 5))
    good = noise.copy()
    good[:, 0] += 3 * y
    assert logme(good, y) > logme(noise, y)


def test_nce_is_mutual_information_minus_entropy():
    r = np.random.default_rng(9)
    y, z = r.integers(0, 4, 300), r.integers(0, 6, 300)
    assert math.isclose(nce(z, y), mutual_info_score(y, z) - entropy(np.bincount(y) / 300), rel_tol=1e-12)
    assert abs(nce(y + 10, y)) < 1e-12                                   # source labels that determine y


def test_leep_brute_force_and_perfect_source():
    r = np.random.default_rng(10)
    n, Z = 60, 3
    y = r.integers(0, 2, n)
    P = r.dirichlet(np.ones(Z), n)
    brute = 0.0
    for i in range(n):
        s = 0.0
        for z in range(Z):
            pyz = sum(P[j, z] for j in range(n) if y[j] == y[i]) / n
            s += pyz / (P[:, z].sum() / n) * P[i, z]
        brute += math.log(s)
    assert math.isclose(leep(P, y), brute / n, rel_tol=1e-12)
    assert abs(leep(np.eye(2)[y], y)) < 1e-12                            # one-hot source equal to the target
    assert leep(P, y) < 0


def test_h_score_generalised_eigenvalues_and_affine_invariance():
    r = np.random.default_rng(12)
    F = r.normal(size=(200, 6))
    y = r.integers(0, 3, 200)
    F[:, :2] += np.eye(3)[y][:, :2] * 2
    Fc = F - F.mean(0)
    M = np.stack([Fc[y == k].mean(0) for k in range(3)])
    pk = np.bincount(y) / 200
    ref = eigh((M.T * pk) @ M, Fc.T @ Fc / 200, eigvals_only=True).sum()
    assert math.isclose(h_score(F, y), ref, rel_tol=1e-10)
    A = r.normal(size=(6, 6))
    assert math.isclose(h_score(F @ A + 5.0, y), h_score(F, y), rel_tol=1e-8)   # invariant to invertible maps
    G = M[y]                                                             # full shrinkage: cov -> (tr / D) I
    assert math.isclose(h_score(F, y, shrinkage=1.0), np.trace(G.T @ G / 200) / (np.trace(Fc.T @ Fc / 200) / 6),
                        rel_tol=1e-10)
    assert 0 <= h_score(F, y) <= 2 + 1e-9                                  # at most K - 1 = 2 discriminant ratios


def test_ece_against_calibration_curve_and_perfect_calibration():
    r = np.random.default_rng(13)
    P = r.dirichlet(np.ones(3), 500)
    y = r.integers(0, 3, 500)
    conf, corr = P.max(1), (P.argmax(1) == y).astype(int)
    pt, pp = calibration_curve(corr, conf, n_bins=12)
    cnt = np.bincount(np.searchsorted(np.linspace(0, 1, 13)[1:-1], conf), minlength=12)
    assert math.isclose(ece(P, y, 12), float((cnt[cnt > 0] / 500 * np.abs(pt - pp)).sum()), rel_tol=1e-12)
    Pc = np.tile([0.8, 0.2], (100, 1))
    yc = np.r_[np.zeros(80, int), np.ones(20, int)]                      # 80 % right at confidence 0.8
    assert abs(ece(Pc, yc)) < 1e-12
    assert math.isclose(ece(Pc, np.zeros(100, int)), 0.2)


@pytest.mark.parametrize("k", [1, 4, 7])
def test_knn_matches_sklearn(k):
    X, y = blobs(150, 5, 3, seed=14)
    Xt, yt = blobs(60, 5, 3, seed=15)
    sk = KNeighborsClassifier(k).fit(X, y)
    np.testing.assert_array_equal(knn_predict(X, y, Xt, k), sk.predict(Xt))
    assert knn_accuracy(X, y, Xt, yt, k) == sk.score(Xt, yt)
    assert math.isclose(knn_accuracy(X, y, Xt, yt, k, "balanced_accuracy"),
                        balanced_accuracy_score(yt, sk.predict(Xt)))


def test_signed_margin_binary_and_multiclass():
    X, y = blobs(100, 4, 2, seed=16)
    sk = LogisticRegression().fit(X, y)
    m = signed_margin(X, y, sk.coef_[0], sk.intercept_[0])
    np.testing.assert_allclose(np.abs(m), np.abs(sk.decision_function(X)) / np.linalg.norm(sk.coef_[0]))
    assert ((m > 0) == (sk.predict(X) == y)).all()
    X3, y3 = blobs(120, 4, 3, seed=17)
    sk3 = LogisticRegression().fit(X3, y3)
    W, b = sk3.coef_.T, sk3.intercept_
    m3 = signed_margin(X3, y3, W, b)
    assert ((m3 > 0) == (sk3.predict(X3) == y3)).all()
    for i in range(0, 120, 17):                                          # distance to the pairwise hyperplane
        L = X3[i] @ W + b
        c = max((c for c in range(3) if c != y3[i]), key=lambda c: L[c])
        w, beta = W[:, y3[i]] - W[:, c], b[y3[i]] - b[c]
        foot = X3[i] - (X3[i] @ w + beta) / (w @ w) * w
        assert abs(abs(m3[i]) - np.linalg.norm(X3[i] - foot)) < 1e-10 and abs(foot @ w + beta) < 1e-10


# --- deterministic equivalent of ridge, Eqs. (18)-(21) ---------------------------------------------------------
from paper_suite.probes import effective_regularization, ridge_equivalent  # noqa: E402


@pytest.mark.parametrize("gamma,lam", [(0.5, 0.1), (1.0, 0.5), (2.0, 0.05)])
def test_ridge_equivalent_isotropic_marchenko_pastur(gamma, lam):
    n = 200
    p = int(gamma * n)
    r = ridge_equivalent(np.eye(p), n, lam)
    k = lam * r["kappa"]
    # the quadratic k^2 + k (1 - gamma - lam) - lam = 0 and the MP Stieltjes transform at -lam
    assert math.isclose(k, ((lam + gamma - 1) + math.sqrt((lam + gamma - 1) ** 2 + 4 * lam)) / 2, rel_tol=1e-10)
    mp = (-(1 - gamma + lam) + math.sqrt((1 - gamma + lam) ** 2 + 4 * gamma * lam)) / (2 * gamma * lam)
    assert math.isclose(k / (lam * (1 + k)), mp, rel_tol=1e-10)
    assert math.isclose(r["df1"], p / (1 + k), rel_tol=1e-10) and math.isclose(r["df2"], p / (1 + k) ** 2, rel_tol=1e-10)


def test_effective_regularization_solves_its_equation():
    e = np.random.default_rng(0).exponential(size=50)
    for lam in (1e-3, 0.3, 4.0):
        k = effective_regularization(e, 30, lam)
        assert k >= lam and math.isclose(k * (1 - (e / (e + k)).sum() / 30), lam, rel_tol=1e-10)
    with pytest.raises(ValueError):
        effective_regularization(e, 30, 0.0)


def test_ridge_equivalent_matches_simulation_and_penalty_is_whitened():
    rng = np.random.default_rng(1)
    p, n = 60, 90
    e = np.arange(1, p + 1) ** -1.0 * 3
    U, _ = np.linalg.qr(rng.normal(size=(p, p)))
    Sigma = (U * e) @ U.T
    beta = U @ (rng.normal(size=p) / np.sqrt(p * e))
    P = np.diag(0.05 + 0.3 * rng.random(p))
    pred = ridge_equivalent(Sigma, n, P, beta, 0.3)
    L = np.linalg.cholesky(Sigma)
    risk, quad, A = [], [], np.diag(rng.random(p))
    for _ in range(400):
        X = rng.normal(size=(n, p)) @ L.T
        w = np.linalg.solve(X.T @ X / n + P, X.T @ (X @ beta + math.sqrt(0.3) * rng.normal(size=n)) / n)
        risk.append((w - beta) @ Sigma @ (w - beta))
        quad.append(w @ A @ w)
    se = np.std(risk) / math.sqrt(len(risk))
    assert abs(np.mean(risk) - pred["risk"]) < max(4 * se, 0.03 * pred["risk"])
    assert math.isclose(pred["risk"], pred["bias"] + pred["variance"])
    # Eq. (21) with A = Sigma gives back Eq. (20); Eq. (21) for another A against simulation
    d = pred["w_mean"] - beta
    assert math.isclose(d @ Sigma @ d + np.sum(Sigma * pred["w_cov"]), pred["risk"], rel_tol=1e-9)
    qa = pred["w_mean"] @ A @ pred["w_mean"] + np.sum(A * pred["w_cov"])
    assert abs(np.mean(quad) / qa - 1) < 0.05
    # a scalar penalty equals lam * I; a non-positive-definite penalty is refused
    assert math.isclose(ridge_equivalent(Sigma, n, 0.2, beta, 0.3)["risk"],
                        ridge_equivalent(Sigma, n, 0.2 * np.eye(p), beta, 0.3)["risk"], rel_tol=1e-9)
    with pytest.raises(ValueError):
        ridge_equivalent(Sigma, n, -np.eye(p), beta)
