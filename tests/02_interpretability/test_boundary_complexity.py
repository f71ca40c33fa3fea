"""Tests of paper_suite.interpretability.boundary_complexity against references that share none of its code:
scikit-learn's decision functions, SciPy quadrature and truncated normals, autograd Jacobians, brute-force
nearest points on sampled curves, cross products (Nanson's formula), closed forms and invariances."""
import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats
from sklearn.linear_model import LogisticRegression

from paper_suite.interpretability.boundary_complexity import (
    MAP_KINDS, Mixture, balanced_weights, boundary_distance, distance_to_image, ebc, ebc_estimate, linear_map,
    measured_ratio, normal_factor, normal_stretch, predicted_ratio, random_map, sample_near_hyperplane,
    strip_mass_gaussian, strip_mass_mixture, strip_surrogate, tangential_shear, tangential_stretch, tanh_map,
    unit_scale)

f64 = torch.float64


def unit(v):
    v = torch.as_tensor(v, dtype=f64)
    return v / v.norm()


def test_boundary_distance_binary_matches_sklearn():
    r = np.random.default_rng(0)
    X = r.normal(size=(200, 5))
    y = (X[:, 0] + 0.5 * r.normal(size=200) > 0).astype(int)
    sk = LogisticRegression().fit(X, y)
    d = boundary_distance(X, sk.coef_[0], sk.intercept_[0])
    np.testing.assert_allclose(d, np.abs(sk.decision_function(X)) / np.linalg.norm(sk.coef_[0]), rtol=1e-12)
    assert d.shape == (200,) and (d >= 0).all()


def test_boundary_distance_multiclass_is_distance_to_the_tie_hyperplane():
    r = np.random.default_rng(1)
    Z, W, b = r.normal(size=(60, 3)), r.normal(size=(3, 4)), r.normal(size=4)
    d = boundary_distance(Z, W, b)
    L = Z @ W + b
    for i in range(60):
        a, c = np.argsort(-L[i])[:2]
        w, beta = W[:, a] - W[:, c], b[a] - b[c]
        foot = Z[i] - (Z[i] @ w + beta) / (w @ w) * w
        Lf = foot @ W + b
        assert abs(Lf[a] - Lf[c]) < 1e-10                           # the foot is on the tie of a and c
        assert math.isclose(d[i], np.linalg.norm(Z[i] - foot), rel_tol=1e-10)
    # two columns reduce to the binary formula
    W2, b2 = W[:, :2], b[:2]
    np.testing.assert_allclose(boundary_distance(Z, W2, b2), boundary_distance(Z, W2[:, 1] - W2[:, 0], b2[1] - b2[0]))


def test_ebc_class_balance_and_errors():
    r = np.random.default_rng(2)
    d, y = r.random(300), r.integers(0, 3, 300)
    loop = np.mean([np.mean([d[i] <= 0.15 for i in range(300) if y[i] == c]) for c in range(3)]) / 0.3
    assert math.isclose(ebc(d, y, 0.15), loop)
    # repeating one class's examples changes the plain strip fraction but not the class-balanced one
    k = y == 1
    d2, y2 = np.r_[d, d[k], d[k]], np.r_[y, y[k], y[k]]
    assert math.isclose(ebc(d2, y2, 0.15), ebc(d, y, 0.15))
    assert not math.isclose((d2 <= 0.15).mean(), (d <= 0.15).mean())
    assert ebc(np.full(10, 0.5), np.arange(10) % 2, 0.1) == 0.0
    with pytest.raises(ValueError, match="positive"):
        ebc(d, y, 0.0)


def test_strip_mass_gaussian_against_quadrature():
    mu, S = np.array([0.3, -0.5]), np.array([[1.0, 0.4], [0.4, 0.6]])
    w, b, eps = np.array([1.0, 2.0]), 0.7, 0.25
    pdf = stats.multivariate_normal(mu, S).pdf
    e1 = w / np.linalg.norm(w)
    e2 = np.array([-e1[1], e1[0]])
    t0 = -b / np.linalg.norm(w)                                      # the boundary is e1 . x = t0
    val, _ = integrate.dblquad(lambda v, u: pdf(u * e1 + v * e2), t0 - eps, t0 + eps, -12, 12, epsabs=1e-11)
    assert math.isclose(strip_mass_gaussian(mu, S, w, b, eps), val, rel_tol=1e-7)


def test_strip_mass_mixture_is_weighted_sum_and_tube_formula():
    mix = Mixture(np.array([0.3, 0.7]), np.array([[0.0, 1.0], [1.0, -1.0]]), np.stack([np.eye(2), 0.5 * np.eye(2)]))
    n = np.array([0.6, 0.8])
    ref = sum(w * strip_mass_gaussian(m, S, n, -0.2, 0.1) for w, m, S in zip(mix.weights, mix.means, mix.covs))
    assert math.isclose(strip_mass_mixture(mix, n, 0.2, 0.1), ref)
    dens = sum(w * stats.norm.pdf(0.2, m @ n, math.sqrt(n @ S @ n)) for w, m, S in zip(*mix.__dict__.values()))
    assert abs(strip_mass_mixture(mix, n, 0.2, 1e-3) / (2e-3 * dens) - 1) < 1e-5     # Eq. (4), first order


def test_normal_factor_closed_forms_and_nanson():
    n = np.array([0.0, 0.0, 1.0])
    J = np.stack([np.eye(3) + (2.5 - 1) * np.outer(n, n), np.eye(3) + 0.9 * np.outer([0, 1.0, 0], n),
                  np.diag([0.3, 4.0, 1.0])])
    np.testing.assert_allclose(normal_factor(J, n), [1 / 2.5, 1.0, 1.0])
    r = np.random.default_rng(3)
    A = r.normal(size=(4, 3, 3)) + 2 * np.eye(3)
    ns = r.normal(size=(4, 3))
    ns /= np.linalg.norm(ns, axis=1, keepdims=True)
    for Ai, ni, f in zip(A, ns, normal_factor(A, ns)):              # Nanson: area of an image parallelogram
        a1 = np.cross(ni, [1.0, 0, 0])
        a2 = np.cross(ni, a1)
        assert math.isclose(np.linalg.norm(np.cross(Ai @ a1, Ai @ a2)),
                            abs(np.linalg.det(Ai)) * f * np.linalg.norm(np.cross(a1, a2)), rel_tol=1e-10)


@pytest.mark.parametrize("kind", MAP_KINDS)
def test_random_maps_jacobian_and_invertibility(kind):
    r = np.random.default_rng(4)
    n = unit(r.normal(size=4))
    T = random_map(kind, n, r)
    X = torch.as_tensor(r.normal(size=(5, 4)))
    auto = torch.stack([torch.autograd.functional.jacobian(T, x[None])[0, :, 0] for x in X])
    assert torch.allclose(T.jacobian(X), auto, atol=1e-12)
    if kind.startswith("tangential"):
        assert torch.allclose(X @ n, T(X) @ n, atol=1e-12)          # n^T T(x) = n^T x: level sets kept
    Y = torch.as_tensor(r.normal(size=(5, 4)))
    assert ((X - Y).norm(dim=1) <= T.inverse_lipschitz() * (T(X) - T(Y)).norm(dim=1) + 1e-12).all()
    with pytest.raises(ValueError, match="allowed: rotation"):
        random_map("swirl", n, r)


def test_inverse_lipschitz_refuses_uncertified_maps():
    n = unit([1.0, 0.0])
    with pytest.raises(ValueError, match="not certified"):
        tanh_map(n, 1.5, torch.eye(2, dtype=f64), torch.zeros(2, dtype=f64)).inverse_lipschitz()


def test_distance_to_image_against_brute_force_curve():
    n = unit([0.3, 1.0])
    B = torch.tensor([[1.0, -0.4], [0.5, 0.8]], dtype=f64)
    T = tanh_map(n, 0.6, B / torch.linalg.matrix_norm(B, 2), torch.tensor([0.1, 0.3], dtype=f64))
    X = torch.as_tensor(np.random.default_rng(5).normal(size=(30, 2)) * 0.5)
    tang = torch.stack([-n[1], n[0]])
    curve = T(-0.2 * n + torch.linspace(-15, 15, 300_001, dtype=f64)[:, None] * tang)
    brute = torch.cdist(T(X), curve).min(1).values
    assert torch.allclose(distance_to_image(T, n, -0.2, X), brute, atol=5e-5)
    A = torch.tensor([[2.0, 0.5], [0.1, 0.6]], dtype=f64)
    closed = (X @ n + 0.2).abs() / torch.linalg.solve(A.T, n).norm()
    assert torch.allclose(distance_to_image(linear_map(A), n, -0.2, X), closed, atol=1e-12)
    assert distance_to_image(linear_map(A), n, 0.0, X[:0]).shape == (0,)


def test_sample_near_hyperplane_is_the_conditional_law():
    r = np.random.default_rng(6)
    mix = Mixture(np.array([0.4, 0.6]), np.array([[0.0, 0.0, 1.0], [1.0, -1.0, 0.0]]),
                  np.stack([np.diag([1.0, 0.5, 0.8]), np.array([[0.7, 0.2, 0.0], [0.2, 0.9, 0.1], [0.0, 0.1, 0.5]])]))
    n = np.array([0.48, 0.6, 0.64])
    X, mass = sample_near_hyperplane(mix, n, 0.3, 0.4, 40_000, r)
    assert math.isclose(mass, strip_mass_mixture(mix, n, 0.3, 0.4))
    t = X @ n
    assert (np.abs(t - 0.3) <= 0.4 + 1e-12).all()
    # the projection follows the mixture's density restricted to the slab (a mixture of truncated normals)
    m = mix.means @ n
    s = np.sqrt(np.einsum("i,kij,j->k", n, mix.covs, n))
    lo, hi = 0.3 - 0.4, 0.3 + 0.4
    wk = mix.weights * (stats.norm.cdf(hi, m, s) - stats.norm.cdf(lo, m, s))
    cdf = lambda x: sum(w * (stats.norm.cdf(x, mk, sk) - stats.norm.cdf(lo, mk, sk))
                        for w, mk, sk in zip(mix.weights, m, s)) / wk.sum()
    assert stats.kstest(t, cdf).pvalue > 1e-3
    # on the hyperplane, one component: the conditional mean of the other coordinates
    one = Mixture(np.array([1.0]), mix.means[1:], mix.covs[1:])
    Xb, _ = sample_near_hyperplane(one, n, 0.3, 0.0, 50_000, r)
    S, mu = one.covs[0], one.means[0]
    assert np.allclose(Xb @ n, 0.3)
    assert np.allclose(Xb.mean(0), mu + S @ n / (n @ S @ n) * (0.3 - n @ mu), atol=0.02)


def test_measured_and_predicted_ratio_linear_and_tangential():
    r = np.random.default_rng(7)
    mix = Mixture(np.array([1.0]), np.zeros((1, 3)), np.eye(3)[None])
    n_np = np.array([1.0, 0.0, 0.0])
    n = torch.as_tensor(n_np)
    T = normal_stretch(n, 0.5)
    exact = strip_mass_mixture(mix, n_np, 0.2, 0.1) / strip_mass_mixture(mix, n_np, 0.2, 0.05)   # Eq. (11)
    meas = measured_ratio(T, mix, n_np, 0.2, 0.05, 20_000, r)
    assert abs(meas["ratio"] - exact) < 4 * meas["se"]
    assert math.isclose(meas["ratio_levelset"], meas["ratio"], rel_tol=1e-12)   # exact for linear maps
    assert math.isclose(predicted_ratio(T, mix, n_np, 0.2, 100, r)["ratio"], 2.0)
    v = torch.tensor([0.0, 0.6, 0.8], dtype=f64)
    for Tt, det in ((tangential_shear(n, v, 0.9), 1.0), (tangential_stretch(n, 3.0, v), 3.0),
                    (tangential_stretch(n, 0.4), 0.16)):
        m = measured_ratio(Tt, mix, n_np, 0.2, 0.05, 5_000, r)
        assert abs(m["ratio_paired"] - 1) < 1e-12                              # exact at every eps (Section 3)
        p = predicted_ratio(Tt, mix, n_np, 0.2, 200, r)
        assert math.isclose(p["ratio"], 1.0) and math.isclose(p["det"], det)   # volume changes, mass does not


def test_unit_scale_and_balanced_weights():
    r = np.random.default_rng(8)
    A, B = r.normal(size=(50, 4)) * 3 + 1, r.normal(size=(20, 4))
    a, b = unit_scale(A, B)
    assert abs(np.sqrt((a ** 2).sum(1).mean()) - 1) < 1e-12 and np.allclose(a.mean(0), 0)
    a2, b2 = unit_scale(5 * A - 2, 5 * B - 2)                                  # invariant to similarity maps
    assert np.allclose(a, a2) and np.allclose(b, b2)
    y = np.array([0] * 30 + [1] * 10 + [2] * 5)
    w = balanced_weights(y)
    assert np.allclose([w[y == k].sum() for k in range(3)], 15.0)


def test_ebc_estimate_converges_to_the_exact_value():
    r = np.random.default_rng(9)
    mu = np.array([[0.0, 0.0], [1.5, 0.5]])
    S = np.array([[1.0, 0.3], [0.3, 0.8]])
    draw = lambda m: (np.concatenate([r.multivariate_normal(mu[k], S, m) for k in (0, 1)]), np.repeat([0, 1], m))
    Za, ya = draw(5_000)
    Zb, yb = draw(30_000)
    est, probe, dist = ebc_estimate(Za, ya, Zb, yb, 0.1)
    p = [strip_mass_gaussian(mu[k], S, probe.W, probe.b, 0.1) for k in (0, 1)]
    se = math.sqrt(sum(q * (1 - q) / 30_000 for q in p)) / 2 / 0.2
    assert abs(est - np.mean(p) / 0.2) < 4 * se
    assert dist.shape == (60_000,)


def test_strip_surrogate_matches_numpy_and_closed_form():
    r = np.random.default_rng(10)
    Z = torch.tensor(r.normal(size=(100, 5)), requires_grad=True)
    W, b = torch.as_tensor(r.normal(size=(5, 3))), torch.as_tensor(r.normal(size=3))
    s = strip_surrogate(Z, W, b, 0.3)
    val0 = float(s.detach())
    radius = float((Z.detach() - Z.detach().mean(0)).pow(2).sum(1).mean().sqrt())
    d = boundary_distance(Z.detach().numpy(), W.numpy(), b.numpy()) / radius
    assert math.isclose(val0, np.exp(-d ** 2 / (2 * 0.09)).mean(), rel_tol=1e-12)
    s.backward()
    assert torch.isfinite(Z.grad).all() and Z.grad.abs().sum() > 0
    # blowing the features and the head's boundary up together changes nothing (distances in RMS-radius units)
    assert math.isclose(float(strip_surrogate(4 * Z.detach(), W, 4 * b, 0.3)), val0, rel_tol=1e-10)
    # E exp(-t^2 / 2 eps^2) for t ~ N(m, sg^2): eps / sqrt(eps^2 + sg^2) exp(-m^2 / 2 (eps^2 + sg^2))
    t = r.normal(0.4, 0.7, size=400_000)
    Zt = torch.as_tensor(np.stack([t, np.zeros_like(t)], 1))
    Wt = torch.tensor([[-0.5, 0.5], [0.0, 0.0]], dtype=f64)
    bt = torch.zeros(2, dtype=f64)
    rad = float((Zt - Zt.mean(0)).pow(2).sum(1).mean().sqrt())
    val = float(strip_surrogate(Zt, Wt, bt, 0.2 / rad))
    assert abs(val - 0.2 / math.hypot(0.2, 0.7) * math.exp(-0.16 / (2 * (0.04 + 0.49)))) < 2e-3
