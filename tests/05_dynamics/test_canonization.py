"""Tests of paper_suite.dynamics.canonization against references that share no code with it: the
`hilbertcurve` package (scalar Python Hilbert indices), Python's tuple ordering, brute force over all
permutations, explicit loops, and properties (invariance, face-adjacency, isometry in one dimension)."""
import math
from itertools import permutations

import numpy as np
import pytest
import torch
from hilbertcurve.hilbertcurve import HilbertCurve

from paper_suite.dynamics.canonization import (DeepSets, GroupAveraged, CloudMLP, canonize, cluster_clouds,
                                               deepsets_width, fit_gap, hilbert_canonize, hilbert_digits,
                                               hilbert_index, holder_constant, jump_sizes, kernel_target,
                                               lex_canonize, make_model, n_params, nn_perm_distance, nn_scores,
                                               perm_distance, sliced_lower_bound)


@pytest.mark.parametrize("d,bits", [(1, 6), (2, 1), (2, 8), (3, 8), (5, 7), (9, 7)])
def test_hilbert_index_matches_hilbertcurve(d, bits):
    Q = np.random.default_rng(d + 10 * bits).integers(0, 2**bits, size=(300, d))
    ref = HilbertCurve(bits, d).distances_from_points(Q.tolist())
    assert hilbert_index(Q, bits).dtype == np.int64
    assert np.array_equal(hilbert_index(Q, bits), np.array(ref, dtype=np.int64))


def test_hilbert_digits_beyond_int64_match_hilbertcurve():
    Q = np.random.default_rng(3).integers(0, 256, size=(100, 10))            # 80-bit indices
    D = hilbert_digits(Q, 8)
    mine = [sum(int(v) << (10 * (7 - j)) for j, v in enumerate(row)) for row in D]
    assert mine == HilbertCurve(8, 10).distances_from_points(Q.tolist())


@pytest.mark.parametrize("d,bits", [(2, 3), (3, 2), (5, 1)])
def test_hilbert_curve_is_a_face_adjacent_bijection(d, bits):
    cells = np.stack(np.meshgrid(*[np.arange(2**bits)] * d, indexing="ij"), -1).reshape(-1, d)
    h = hilbert_index(cells, bits)
    assert np.array_equal(np.sort(h), np.arange(2 ** (bits * d)))
    steps = np.abs(np.diff(cells[np.argsort(h)], axis=0)).sum(1)
    assert np.all(steps == 1)                                                # a Morton curve would fail this


def test_hilbert_holder_bound_on_the_discrete_curve():
    d, bits = 2, 4
    cells = np.stack(np.meshgrid(*[np.arange(2**bits)] * d, indexing="ij"), -1).reshape(-1, d)
    c = (cells[np.argsort(hilbert_index(cells, bits))] + 0.5) / 2**bits
    for i in range(len(c)):
        for j in range(i + 1, len(c)):
            assert np.linalg.norm(c[i] - c[j]) <= holder_constant(d) * ((j - i + 1) / 2 ** (bits * d)) ** (1 / d)
    assert holder_constant(2) == pytest.approx(2 * math.sqrt(5))


def test_hilbert_index_rejects_bad_input():
    with pytest.raises(ValueError, match="63"):
        hilbert_index(np.zeros((2, 8), dtype=int), 8)
    with pytest.raises(ValueError, match="2\\*\\*bits"):
        hilbert_index(np.array([[4, 0]]), 2)
    with pytest.raises(ValueError):
        hilbert_index(np.array([[0.5, 0.0]]), 2)
    with pytest.raises(ValueError, match="allowed: raw, lex, hilbert"):
        canonize(np.zeros((3, 2)), "morton")


def test_lex_canonize_is_python_tuple_order_and_invariant():
    r = np.random.default_rng(0)
    X = r.integers(0, 3, size=(12, 3)).astype(float)                         # many ties
    assert [tuple(x) for x in lex_canonize(X)] == sorted(map(tuple, X))
    B = r.random((5, 9, 4))
    out = lex_canonize(B)
    for b, o in zip(B, out):
        assert [tuple(x) for x in o] == sorted(map(tuple, b))
    assert np.array_equal(lex_canonize(B[:, r.permutation(9)]), out)


@pytest.mark.parametrize("d", [1, 2, 3, 8])
def test_hilbert_canonize_against_hilbertcurve_sort(d):
    r = np.random.default_rng(d)
    X = r.random((40, d))
    X[5] = X[7]                                                               # a duplicate point
    Q = np.clip(np.floor(X * 256), 0, 255).astype(int)
    h = HilbertCurve(8, d).distances_from_points(Q.tolist())
    ref = sorted(range(40), key=lambda i: (h[i], tuple(X[i])))
    assert np.array_equal(hilbert_canonize(X), X[ref])
    assert np.array_equal(hilbert_canonize(X[r.permutation(40)]), X[ref])   # invariance
    B = r.random((3, 10, d))
    assert np.array_equal(hilbert_canonize(B), np.stack([hilbert_canonize(b) for b in B]))


def test_one_dimension_both_sorts_are_the_sort():
    x = np.random.default_rng(1).random((50, 1))
    assert np.array_equal(lex_canonize(x), np.sort(x, axis=0))
    assert np.array_equal(hilbert_canonize(x), np.sort(x, axis=0))


def test_perm_distance_is_brute_force_minimum():
    r = np.random.default_rng(2)
    X, Y = r.random((6, 2)), r.random((6, 2))
    ref = min(np.linalg.norm(X - Y[list(p)]) for p in permutations(range(6)))
    assert perm_distance(X, Y) == pytest.approx(ref, rel=1e-12)
    assert perm_distance(Y, X) == pytest.approx(ref, rel=1e-12)
    assert perm_distance(X, X[::-1]) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError):
        perm_distance(X, Y[:5])


def test_perm_distance_triangle_inequality_and_sort_isometry_in_1d():
    r = np.random.default_rng(4)
    X, Y, Z = r.random((3, 8, 3))
    assert perm_distance(X, Z) <= perm_distance(X, Y) + perm_distance(Y, Z) + 1e-12
    x, y = r.random((30, 1)), r.random((30, 1))                              # Eq. (9)
    assert perm_distance(x, y) == pytest.approx(np.linalg.norm(np.sort(x, 0) - np.sort(y, 0)), rel=1e-12)


def test_canonized_distances_bound_the_invariant_one():
    r = np.random.default_rng(5)
    X, Ys = r.random((10, 3)), r.random((20, 10, 3))
    dg = np.array([perm_distance(X, y) for y in Ys])
    assert np.all(sliced_lower_bound(X, Ys) <= dg + 1e-12)
    for s in ("raw", "lex", "hilbert"):
        can = np.linalg.norm(canonize(Ys, s) - canonize(X, s)[None], axis=(1, 2))
        assert np.all(dg <= can + 1e-12)


def test_nn_scores_invariant_matches_unpruned_search():
    Xtr, ktr = cluster_clouds(40, 8, 3, seed=1)
    Xte, kte = cluster_clouds(6, 8, 3, seed=2)
    sc = nn_scores(Xte, kte, Xtr, ktr)
    for i in range(6):
        same = Xtr[ktr == kte[i]]
        assert sc["invariant"][i] == pytest.approx(min(perm_distance(Xte[i], y) for y in same), rel=1e-12)
        assert sc["lex"][i] == pytest.approx(
            min(np.linalg.norm(lex_canonize(Xte[i]) - lex_canonize(y)) for y in same), rel=1e-12)
        assert sc["raw"][i] == pytest.approx(min(np.linalg.norm(Xte[i] - y) for y in same), rel=1e-12)
    assert nn_perm_distance(Xte[0], Xtr)[0] <= sc["invariant"][0] + 1e-12  # all classes: no larger
    with pytest.raises(ValueError, match="no training cloud"):
        nn_scores(Xte[:1], [9], Xtr, ktr)


def test_cluster_clouds_and_kernel_target():
    X, k = cluster_clouds(20, 12, 4, seed=7)
    X2, k2 = cluster_clouds(20, 12, 4, seed=7)
    assert X.shape == (20, 12, 4) and np.array_equal(X, X2) and np.array_equal(k, k2)
    assert X.min() >= 0 and X.max() <= 1 and set(k) <= {1, 2, 3, 4}
    one = cluster_clouds(200, 12, 4, seed=8, sigma=0.0)
    for x, kk in zip(*one):                                                  # sigma = 0: exactly kk distinct points
        assert len({tuple(p) for p in x}) == kk
    y = kernel_target(X, 0.2)
    ref = [sum(math.exp(-np.sum((a - b) ** 2) / 0.2) for a in x for b in x) / 144 for x in X]
    assert np.allclose(y, ref)


def test_models_shapes_params_and_invariance():
    torch.manual_seed(0)
    X = torch.rand(5, 7, 3)
    ds = DeepSets(3, 10)
    assert torch.allclose(ds(X), ds(X[:, torch.randperm(7)]), atol=1e-6)
    assert n_params(ds) == 2 * 100 + 7 * 10 + 1
    assert n_params(CloudMLP(7, 3, 16)) == 21 * 16 + 16 + 16 * 16 + 16 + 17
    w = deepsets_width(32, 8, 128)
    assert abs(n_params(DeepSets(8, w)) / n_params(CloudMLP(32, 8, 128)) - 1) < 0.02
    ga = GroupAveraged(CloudMLP(7, 3, 16), 7, 2, 4, seed=1).eval()
    f = ga.f
    manual = torch.stack([f(X[:, p]) for p in ga.fixed]).mean(0)              # Eq. (8) over the fixed set
    assert torch.allclose(ga(X), manual, atol=1e-6)
    with pytest.raises(ValueError, match="allowed"):
        make_model("pointnet", 7, 3, 16)


def test_fit_gap_learns_and_reports_gap():
    X, _ = cluster_clouds(128, 8, 2, seed=0)
    y = kernel_target(X, 0.1)
    y = (y - y.mean()) / y.std()
    Xt, yt = torch.tensor(lex_canonize(X), dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    m = make_model("lex", 8, 2, 32, seed=0)
    res = fit_gap(m, Xt[:96], yt[:96], Xt[96:], yt[96:], epochs=40, batch=32, lr=3e-3, seed=0)
    assert res["train"] < 0.3                                                # learned well below the variance 1
    assert res["gap"] == pytest.approx(res["test"] - res["train"])


def test_jump_sizes_properties():
    X, _ = cluster_clouds(30, 16, 3, seed=3)
    j = jump_sizes(X, 0.02, seed=1)
    Xp = np.clip(X + 0.02 * np.random.default_rng(1).standard_normal(X.shape), 0, 1)
    assert np.allclose(j["raw"], np.linalg.norm(X - Xp, axis=(1, 2)))
    dg = np.array([perm_distance(a, b) for a, b in zip(X, Xp)])
    assert np.all(j["lex"] >= dg - 1e-12) and np.all(j["hilbert"] >= dg - 1e-12)   # Eq. (3)
    j1 = jump_sizes(X[:, :, :1], 0.02, seed=1)                               # d = 1: sorting, an isometry
    assert np.allclose(j1["lex"], [perm_distance(a, b) for a, b in zip(X[:, :, :1], np.clip(
        X[:, :, :1] + 0.02 * np.random.default_rng(1).standard_normal(X[:, :, :1].shape), 0, 1))])
