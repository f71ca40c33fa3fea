"""paper_suite.federated.fed_routing against independent references: per-query loops, brute force over routers,
scikit-learn's KMeans and pairwise distances, hand-built Flower FitRes, and the fedavg loop against Flower."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.strategy import FedAvg
from sklearn.cluster import KMeans
from sklearn.metrics import pairwise_distances

from paper_suite.federated.fed_routing import (SumStrategy, assign, cell_stats, draw_coverage, federated_init,
                                               federated_kmeans, federated_mlp, flower_kmeans_router, frontier,
                                               frontier_auc, kmeans_table, lambda_grid, masked_bce, plugin_bound,
                                               route, suboptimality, synthetic_bench)


def _logs(n=400, d=3, M=5, seed=0, p_obs=0.6):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    Q = np.where(rng.random((n, M)) < p_obs, rng.integers(0, 2, (n, M)).astype(float), np.nan)
    return X, Q


def test_cell_stats_by_loops_and_ties():
    X, Q = _logs()
    C = X[[3, 50, 120, 300]]
    S, N = cell_stats(X, Q, C)
    assert S.dtype == np.float64 and N.dtype == np.int64 and S.shape == N.shape == (4, 5)
    lab = pairwise_distances(X, C).argmin(1)
    for j in range(4):
        for m in range(5):
            v = [Q[i, m] for i in range(len(X)) if lab[i] == j and not np.isnan(Q[i, m])]
            assert N[j, m] == len(v) and S[j, m] == pytest.approx(sum(v))
    # a query equidistant from two centroids goes to the lower index
    S2, N2 = cell_stats(np.zeros((1, 2)), np.ones((1, 1)), np.array([[1.0, 0.0], [-1.0, 0.0]]))
    assert N2[:, 0].tolist() == [1, 0]
    with pytest.raises(ValueError):
        cell_stats(X, Q[:10], C)


def test_table_is_smoothed_mean():
    S, N = np.array([[3.0, 0.0], [1.0, 0.0]]), np.array([[4, 0], [1, 0]])
    t = kmeans_table(S, N, alpha=2.0)
    assert t[0, 0] == pytest.approx((3 + 2 * 0.8) / 6) and t[1, 0] == pytest.approx((1 + 2 * 0.8) / 3)
    assert np.allclose(t[:, 1], 0.5)                # a model never observed: the neutral prior


def test_federated_statistics_and_lloyd_are_centralised():
    X, Q = _logs(n=600, seed=1)
    init = X[:6].copy()
    parts = np.array_split(np.random.default_rng(0).permutation(600), 4)
    C = federated_kmeans([X[p] for p in parts], init, 8)
    ref = KMeans(6, init=init, n_init=1, max_iter=8, tol=0.0, algorithm="lloyd").fit(X).cluster_centers_
    assert np.abs(C - ref).max() < 1e-10
    S, N = cell_stats(X, Q, C)
    Sk = [cell_stats(X[p], Q[p], C) for p in parts]
    assert np.array_equal(sum(n for _, n in Sk), N) and np.abs(sum(s for s, _ in Sk) - S).max() <= 1e-12


def test_empty_cell_keeps_its_centroid():
    X = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0]])
    init = np.array([[0.0, 0.0], [100.0, 100.0], [5.0, 5.0]])
    C = federated_kmeans([X[:2], X[2:]], init, 3)
    assert np.allclose(C[0], [0.05, 0.0]) and np.array_equal(C[1], init[1]) and np.allclose(C[2], [5.0, 5.0])


def test_federated_init_shape_and_error():
    X, _ = _logs(n=60)
    assert federated_init([X[:30], X[30:]], 5, 0).shape == (5, 3)
    with pytest.raises(ValueError):
        federated_init([X[:2], X[2:4]], 5, 0)


def test_suboptimality_brute_force():
    rng = np.random.default_rng(3)
    q, qh, c = rng.random((50, 4)), rng.random((50, 4)), np.array([0.0, 0.2, 0.5, 1.0])
    for lam in (0.0, 0.4, 3.0):
        ref = np.mean([max(q[i] - lam * c) - (q[i, int(np.argmax(qh[i] - lam * c))] - lam * c[int(np.argmax(qh[i] - lam * c))])
                       for i in range(50)])
        assert suboptimality(q, qh, c, lam) == pytest.approx(ref)
        assert 0 <= suboptimality(q, qh, c, lam) <= plugin_bound(q, qh, c, lam) + 1e-12
        a = np.array([True, False, True, False])
        assert suboptimality(q, qh, c, lam, allowed=a) <= plugin_bound(q, qh, c, lam, allowed=a) + 1e-12
    assert suboptimality(q, q, c, 0.4) == 0.0
    # ties go to the lower index
    assert route(np.array([[0.5, 0.5]]), np.zeros(2), 0.0).tolist() == [0]


def test_plugin_bound_is_tight_somewhere():
    # one query, two free models: q = (1, 0), q̂ = (0.5 − ε, 0.5 + ε): routed wrong, loss 1, bound 2·(0.5 + ε)
    eps = 1e-3
    q, qh = np.array([[1.0, 0.0]]), np.array([[0.5 - eps, 0.5 + eps]])
    assert suboptimality(q, qh, np.zeros(2), 0.0) == 1.0
    assert plugin_bound(q, qh, np.zeros(2), 0.0) == pytest.approx(1 + 2 * eps)


def test_frontier_auc_closed_forms():
    assert frontier_auc([0.0], [0.7]) == pytest.approx(0.7)
    assert frontier_auc([0.0, 1.0], [0.5, 0.9]) == pytest.approx(0.7)
    assert frontier_auc([0.0, 0.5, 1.0], [0.5, 0.4, 0.9]) == pytest.approx(0.7)      # under the chord
    assert frontier_auc([0.0, 0.5, 1.0], [0.5, 0.9, 0.6]) == pytest.approx(0.25 * 1.4 + 0.5 * 0.9)
    assert frontier_auc([0.5], [0.8]) == pytest.approx(0.4)                          # 0 below the cheapest point


def test_frontier_of_oracle_dominates():
    b = synthetic_bench(200, 300, 4, 3, 4, 0)
    lams = lambda_grid(b.prices)
    co, ao = frontier(b.qt, b.qt, b.prices, lams)
    cr, ar = frontier(b.qt, np.random.default_rng(0).random(b.qt.shape), b.prices, lams)
    assert co[-1] == 0.0 and frontier_auc(co, ao) >= frontier_auc(cr, ar)


def _fitres(arrays, n):
    return FitRes(status=Status(code=Code.OK, message=""), parameters=ndarrays_to_parameters(arrays),
                  num_examples=n, metrics={})


def test_sum_strategy_sums_exactly():
    s = SumStrategy()
    assert isinstance(s, FedAvg)
    a = [np.array([[1.5, 2.0]]), np.array([3, 4], dtype=np.int64)]
    b = [np.array([[0.25, -1.0]]), np.array([2**40, 1], dtype=np.int64)]
    params, metrics = s.aggregate_fit(1, [(None, _fitres(a, 1)), (None, _fitres(b, 7))], [])
    out = parameters_to_ndarrays(params)
    assert np.array_equal(out[0], [[1.75, 1.0]]) and out[1].dtype == np.int64 and out[1].tolist() == [2**40 + 3, 5]
    assert s.aggregate_fit(1, [], []) == (None, {})
    with pytest.raises(ValueError):
        s.aggregate_fit(1, [(None, _fitres(a, 1)), (None, _fitres(a[:1], 1))], [])


def test_flower_kmeans_router_matches_loop_and_pooled():
    X, Q = _logs(n=300, seed=4)
    parts = np.array_split(np.arange(300), 3)
    init = X[:5].copy()
    C, S, N = flower_kmeans_router([X[p] for p in parts], [Q[p] for p in parts], init, 4)
    assert np.abs(C - federated_kmeans([X], init, 4)).max() <= 1e-12
    S0, N0 = cell_stats(X, Q, C)
    assert np.array_equal(N, N0) and np.abs(S - S0).max() <= 1e-12


def test_masked_bce_by_loop():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 3, generator=g, dtype=torch.float64)
    Q = torch.tensor([[1, np.nan, 0], [np.nan, np.nan, 1], [0, 0, 0], [1, 1, np.nan], [np.nan, 0, 1], [1, np.nan, np.nan]],
                     dtype=torch.float64)
    ref = np.mean([F.binary_cross_entropy_with_logits(logits[i, j], Q[i, j]).item()
                   for i in range(6) for j in range(3) if not torch.isnan(Q[i, j])])
    assert masked_bce(logits, Q).item() == pytest.approx(ref)
    with pytest.raises(ValueError):
        masked_bce(logits, torch.full((6, 3), float("nan"), dtype=torch.float64))


def test_federated_mlp_flower_equals_fedavg_and_one_client_is_central():
    X, Q = _logs(n=120, seed=5)
    tX, tQ = torch.from_numpy(X), torch.from_numpy(Q)
    parts = np.array_split(np.arange(120), 3)
    kw = dict(rounds=3, steps=2, lr=0.05, hidden=8, seed=0)
    a = federated_mlp([tX[p] for p in parts], [tQ[p] for p in parts], backend="loop", **kw)
    b = federated_mlp([tX[p] for p in parts], [tQ[p] for p in parts], backend="flower", **kw)
    assert max((a.state_dict()[k] - b.state_dict()[k]).abs().max().item() for k in a.state_dict()) <= 1e-8
    with pytest.raises(ValueError):
        federated_mlp([tX], [tQ], backend="ray", **kw)


def test_coverage_draw():
    cov = draw_coverage(8, 6, 1)
    assert cov.shape == (8, 6) and cov[:, 0].all() and cov.any(0).all()
    assert set(cov.sum(1)) <= {2, 3, 4}
    with pytest.raises(RuntimeError):
        draw_coverage(1, 8, 0)


def test_assign_matches_sklearn():
    X, _ = _logs(n=200, d=4, seed=6)
    C = X[:7]
    assert np.array_equal(assign(X, C), pairwise_distances(X, C).argmin(1))
    with pytest.raises(ValueError):
        assign(X, C[:, :2])
