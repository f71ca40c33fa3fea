"""Tests of paper_suite.algorithms.chamfer against references that share no code with it:
scipy's cdist / cKDTree, scikit-learn's NearestNeighbors, scipy's levy_stable and closed forms."""
import math

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.linalg import toeplitz
from scipy.spatial import cKDTree
from scipy.spatial.distance import cdist
from sklearn.neighbors import NearestNeighbors

from paper_suite.algorithms.chamfer import (chamfer_estimate, chamfer_exact, chamfer_uniform, clustered_points,
                                            crude_nn, embed, is_estimate, nn_dist, pstable, pstable_mean_abs,
                                            sample_size, uniform_estimate)


@pytest.fixture(scope="module")
def pts():
    r = np.random.default_rng(0)
    return r.standard_normal((400, 12)), r.standard_normal((300, 12))


@pytest.mark.parametrize("p", [2.0, 1.5, 1.2])
def test_nn_dist_matches_cdist(pts, p):
    A, B = pts
    ref = cdist(A, B, "minkowski", p=p).min(1)
    np.testing.assert_allclose(nn_dist(A, B, p).numpy(), ref, rtol=1e-10)
    np.testing.assert_allclose(nn_dist(A, B, p, chunk_elems=5).numpy(), ref, rtol=1e-10)   # chunking
    assert math.isclose(chamfer_exact(A, B, p), ref.sum(), rel_tol=1e-10)


def test_chamfer_exact_float32_and_tensor(pts):
    A, B = pts
    ref = NearestNeighbors(n_neighbors=1).fit(B).kneighbors(A)[0].sum()
    assert math.isclose(chamfer_exact(A.astype(np.float32), B.astype(np.float32)), ref, rel_tol=1e-5)
    assert math.isclose(chamfer_exact(torch.from_numpy(A), torch.from_numpy(B)), ref, rel_tol=1e-10)


@pytest.mark.parametrize("p", [2.0, 1.5])
def test_chamfer_exact_low_dim_kdtree(p):
    r = np.random.default_rng(1)
    A, B = r.standard_normal((500, 3)), r.standard_normal((700, 3))
    assert math.isclose(chamfer_exact(A, B, p), cdist(A, B, "minkowski", p=p).min(1).sum(), rel_tol=1e-10)


def test_chamfer_exact_asymmetric_and_identity(pts):
    A, B = pts
    assert chamfer_exact(A, A) == 0.0
    assert not math.isclose(chamfer_exact(A, B), chamfer_exact(B, A))          # CH is not symmetric
    assert math.isclose(chamfer_exact(A, B), cKDTree(B).query(A)[0].sum(), rel_tol=1e-10)


def test_pstable_mean_abs_closed_forms():
    assert math.isclose(pstable_mean_abs(2.0), 2 / math.sqrt(math.pi))        # S ~ N(0, 2)
    # numerical integral of (2/pi) * int (1 - exp(-t^p)) / t^2 dt
    from scipy.integrate import quad
    for p in (1.2, 1.5, 1.8):
        val = 2 / math.pi * (quad(lambda t: (1 - math.exp(-t ** p)) / t ** 2, 0, 1)[0]
                             + quad(lambda t: (1 - math.exp(-t ** p)) / t ** 2, 1, math.inf)[0])
        assert math.isclose(pstable_mean_abs(p), val, rel_tol=1e-6)


@pytest.mark.parametrize("p", [1.3, 1.5, 2.0])
def test_pstable_matches_scipy_levy_stable(p):
    s = pstable(20_000, p, seed=5).numpy()
    ref = stats.levy_stable.rvs(p, 0.0, size=20_000, random_state=6)
    assert stats.ks_2samp(s, ref).pvalue > 1e-3
    if p == 2.0:
        assert abs(s.var() / 2 - 1) < 0.05                                    # N(0, 2)


def test_toeplitz_embedding_is_the_matrix_product():
    r = np.random.default_rng(2)
    X, d, k = r.standard_normal((7, 30)), 30, 12
    gen = torch.Generator().manual_seed(9)
    g = torch.randn(k + d - 1, generator=gen, dtype=torch.float64).numpy()
    sgn = (torch.randint(0, 2, (d,), generator=gen) * 2 - 1).double().numpy()
    T = toeplitz(g[d - 1:d - 1 + k], g[d - 1::-1])
    np.testing.assert_allclose(embed(X, k, 2.0, "toeplitz", seed=9).numpy(),
                               (X * sgn) @ T.T / (k * math.sqrt(2 / math.pi)), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind,p", [("toeplitz", 2.0), ("gauss", 2.0), ("pstable", 1.5)])
def test_embedding_unbiased_in_l1(kind, p):
    x = np.random.default_rng(3).standard_normal((1, 48))
    xn = (np.abs(x) ** p).sum() ** (1 / p)
    vals = np.array([embed(x, 16, p, kind, s).abs().sum().item() for s in range(800)]) / xn
    assert abs(vals.mean() - 1) < (0.04 if p == 2 else 0.2)
    if p < 2:
        assert np.median(vals) < vals.mean()                                  # lopsided: heavy upper tail


def test_embedding_same_seed_same_map(pts):
    A, _ = pts
    assert torch.equal(embed(A, 8, 1.5, seed=4), embed(A, 8, 1.5, seed=4))
    assert torch.allclose(embed(A[:5], 8, 2.0, seed=4), embed(A, 8, 2.0, seed=4)[:5])
    with pytest.raises(ValueError):
        embed(A, 8, 1.5, kind="toeplitz")


@pytest.mark.parametrize("p,kind", [(2.0, "auto"), (2.0, "identity"), (1.5, "auto")])
def test_crude_nn_is_one_sided(pts, p, kind):
    A, B = pts
    D = crude_nn(A, B, p, kind=kind, seed=1).numpy()
    nn = cdist(A, B, "minkowski", p=p).min(1)
    assert np.all(np.isfinite(D)) and np.all(D >= nn * (1 - 1e-12))
    assert D.sum() / nn.sum() < 3                                             # not absurdly coarse
    assert np.all(crude_nn(B[:20], B, p, seed=2).numpy() == 0)                # coincident points


def test_sample_size_formula():
    assert sample_size(1.0) == 1
    assert sample_size(2.0, eps=0.1, delta=0.1) == 1000
    assert sample_size(1.25, eps=0.05, delta=0.2) == math.ceil(0.25 / (0.0025 * 0.2))


def test_estimators_closed_forms():
    nn = torch.tensor([1.0, 2.0, 3.0])
    assert is_estimate(nn, nn, 10.0) == pytest.approx(10.0)                    # D = nn: zero variance
    assert uniform_estimate(nn, 30) == pytest.approx(60.0)


def test_importance_sampling_exactly_unbiased_by_enumeration():
    """E over all T=1 draws equals CH for arbitrary D > 0 (Eq. 3)."""
    r = np.random.default_rng(4)
    nn, D = r.random(50), r.random(50) + 0.1
    prob = D / D.sum()
    expect = sum(prob[i] * is_estimate(nn[i:i + 1], D[i:i + 1], D.sum()) for i in range(50))
    assert expect == pytest.approx(nn.sum(), rel=1e-12)


def test_chamfer_estimate_accuracy_and_determinism():
    A, B = clustered_points(1500, 12, outlier_frac=0.01, outlier_radius=60, seed=1)
    ex2, ex15 = chamfer_exact(A, B), chamfer_exact(A, B, 1.5)
    assert abs(chamfer_estimate(A, B, seed=0) / ex2 - 1) < 0.1
    assert abs(chamfer_estimate(A, B, n_samples=2000, seed=1) / ex2 - 1) < 0.03
    assert abs(chamfer_estimate(A, B, 1.5, seed=0) / ex15 - 1) < 0.1
    assert chamfer_estimate(A, B, seed=3) == chamfer_estimate(A, B, seed=3)
    assert chamfer_estimate(A, A) == 0.0


def test_importance_beats_uniform_on_outliers():
    A, B = clustered_points(2000, 16, outlier_frac=0.005, outlier_radius=100, seed=2)
    ex = chamfer_exact(A, B)
    e_is = [abs(chamfer_estimate(A, B, n_samples=100, seed=s) / ex - 1) for s in range(8)]
    e_un = [abs(chamfer_uniform(A, B, n_samples=100, seed=s) / ex - 1) for s in range(8)]
    assert np.median(e_is) < np.median(e_un) / 3


def test_clustered_points_shapes_and_outliers():
    A, B = clustered_points(1000, 8, outlier_frac=0.01, outlier_radius=50, seed=0, dtype=np.float32)
    assert A.shape == B.shape == (1000, 8) and A.dtype == np.float32
    assert np.sum(np.linalg.norm(A, axis=1) > 40 * math.sqrt(8)) == 10
    A2, _ = clustered_points(1000, 8, outlier_frac=0.01, outlier_radius=50, seed=0, dtype=np.float32)
    assert np.array_equal(A, A2)
