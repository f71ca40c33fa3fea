"""paper_suite.applications.splitgs_loc against references that share no code with it: finite differences of the
pinhole map, Monte Carlo covariances, per-pixel compositing loops, scipy's truncated normal, brute-force matching
and OpenCV's PnP on exact correspondences."""
import math

import numpy as np
import pytest
import torch
from scipy import stats

from paper_suite.applications.splitgs_loc import (aggregate_descriptors, composition_weights, look_at, make_room,
                                                  mutual_ratio_matches, pose_errors, project_gaussians, raycast,
                                                  render_stats, select_gaussians, split_bins, split_gaussian,
                                                  split_recursive)

K = np.array([[220.0, 2.0, 150.0], [0.0, 210.0, 110.0], [0.0, 0.0, 1.0]])


@pytest.fixture(scope="module")
def cam():
    r = np.random.default_rng(1)
    R = np.linalg.qr(r.standard_normal((3, 3)))[0]
    R *= np.sign(np.linalg.det(R))
    return R, np.array([0.2, 0.1, 4.0])


def rand_cov(r, n, d=3, s=0.2):
    A = r.standard_normal((n, d, d)) * s
    return A @ np.swapaxes(A, 1, 2) + 1e-3 * np.eye(d)


def test_projection_matches_finite_differences_and_monte_carlo(cam):
    R, t = cam
    r = np.random.default_rng(2)
    mu, S = r.standard_normal((4, 3)) * 0.3, rand_cov(r, 4, s=0.05)
    m2, c2, z = project_gaussians(mu, S, R, t, K)
    pi = lambda x: (x @ K[:2].T) / x[..., 2:3]
    xc = mu @ R.T + t
    np.testing.assert_allclose(m2, pi(xc))
    np.testing.assert_allclose(z, xc[:, 2])
    for i in range(4):      # the perspective image of a small Gaussian is close to the EWA Gaussian
        X = r.multivariate_normal(mu[i], S[i] * 1e-4, 200_000)
        np.testing.assert_allclose(np.cov(pi(X @ R.T + t).T), c2[i] * 1e-4, rtol=0.05, atol=1e-3 * np.abs(c2[i]).max() * 1e-4)


def test_composition_weights_loop_and_telescoping():
    r = np.random.default_rng(3)
    N, P = 25, 20
    m2, c2 = r.uniform(0, 10, (N, 2)), rand_cov(r, N, 2, 1.5) + 0.3 * np.eye(2)
    o, z, px = r.uniform(0.05, 0.95, N), r.uniform(-1, 4, N), r.uniform(0, 10, (P, 2))
    w = composition_weights(m2, c2, o, z, px)
    al = np.zeros((P, N))
    for p in range(P):
        for i in range(N):
            d = px[p] - m2[i]
            al[p, i] = o[i] * math.exp(-0.5 * d @ np.linalg.inv(c2[i]) @ d) if z[i] > 0 else 0.0
    ref = np.zeros((P, N))
    for p in range(P):
        T = 1.0
        for i in np.argsort(z):
            ref[p, i] = al[p, i] * T
            T *= 1 - al[p, i]
    np.testing.assert_allclose(w, ref, atol=1e-14)
    np.testing.assert_allclose(w.sum(1), 1 - np.prod(1 - al, 1), atol=1e-14)
    assert (w[:, z <= 0] == 0).all()
    wm = composition_weights(m2, c2, o, z, px, alpha_min=0.3)
    assert (wm[al < 0.3] == 0).all()


def test_render_stats_agrees_with_numpy():
    r = np.random.default_rng(4)
    N, P = 30, 50
    m2, c2 = r.uniform(0, 10, (N, 2)), rand_cov(r, N, 2, 1.5) + 0.3 * np.eye(2)
    o, z, px, F = r.uniform(0.05, 0.95, N), r.uniform(-1, 4, N), r.uniform(0, 10, (P, 2)), r.standard_normal((P, 3))
    w = composition_weights(m2, c2, o, z, px)
    st = render_stats(*(torch.from_numpy(x) for x in (m2, c2, o, z, px, F)), alpha_min=0.0, chunk=1)
    np.testing.assert_allclose(st["maxw"].numpy(), w.max(0), atol=1e-12)
    np.testing.assert_allclose(st["num"][2.0].numpy(), (w ** 2).T @ F, atol=1e-12)
    np.testing.assert_allclose(st["den"][1.0].numpy(), w.sum(0), atol=1e-12)


@pytest.mark.parametrize("Kb", [2, 3, 4, 7])
def test_split_bins_match_scipy_truncnorm(Kb):
    m, var = split_bins(Kb)
    e = stats.norm.ppf(np.arange(Kb + 1) / Kb)
    ref_m = [stats.truncnorm(a, b).mean() for a, b in zip(e[:-1], e[1:])]
    ref_v = [stats.truncnorm(a, b).var() for a, b in zip(e[:-1], e[1:])]
    np.testing.assert_allclose(m, ref_m, atol=1e-10)
    assert math.isclose(var, np.mean(ref_v), abs_tol=1e-10)


@pytest.mark.parametrize("Kb", [2, 3, 5])
def test_split_preserves_moments(Kb):
    r = np.random.default_rng(5)
    mu, S = r.standard_normal(3), rand_cov(r, 1)[0]
    mm, cc, ww = split_gaussian(mu, S, Kb)
    assert mm.shape == (Kb, 3) and cc.shape == (Kb, 3, 3) and np.allclose(ww, 1 / Kb)
    mean = ww @ mm
    cov = np.einsum("k,kij->ij", ww, cc) + np.einsum("k,ki,kj->ij", ww, mm - mean, mm - mean)
    np.testing.assert_allclose(mean, mu, atol=1e-12)
    np.testing.assert_allclose(cov, S, atol=1e-12)
    lam, V = np.linalg.eigh(S)
    for c in cc:                                # unchanged across the principal axis, shrunk along it
        np.testing.assert_allclose(V[:, :2].T @ c @ V[:, :2], np.diag(lam[:2]), atol=1e-12)
        assert V[:, 2] @ c @ V[:, 2] < lam[2]


def test_split_recursive_stops_below_tau():
    r = np.random.default_rng(6)
    S = np.diag([0.3, 0.2, 0.001]) ** 2
    m, c, par = split_recursive(np.zeros((1, 3)), S[None], 10, 0.05, 3)
    assert np.sqrt(np.linalg.eigvalsh(c)[:, -1]).max() <= 0.05 and (par == 0).all()
    np.testing.assert_allclose(m.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(np.mean(c, 0) + np.cov(m.T, bias=True), S, atol=1e-12)   # exact over levels
    m1, _, _ = split_recursive(np.zeros((1, 3)), S[None], 1, 0.05, 3)
    assert len(m1) == 3


def test_aggregate_and_select():
    r = np.random.default_rng(7)
    w, F = r.uniform(0, 1, (40, 6)) * (r.uniform(size=(40, 6)) > 0.5), r.standard_normal((40, 4))
    w[:, 2] = 0
    f = aggregate_descriptors(w, F, 3.0)
    for i in range(6):
        if i == 2:
            assert (f[i] == 0).all()
        else:
            np.testing.assert_allclose(f[i], np.average(F, axis=0, weights=w[:, i] ** 3))
    maxw = np.array([[0.5, 0.1, 0.4], [0.5, 0.5, 0.2], [0.1, 0.1, 0.4]])
    assert select_gaussians(maxw, 0.3, 2).tolist() == [True, False, True]


def test_mutual_ratio_matches_brute_force():
    r = np.random.default_rng(8)
    q, db = r.standard_normal((30, 5)), r.standard_normal((50, 5))
    mt = mutual_ratio_matches(q, db, 0.9)
    qn, dn = q / np.linalg.norm(q, axis=1, keepdims=True), db / np.linalg.norm(db, axis=1, keepdims=True)
    D = np.linalg.norm(qn[:, None] - dn[None], axis=2)
    ref = [(i, int(np.argmin(D[i]))) for i in range(30)
           if np.argmin(D[:, np.argmin(D[i])]) == i and np.sort(D[i])[0] < 0.9 * np.sort(D[i])[1]]
    assert sorted(map(tuple, mt.tolist())) == ref


def test_raycast_and_pnp_recover_pose():
    import cv2
    room = make_room(0.7, 0.16, seed=0)
    K0 = K.copy()
    K0[0, 1] = 0.0                  # OpenCV's pinhole model has no skew
    R, t = look_at(np.array([1.2, 0.3, 1.4]), np.array([0.0, 0.0, 0.6]))
    px = np.random.default_rng(9).uniform([0, 0], [300, 220], (60, 2))
    X, z = raycast(R, t, K0, px, room["boxes"])
    xc = X @ R.T + t
    np.testing.assert_allclose((xc @ K0.T)[:, :2] / xc[:, 2:], px, atol=1e-9)
    np.testing.assert_allclose(xc[:, 2], z)
    ok, rv, tv, _ = cv2.solvePnPRansac(X, px, K0, None, reprojectionError=1.0, flags=cv2.SOLVEPNP_P3P)
    er, et = pose_errors(cv2.Rodrigues(rv)[0], tv.ravel(), R, t)
    assert ok and er < 1e-3 and et < 1e-4
    assert (room["kind"] == 3).mean() == pytest.approx(0.1, abs=0.01)


def test_pose_errors_closed_form():
    a = 0.3
    Rz = np.array([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]])
    er, et = pose_errors(Rz, np.array([0, 0, 1.0]), np.eye(3), np.zeros(3))
    assert math.isclose(er, math.degrees(a)) and math.isclose(et, 1.0)
