"""paper_suite.curvature against brute-force autograd loops, numpy's eigh and scipy's eigsh."""
import numpy as np
import pytest
import torch
import torch.nn as nn
from scipy.sparse.linalg import LinearOperator, eigsh

from paper_suite.curvature import (empirical_fisher, fisher_diagonal, fisher_vector_product, flat_params,
                                   lanczos_topk, parameter_blocks, per_sample_jacobians, true_fisher)


def model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).double()


def data(n=9, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=g, dtype=torch.float64), torch.randint(0, 3, (n,), generator=g)


def score_loop(m, X, y=None):
    """Eq. (2)/(5) by brute force: one autograd call per sample and class."""
    P = sum(p.numel() for p in m.parameters())
    out = torch.zeros(P, P, dtype=torch.float64)
    for i in range(X.shape[0]):
        lp = torch.log_softmax(m(X[i:i + 1]), -1)[0]
        for c in range(lp.shape[0]):
            if y is not None and c != int(y[i]):
                continue
            g = torch.cat([t.reshape(-1) for t in torch.autograd.grad(lp[c], list(m.parameters()), retain_graph=True)])
            out += (1.0 if y is not None else lp[c].exp().item()) * torch.outer(g, g)
    return out / X.shape[0]


def test_per_sample_jacobians_match_autograd():
    m, (X, _) = model(), data()
    J = per_sample_jacobians(m, X, batch=4)
    P = flat_params(m).numel()
    assert J.shape == (9, 3, P)
    for i in range(9):
        for c in range(3):
            g = torch.autograd.grad(m(X[i:i + 1])[0, c], list(m.parameters()))
            assert torch.allclose(J[i, c], torch.cat([t.reshape(-1) for t in g]))


def test_true_fisher_is_expected_score_outer_product_and_psd():
    m, (X, _) = model(), data()
    F = true_fisher(m, X, batch=4)
    assert F.dtype == torch.float64 and torch.allclose(F, F.T)
    assert torch.allclose(F, score_loop(m, X), atol=1e-12)
    assert torch.linalg.eigvalsh(F).min() > -1e-12
    assert torch.linalg.matrix_rank(F) <= 9 * 2                                      # rank ≤ N (C − 1)


def test_empirical_fisher_matches_loop_and_differs_from_true():
    m, (X, y) = model(), data()
    Fe = empirical_fisher(m, X, y, batch=4)
    assert torch.allclose(Fe, score_loop(m, X, y), atol=1e-12)
    assert not torch.allclose(Fe, true_fisher(m, X))


def test_empirical_fisher_averages_to_true_fisher_over_model_labels():
    """E_{y ~ p(.|x)} F̂ = F: weight each label's empirical Fisher by p(y|x)."""
    m, (X, _) = model(), data(n=3)
    p = torch.softmax(m(X), -1).detach()
    avg = sum(p[i, c] * empirical_fisher(m, X[i:i + 1], torch.tensor([c])) for i in range(3) for c in range(3)) / 3
    assert torch.allclose(avg, true_fisher(m, X), atol=1e-12)


@pytest.mark.parametrize("labels", [False, True])
def test_fisher_diagonal_is_the_diagonal(labels):
    m, (X, y) = model(), data()
    d = torch.cat([v.reshape(-1) for v in fisher_diagonal(m, X, y if labels else None, batch=4).values()])
    dense = empirical_fisher(m, X, y) if labels else true_fisher(m, X)
    assert torch.allclose(d, torch.diagonal(dense), atol=1e-12)


@pytest.mark.parametrize("labels", [False, True])
def test_fisher_vector_product_matches_dense(labels):
    m, (X, y) = model(), data()
    v = torch.randn(flat_params(m).numel(), dtype=torch.float64)
    dense = empirical_fisher(m, X, y) if labels else true_fisher(m, X)
    assert torch.allclose(fisher_vector_product(m, X, v, y if labels else None, batch=4), dense @ v, atol=1e-12)


def test_lanczos_against_eigh_and_eigsh():
    rng = np.random.default_rng(0)
    Q = np.linalg.qr(rng.standard_normal((120, 120)))[0]
    lam = np.logspace(3, -5, 120)
    A = (Q * lam) @ Q.T
    At = torch.tensor(A)
    vals, vecs = lanczos_topk(lambda v: At @ v, 120, 8, seed=3)
    assert np.allclose(vals.numpy(), lam[:8], rtol=1e-8)
    assert np.allclose(np.abs((vecs.numpy() * Q[:, :8]).sum(0)), 1.0, atol=1e-6)
    ref = np.sort(eigsh(LinearOperator((120, 120), matvec=lambda v: A @ v, dtype=np.float64), k=8, which="LA")[0])[::-1]
    assert np.allclose(vals.numpy(), ref, rtol=1e-8)
    assert np.allclose(vecs.T @ vecs, np.eye(8), atol=1e-10)


def test_lanczos_on_fisher_vector_products_matches_dense_eigh():
    m, (X, _) = model(), data(n=20)
    P = flat_params(m).numel()
    vals, vecs = lanczos_topk(lambda v: fisher_vector_product(m, X, v), P, 5, iters=P)
    ref_vals, ref_vecs = np.linalg.eigh(true_fisher(m, X).numpy())
    assert np.allclose(vals.numpy(), ref_vals[::-1][:5], rtol=1e-7)
    assert np.allclose(np.abs((vecs.numpy() * ref_vecs[:, ::-1][:, :5]).sum(0)), 1.0, atol=1e-5)


def test_parameter_blocks_cover_theta_in_order():
    m = model()
    b = parameter_blocks(m)
    assert list(b) == ["0", "2", "4"]
    assert [(s.start, s.stop) for s in b.values()] == [(0, 30), (30, 65), (65, 83)]
    assert flat_params(m).numel() == 83


def test_errors_are_one_line():
    m = model()
    empty = torch.zeros(0, 4, dtype=torch.float64)
    for f in (lambda: true_fisher(m, empty), lambda: per_sample_jacobians(m, empty),
              lambda: fisher_vector_product(m, empty, torch.zeros(83, dtype=torch.float64))):
        with pytest.raises(ValueError, match="at least one sample"):
            f()
    with pytest.raises(ValueError, match="one label per sample"):
        empirical_fisher(m, data()[0], torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="v must have shape"):
        fisher_vector_product(m, data()[0], torch.zeros(5, dtype=torch.float64))
    with pytest.raises(ValueError, match="k must be"):
        lanczos_topk(lambda v: v, 5, 6)
