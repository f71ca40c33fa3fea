"""Tests of paper_suite.linedit against references that share none of its code: SciPy's principal angles and
null spaces, the concept-erasure package's LEACE and quadratic eraser, scikit-learn's logistic regression, and
properties (idempotence, orthogonality, zero cross-covariance)."""
import numpy as np
import pytest
import torch
from scipy.linalg import null_space, subspace_angles
from sklearn.linear_model import LogisticRegression

from paper_suite.linedit import (INLPResult, inlp, leace_concept_erasure, leace_fit, orthonormal_basis, project_out,
                                 projector, subspace_overlap)


def data(n=800, p=6, K=3, seed=0):
    r = np.random.default_rng(seed)
    y = r.integers(0, K, n)
    Z = r.normal(size=(n, p)) @ r.normal(size=(p, p)) + 2.0 * r.normal(size=(K, p))[y]
    return Z, y


def test_basis_and_projector_match_scipy_null_space():
    r = np.random.default_rng(1)
    U = r.normal(size=(7, 3))
    Q = orthonormal_basis(np.c_[U, U @ r.normal(size=(3, 2))])
    assert Q.shape == (7, 3) and np.allclose(Q.T @ Q, np.eye(3))
    N = null_space(U.T)
    assert np.allclose(projector(U), N @ N.T)


def test_project_out_is_an_idempotent_projection_about_the_centre():
    Z, _ = data()
    U = np.random.default_rng(2).normal(size=(6, 2))
    c = Z.mean(0)
    E = project_out(Z, U, center=c)
    assert np.allclose((E - c) @ U, 0)
    assert np.allclose(project_out(E, U, center=c), E)
    assert np.allclose(project_out(Z, U, center="mean"), E)
    assert np.allclose(project_out(Z, np.zeros((6, 0))), Z)


def test_tensors_come_back_as_tensors():
    Z, y = data()
    Zt = torch.as_tensor(Z, dtype=torch.float32)
    out = project_out(Zt, np.eye(6)[:, :1])
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert isinstance(leace_fit(Zt, torch.as_tensor(y))(Zt), torch.Tensor)


def test_overlap_matches_principal_angles():
    r = np.random.default_rng(3)
    for ra, rb in ((2, 2), (1, 3), (3, 3)):
        A, B = r.normal(size=(8, ra)), r.normal(size=(8, rb))
        ref = np.sum(np.cos(subspace_angles(A, B)) ** 2) / max(ra, rb)
        assert np.isclose(subspace_overlap(A, B), ref)
    assert subspace_overlap(A, A @ r.normal(size=(3, 3))) == pytest.approx(1.0)


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="2-D"):
        project_out(np.zeros(5), np.eye(5)[:, :1])
    with pytest.raises(ValueError, match="rows"):
        project_out(np.zeros((3, 4)), np.eye(5)[:, :1])
    with pytest.raises(ValueError, match="labels"):
        inlp(np.zeros((3, 4)), [0, 1])


def test_inlp_removes_what_sklearn_probes_read():
    Z, y = data(n=1200, p=8, K=2, seed=4)
    res = inlp(Z, y, n_iter=6)
    assert isinstance(res, INLPResult)
    D = res.directions
    assert np.allclose(D.T @ D, np.eye(D.shape[1])) and np.allclose(res.P, np.eye(8) - D @ D.T)
    E = res.apply(Z)
    acc = LogisticRegression(max_iter=2000).fit(E, y).score(E, y)
    base = LogisticRegression(max_iter=2000).fit(Z, y).score(Z, y)
    assert base > 0.9 and acc < 0.6


def test_inlp_first_direction_is_the_logistic_normal():
    Z, y = data(n=1000, p=5, K=2, seed=5)
    res = inlp(Z, y, n_iter=1, C=1.0)
    w = LogisticRegression(C=1.0, max_iter=5000, tol=1e-10).fit(Z - Z.mean(0), y).coef_[0]
    assert abs(res.directions[:, 0] @ w) / np.linalg.norm(w) > 1 - 1e-4


@pytest.mark.parametrize("K", [2, 3, 5])
def test_leace_matches_concept_erasure(K):
    from concept_erasure import LeaceEraser

    Z, y = data(n=1500, p=7, K=K, seed=K)
    ours = leace_fit(Z, y)(Z)
    ref = LeaceEraser.fit(torch.as_tensor(Z), torch.nn.functional.one_hot(torch.as_tensor(y)).double(),
                          shrinkage=False)
    assert np.allclose(ours, ref(torch.as_tensor(Z)).numpy(), atol=1e-6)
    assert np.allclose(leace_concept_erasure(Z, y)(Z), ours, atol=1e-6)
    Y = np.eye(K)[y]
    assert np.abs((ours - ours.mean(0)).T @ (Y - Y.mean(0))).max() / len(Z) < 1e-9


def test_leace_is_least_squares_among_rank_matched_erasers():
    """LEACE moves the data less (in the whitened norm it minimises) than projecting out the class-mean span."""
    Z, y = data(n=1500, p=6, K=3, seed=7)
    E = leace_fit(Z, y)(Z)
    mus = np.stack([Z[y == k].mean(0) for k in range(3)]) - Z.mean(0)
    E2 = project_out(Z, mus.T, center="mean")
    S = np.cov(Z.T, bias=True)
    W = np.linalg.inv(np.linalg.cholesky(S)).T
    assert np.sum(((E - Z) @ W) ** 2) <= np.sum(((E2 - Z) @ W) ** 2) + 1e-8


def test_quadratic_leace_equalises_class_means():
    Z, y = data(n=3000, p=4, K=3, seed=8)
    E = leace_concept_erasure(Z, y, method="quadratic")(Z, y)
    mus = np.stack([E[y == k].mean(0) for k in range(3)])
    assert np.abs(mus - mus.mean(0)).max() < 0.1 * np.abs(Z).std()
    with pytest.raises(ValueError, match="labels"):
        leace_concept_erasure(Z, y, method="quadratic")(Z)
    with pytest.raises(ValueError, match="unknown method"):
        leace_concept_erasure(Z, y, method="x")
