"""paper_suite.federated.fbfs against brute-force references (loops over samples and classes) and properties:
additivity of the statistics, equivalence with pooled BFS, deterministic tie-breaking."""
import numpy as np
import pytest

from paper_suite.federated.fbfs import (centralized_bfs, cofiring_stats, discriminative_scores, firing_stats,
                                        mean_redundancy, merge_stats, phi_matrix, popcount_predict, select_diverse,
                                        select_gates)


def _data(seed=0, n=120, G=15, C=4):
    rng = np.random.default_rng(seed)
    return (rng.random((n, G)) < rng.random(G)).astype(np.uint8), rng.integers(0, C, n), C


def test_firing_stats_by_loops():
    f, y, C = _data()
    counts, sums = firing_stats(f, y, C)
    assert counts.shape == (C,) and sums.shape == (C, f.shape[1])
    for c in range(C):
        assert counts[c] == sum(1 for v in y if v == c)
        for g in range(f.shape[1]):
            assert sums[c, g] == sum(int(f[i, g]) for i in range(len(y)) if y[i] == c)


def test_merge_is_pooled_stats_for_any_partition():
    f, y, C = _data(1)
    cut = np.sort(np.random.default_rng(2).choice(np.arange(1, len(y)), 4, replace=False))
    parts = np.split(np.random.default_rng(3).permutation(len(y)), cut)
    merged = merge_stats([firing_stats(f[p], y[p], C) for p in parts])
    pooled = firing_stats(f, y, C)
    assert all(np.array_equal(a, b) for a, b in zip(merged, pooled))


def test_scores_by_class_means():
    f, y, C = _data(4)
    d = discriminative_scores(firing_stats(f, y, C))
    for c in range(C):
        for g in range(f.shape[1]):
            ref = np.mean([f[i, g] for i in range(len(y)) if y[i] == c]) - np.mean([f[i, g] for i in range(len(y)) if y[i] != c])
            assert abs(d[c, g] - ref) < 1e-12


def test_missing_class_has_zero_mean():
    d = discriminative_scores((np.array([2, 0]), np.array([[1, 2], [0, 0]])))
    assert np.allclose(d[1], [0 - 0.5, 0 - 1.0]) and np.allclose(d[0], [0.5, 1.0])


def test_select_gates_ties_and_order():
    s = np.array([[0.2, 0.9, 0.2, 0.9, -1.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    assert select_gates(s, 3).tolist() == [[1, 3, 0], [0, 1, 2]]
    rng = np.random.default_rng(0)
    s = rng.integers(0, 4, (3, 20)) / 4.0                                   # many ties
    ref = [sorted(range(20), key=lambda g: (-s[c, g], g))[:7] for c in range(3)]
    assert select_gates(s, 7).tolist() == ref
    with pytest.raises(ValueError):
        select_gates(s, 0)


def test_federated_equals_centralized():
    f, y, C = _data(5, n=300, G=40, C=5)
    parts = np.array_split(np.argsort(y, kind="stable"), 6)               # strongly label-skewed clients
    fed = select_gates(discriminative_scores(merge_stats([firing_stats(f[p], y[p], C) for p in parts])), 6)
    sc, cen = centralized_bfs(f, y, C, 6)
    assert np.array_equal(fed, cen) and np.array_equal(popcount_predict(f, fed), popcount_predict(f, cen))


def test_popcount_predict_by_loops():
    f, y, C = _data(6)
    sel = select_gates(discriminative_scores(firing_stats(f, y, C)), 3)
    pred = popcount_predict(f, sel)
    for i in range(len(f)):
        votes = [sum(int(f[i, g]) for g in sel[c]) for c in range(C)]
        assert pred[i] == votes.index(max(votes))


def test_phi_is_pearson_and_additive():
    f, y, C = _data(7)
    cand = select_gates(discriminative_scores(firing_stats(f, y, C)), 5)
    N, S, q = cofiring_stats(f, cand)
    a, b = cofiring_stats(f[:50], cand), cofiring_stats(f[50:], cand)
    assert N == a[0] + b[0] and np.array_equal(S, a[1] + b[1]) and np.array_equal(q, a[2] + b[2])
    phi = phi_matrix(N, S, q)
    for c in range(C):
        assert np.allclose(phi[c], np.corrcoef(f[:, cand[c]].T.astype(float)), atol=1e-12)


def test_diverse_selection_avoids_copies():
    f, y, C = _data(8)
    f2 = np.c_[f, f]                                                       # every gate twice
    sc = discriminative_scores(firing_stats(f2, y, C))
    cand = select_gates(sc, 12)
    phi = phi_matrix(*cofiring_stats(f2, cand))
    assert np.array_equal(select_diverse(sc, cand, phi, 4, lam=0.0), select_gates(sc, 4))
    div = select_diverse(sc, cand, phi, 4, lam=5.0)
    G = f.shape[1]
    for row in div:
        assert len({g % G for g in row}) == 4                               # no gate with its copy
    assert mean_redundancy(f2, div) < mean_redundancy(f2, select_gates(sc, 4))
