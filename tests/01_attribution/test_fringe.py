"""paper_suite.attribution.fringe against independent references: arc lengths, the two-class closed form,
dense linear algebra, brute-force geodesic minimality, and path-method completeness."""
import inspect

import numpy as np
import pytest
import torch
from torch import nn

from paper_suite.attrib import make_classifier, path_integrated_gradients, straight_line_path, target_log_prob
from paper_suite.attribution.fringe import (categorical_fisher, fisher_rao_distance, fisher_rao_geodesic, fringe,
                                            fringe_path, kl_divergence, natural_gradient_step)


def test_public_signatures():
    assert list(inspect.signature(fisher_rao_distance).parameters) == ["p", "q"]
    assert list(inspect.signature(fisher_rao_geodesic).parameters) == ["p", "q", "t"]
    sig = inspect.signature(fringe)
    assert list(sig.parameters)[:4] == ["model", "x", "target", "steps"] and sig.parameters["steps"].default == 64


def test_distance_is_metric_arc_length():
    """Eq. (2) equals the length of the geodesic measured with the Fisher metric sum dp^2/p (numerical integral)."""
    rng = np.random.default_rng(1)
    for _ in range(5):
        p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(0.3 * np.ones(6))
        g = fisher_rao_geodesic(p, q, np.linspace(0, 1, 40001))
        arc = np.sqrt((np.diff(g, axis=0) ** 2 / (0.5 * (g[1:] + g[:-1]))).sum(1)).sum()
        assert abs(arc - fisher_rao_distance(p, q)) < 1e-6


def test_two_class_closed_form():
    """For K = 2, p = (cos^2 phi, sin^2 phi): d_FR = 2|phi - psi| and the geodesic is linear in phi."""
    phi, psi = 0.3, 1.2
    p = np.array([np.cos(phi) ** 2, np.sin(phi) ** 2])
    q = np.array([np.cos(psi) ** 2, np.sin(psi) ** 2])
    assert np.isclose(fisher_rao_distance(p, q), 2 * abs(phi - psi))
    for t in (0.0, 0.25, 0.7, 1.0):
        a = (1 - t) * phi + t * psi
        assert np.allclose(fisher_rao_geodesic(p, q, t), [np.cos(a) ** 2, np.sin(a) ** 2])


def test_metric_axioms_and_batching():
    rng = np.random.default_rng(2)
    P = rng.dirichlet(np.ones(5), size=(50, 3))
    d = fisher_rao_distance
    assert np.allclose(d(P[:, 0], P[:, 0]), 0, atol=1e-6)
    assert np.allclose(d(P[:, 0], P[:, 1]), d(P[:, 1], P[:, 0]))
    assert np.all(d(P[:, 0], P[:, 2]) <= d(P[:, 0], P[:, 1]) + d(P[:, 1], P[:, 2]) + 1e-12)
    assert np.isclose(d([1, 0, 0], [0, 0.5, 0.5]), np.pi)
    tp = torch.tensor(P)
    assert np.allclose(d(tp[:, 0], tp[:, 1]).numpy(), d(P[:, 0], P[:, 1]))
    assert d(tp[:, 0], tp[:, 1]).shape == (50,)


def test_geodesic_properties_and_minimality():
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
    D = fisher_rao_distance(p, q)
    g = fisher_rao_geodesic(p, q, np.array([0.0, 0.2, 0.5, 1.0]))
    assert np.allclose(g[0], p) and np.allclose(g[-1], q) and np.allclose(g.sum(1), 1) and (g >= 0).all()
    assert np.isclose(fisher_rao_distance(g[1], g[2]), 0.3 * D)             # constant speed
    # brute force: the midpoint lies on a shortest path, random points do not beat it
    r = rng.dirichlet(np.ones(4), size=20000)
    via = fisher_rao_distance(p, r) + fisher_rao_distance(r, q)
    assert via.min() >= D - 1e-9
    assert np.isclose(fisher_rao_distance(p, g[2]) + fisher_rao_distance(g[2], q), D)
    assert np.allclose(fisher_rao_geodesic(p, p, 0.4), p)                   # degenerate geodesic


def test_natural_gradient_step_against_dense_solve():
    torch.manual_seed(0)
    J = torch.randn(3, 6, 40, dtype=torch.float64)
    p = torch.softmax(torch.randn(3, 6, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(3, 6, dtype=torch.float64), -1)
    d = natural_gradient_step(J, p, q, damping=0.05)
    for b in range(3):
        Fm = torch.diag(p[b]) - torch.outer(p[b], p[b])
        G = J[b].T @ Fm @ J[b]
        eta = 0.05 * torch.trace(G) / 5                                        # tr(J J^T F) = tr(J^T F J)
        ref = -torch.linalg.solve(G + eta * torch.eye(40, dtype=torch.float64), J[b].T @ (p[b] - q[b]))
        assert torch.allclose(d[b], ref, atol=1e-9)
    assert torch.allclose(categorical_fisher(p).sum(2), torch.zeros(3, 6, dtype=torch.float64), atol=1e-12)


def _linear(seed=0, d=16, K=4):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(d, K)).double()


def test_fringe_on_logistic_regression_tracks_geodesic_and_is_complete():
    m = _linear()
    x = 2 * torch.randn(5, 1, 4, 4, dtype=torch.float64)
    c = m(x).argmax(1)
    A, fp = fringe(m, x, c, steps=48, return_path=True)
    assert A.shape == x.shape and fp.path.shape == (49, *x.shape) and torch.allclose(fp.path[-1], x)
    dF = target_log_prob(m, x, c) - target_log_prob(m, fp.path[0], c)
    assert torch.allclose(A.flatten(1).sum(1), dF, rtol=1e-3, atol=1e-6)
    assert fisher_rao_distance(fp.probs, fp.planned).max() < 0.05
    H = -(fp.probs[0] * fp.probs[0].log()).sum(1)
    assert (H > 0.99 * np.log(4)).all()


def test_fringe_integer_target_and_cnn_completeness():
    m = make_classifier("cnn", 8, 10, width=4, seed=1).double().eval()
    with torch.no_grad():
        m[-1].weight.mul_(30.0)                         # a confident model: F(x) - F(x_0) far from 0
    x = torch.rand(3, 1, 8, 8, dtype=torch.float64)
    c0 = int(m(x[:1]).argmax())
    A1, fp = fringe(m, x, c0, steps=24, return_path=True)
    A2 = fringe(m, x, torch.tensor([c0] * 3), steps=24)
    assert torch.allclose(A1, A2)
    c = torch.full((3,), c0)
    dF = target_log_prob(m, x, c) - target_log_prob(m, fp.path[0], c)
    err = ((A1.flatten(1).sum(1) - dF).abs() / dF.abs()).max()
    # on a ReLU net the gap is trapezoid error at the kinks: subdividing the realised polygon removes it
    fine = torch.cat([straight_line_path(b, a, 16)[:-1] for a, b in zip(fp.path[:-1], fp.path[1:])] + [fp.path[-1:]])
    A_fine = path_integrated_gradients(m, fine, c)
    err_fine = ((A_fine.flatten(1).sum(1) - dF).abs() / dF.abs()).max()
    assert err < 0.15 and err_fine < 0.01 and err_fine < err


def test_kl_trust_region_bounds_accepted_steps():
    """With one inner iteration and no forced step, every accepted step obeys KL(p_k || p_{k+1}) <= eps_KL."""
    m = _linear(seed=4)
    x = 3 * torch.randn(4, 1, 4, 4, dtype=torch.float64)
    fp = fringe_path(m, x, steps=20, rho_kl=1.0, inner=1, halvings=30)
    u = torch.full_like(fp.probs[-1], 0.25)
    eps = 0.5 * (fisher_rao_distance(u, fp.probs[-1]) / 20) ** 2
    kl = kl_divergence(fp.probs[1:], fp.probs[:-1])        # reversed order: step from path[k+1] to path[k]
    assert (kl <= eps + 1e-12).all()
