"""Tests of paper_suite.interpretability.dmd against references that share none of its code: scikit-learn's LDA, brute-force loops over classes, and invariances (affine maps of the
features, relabelling), plus the identities Eqs. (8) and (10)."""
import numpy as np
import pytest
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from paper_suite.interpretability.dmd import (class_moments, fit_dmd, leakage_auc, probe_accuracy, quotient_subspace,
                                              residual_edit, residual_spectrum, select_rank, simplex_centroids,
                                              split_stability, waterbirds_like)
from paper_suite.linedit import subspace_overlap


def gauss(n=3000, p=6, K=3, seed=0, cov_scale=(3.0, 1.0, 0.3), means=True):
    r = np.random.default_rng(seed)
    y = r.integers(0, K, n)
    X = r.normal(size=(n, p))
    X[:, 0] *= np.asarray(cov_scale)[y]                      # class-dependent variance along coordinate 0
    if means:
        X[:, 1:K] += 2.0 * r.normal(size=(K, K - 1))[y]
    return X @ r.normal(size=(p, p)) + r.normal(size=p), y


def test_quotient_subspace_equals_lda_span_and_is_orthonormal():
    Z, y = gauss(K=4, cov_scale=(1, 1, 1, 1))
    U = quotient_subspace(Z, y)
    assert U.shape == (6, 3) and np.allclose(U.T @ U, np.eye(3))
    lda = LinearDiscriminantAnalysis(solver="eigen").fit(Z, y)
    assert subspace_overlap(U, lda.scalings_[:, :3]) > 1 - 1e-8


def test_residual_operator_by_brute_force():
    Z, y = gauss(n=600, p=5)
    lam, V = residual_spectrum(Z, y)
    n, p = Z.shape
    zb = Z.mean(0)
    S = sum(np.outer(z - zb, z - zb) for z in Z) / n
    ev, Q = np.linalg.eigh(S)
    W = Q @ np.diag(ev ** -0.5) @ Q.T
    X = (Z - zb) @ W
    ms = [X[y == k].mean(0) for k in range(3)]
    Qm, _ = np.linalg.qr(np.array(ms[:2]).T)
    R = np.eye(p) - Qm @ Qm.T
    M = np.zeros((p, p))
    for k in range(3):
        Ck = sum(np.outer(x - ms[k], x - ms[k]) for x in X[y == k]) / (y == k).sum()
        A = R @ (np.eye(p) - Ck) @ R
        M += (y == k).mean() * A @ A
    assert np.allclose(np.sort(np.linalg.eigvalsh(M))[::-1], lam, atol=1e-10)
    assert np.all(np.diff(lam) <= 1e-12)
    assert np.allclose(V.T @ V, np.eye(p))


def test_invariance_under_affine_maps_and_relabelling():
    Z, y = gauss(n=2000)
    r = np.random.default_rng(9)
    A, c = r.normal(size=(6, 6)), r.normal(size=6)
    U, Ua = quotient_subspace(Z, y), quotient_subspace(Z @ A + c, y)
    assert subspace_overlap(np.linalg.solve(A, U), Ua) > 1 - 1e-8       # span{Sigma^-1 (mu_k - z_bar)} maps by A^-1
    lam, _ = residual_spectrum(Z, y)
    assert np.allclose(residual_spectrum(Z @ A + c, y)[0], lam, atol=1e-8)
    assert np.allclose(residual_spectrum(Z, 2 - y)[0], lam, atol=1e-10)
    assert np.allclose(residual_edit(Z, 2 - y, 2), residual_edit(Z, y, 2))


def test_edit_keeps_stage_one_scores_and_removes_top_directions():
    Z, y = gauss(n=2000)
    f = fit_dmd(Z, y)
    E = residual_edit(Z, y, 2)
    _, _, _, mus, zb, S = class_moments(Z, y)
    sc = lambda W: (W - zb) @ np.linalg.solve(S, (mus - zb).T)
    assert np.allclose(sc(E), sc(Z), atol=1e-8)                          # Eq. (10)
    assert np.allclose(f.whiten(E) @ f.V[:, :2], 0, atol=1e-10)
    assert np.allclose(f.whiten(E) @ f.V[:, 2:], f.whiten(Z) @ f.V[:, 2:])
    assert np.allclose(residual_edit(Z, y, 0), Z)


def test_bad_input():
    Z, y = gauss(n=200)
    with pytest.raises(ValueError, match="two classes"):
        quotient_subspace(Z, np.zeros(200, int))
    with pytest.raises(ValueError, match="singular"):
        residual_spectrum(np.c_[Z, Z[:, :1]], y)
    with pytest.raises(ValueError, match="r must be"):
        residual_edit(Z, y, 7)
    with pytest.raises(ValueError, match=r"\(n, p\)"):
        quotient_subspace(Z, y[:10])


def test_select_rank_and_stability():
    assert select_rank([9.0, 1.0, 0.9, 0.5], 2) == (1, 9.0)
    Z, y = gauss(n=4000)
    st = split_stability(Z, y, 1, 5, seed=0)
    assert st.shape == (5,) and st.min() > 0.9                         # a strong planted residual direction


def test_waterbirds_like_two_stories_share_the_law():
    kw = dict(p=12, K=3, sigma=(2.0, 1.0, 0.5), rho=0.5, delta=2.5, n_loud=2, loud=3.0)
    a = waterbirds_like(80000, seed=1, **kw)
    b = waterbirds_like(80000, seed=2, kappa=2.0, **kw)
    for k in range(3):
        ma, mb = a["Z"][a["y"] == k].mean(0), b["Z"][b["y"] == k].mean(0)
        assert np.abs(ma - mb).max() < 0.05
        Ca, Cb = np.cov(a["Z"][a["y"] == k].T), np.cov(b["Z"][b["y"] == k].T)
        assert np.abs(Ca - Cb).max() < 0.15
    assert abs(a["S"][:, 0] @ b["S"][:, 0]) == pytest.approx(1 / np.sqrt(5))
    c = simplex_centroids(4, 1.5)
    assert np.allclose(c.mean(0), 0)


def test_probes():
    Z, y = gauss(n=2000)
    assert probe_accuracy(Z, y, Z, y) > 0.6
    b = (Z[:, 0] > np.median(Z[:, 0])).astype(int)
    assert leakage_auc(Z, b, Z, b) > 0.95
