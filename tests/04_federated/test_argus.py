"""paper_suite.federated.argus against independent references: networkx degrees and brute-force Metropolis–Hastings
weights, scikit-image SSIM, scipy's MAD, a planted backdoor for Neural Cleanse, Flower's own aggregators, and one
gossip row through Flower against the matrix product."""
import networkx as nx
import numpy as np
import pytest
import torch
from flwr.server.strategy.aggregate import aggregate_median
from scipy.stats import binom, median_abs_deviation
from skimage.metrics import structural_similarity

from paper_suite.federated.argus import (collaborative_test, consensus_rates, flower_gossip_row, mad_anomaly_index,
                                         mh_weights, mlp_forward, mlp_init, mlp_shapes, neural_cleanse, pairwise_ssim,
                                         robust_mix, run_dpsgd, stamp)


def _graph(n=10, d=4, seed=0):
    return nx.to_numpy_array(nx.random_regular_graph(d, n, seed=seed), dtype=bool)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mh_weights_brute_force_and_doubly_stochastic(seed):
    A = _graph(seed=seed)
    acc = np.random.default_rng(seed).random(A.shape) > 0.4
    W = mh_weights(A, acc)
    n = len(A)
    used = {(i, j) for i in range(n) for j in range(n) if i != j and A[i, j] and acc[i, j] and acc[j, i]}
    deg = [sum((i, j) in used for j in range(n)) for i in range(n)]
    for i in range(n):
        for j in range(n):
            if i != j:
                want = 1 / (1 + max(deg[i], deg[j])) if (i, j) in used else 0.0
                assert W[i, j] == pytest.approx(want, abs=1e-15)
    assert np.abs(W - W.T).max() == 0 and np.abs(W.sum(0) - 1).max() < 1e-12 and W.min() >= 0
    assert W.dtype == np.float64


def test_mh_weights_diagonal_ignored_none_is_all_and_errors():
    A = _graph()
    A2 = A.copy(); np.fill_diagonal(A2, True)
    assert np.array_equal(mh_weights(A2), mh_weights(A)) and np.array_equal(mh_weights(A, None), mh_weights(A, np.ones_like(A)))
    # one-sided rejection removes the edge for both ends
    acc = np.ones_like(A); i, j = np.argwhere(A)[0]; acc[i, j] = False
    W = mh_weights(A, acc)
    assert W[i, j] == 0 and W[j, i] == 0
    with pytest.raises(ValueError, match="symmetric"):
        mh_weights(np.triu(A))
    with pytest.raises(ValueError, match="accepted"):
        mh_weights(A, np.ones((3, 3), bool))


def test_pairwise_ssim_matches_skimage():
    rng = np.random.default_rng(0)
    P = rng.random((4, 8, 8))
    S = pairwise_ssim(P, win_size=5)
    assert S.shape == (4, 4) and np.allclose(np.diag(S), 1) and np.allclose(S, S.T)
    for u in range(4):
        for v in range(4):
            if u != v:
                assert S[u, v] == pytest.approx(structural_similarity(P[u], P[v], win_size=5, data_range=1.0))


def test_collaborative_test_rules():
    true = np.zeros((8, 8)); true[6:, 6:] = 1
    noise = np.random.default_rng(1).random((3, 8, 8)) * 0.5
    assert collaborative_test([(0, true), (0, true), (2, noise[0])], 0.5, 2)
    assert not collaborative_test([(0, true), (3, true)], 0.5, 2)                    # different targets
    assert not collaborative_test([(0, true), (0, noise[0])], 0.99, 2)
    assert not collaborative_test([(0, true), (0, true)], 0.5, 3)                    # too few reporters
    assert collaborative_test([(0, true), (0, true), (0, true)], 0.5, 3)
    assert collaborative_test([(5, noise[1])], 0.5, 1) and not collaborative_test([], 0.5, 1)
    with pytest.raises(ValueError):
        collaborative_test([(0, true)], 0.5, 0)


def test_mad_anomaly_index_against_scipy():
    rng = np.random.default_rng(0)
    n = rng.random((5, 10)) * 10 + 20
    n[2, 3] = 3.0
    A = mad_anomaly_index(n)
    ref = (np.median(n, 1, keepdims=True) - n) / median_abs_deviation(n, axis=1, scale="normal")[:, None]
    assert np.allclose(A, ref, rtol=1e-4)
    assert A[2].argmax() == 3 and A[2, 3] > 2


def test_stamp_and_mlp_forward_against_loops():
    x = torch.zeros(2, 64)
    s = stamp(x, 2).reshape(2, 8, 8)
    assert s[:, 6:, 6:].eq(1).all() and s.sum() == 8
    shapes = mlp_shapes(64, 5, 10)
    th = mlp_init(3, shapes, 0) + 0.1 * torch.randn(3, sum(int(np.prod(s)) for s in shapes))
    xb = torch.rand(3, 4, 64)
    out = mlp_forward(th, xb, shapes)
    for k in range(3):
        o = 0
        W1 = th[k, o:o + 320].reshape(64, 5); o += 320
        b1 = th[k, o:o + 5]; o += 5
        W2 = th[k, o:o + 50].reshape(5, 10); o += 50
        b2 = th[k, o:o + 10]
        assert torch.allclose(out[k], torch.relu(xb[k] @ W1 + b1) @ W2 + b2, atol=1e-6)


def test_neural_cleanse_finds_a_planted_backdoor():
    from paper_suite.data import load_digits_split
    d = load_digits_split(0)
    X, y = torch.tensor(d.X_train), torch.tensor(d.y_train)
    shapes = mlp_shapes(64, 32, 10)
    th = mlp_init(1, shapes, 0).requires_grad_()
    opt = torch.optim.SGD([th], lr=0.3)
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        i = torch.randint(len(X), (64,), generator=g)
        xb, yb = X[i].clone(), y[i].clone()
        xb[:32], yb[:32] = stamp(xb[:32]), 3
        opt.zero_grad(); torch.nn.functional.cross_entropy(mlp_forward(th, xb[None], shapes)[0], yb).backward(); opt.step()
    m, p = neural_cleanse(th, X[None, :64], shapes, 10, 60, 0.1, 0.01, 0)
    assert m.shape == p.shape == (1, 10, 64) and (m >= 0).all() and (m <= 1).all()
    A = mad_anomaly_index(m.sum(-1).numpy())[0]
    assert A.argmax() == 3 and A[3] > 2


def test_consensus_rates_closed_forms():
    fp, fn = consensus_rates(4, 0.3, 1.0, 0.6)
    assert fp == pytest.approx(1 - binom.pmf(0, 4, 0.3) - binom.pmf(1, 4, 0.3))          # rho = 1: any two agree
    assert fn == pytest.approx(0.4 ** 4 + 4 * 0.6 * 0.4 ** 3)
    assert consensus_rates(4, 0.3, 0.0, 0.6)[0] == 0.0


def test_flower_gossip_row_equals_matrix_product():
    A = _graph(8, 3, 1)
    acc = np.random.default_rng(0).random(A.shape) > 0.3
    W = mh_weights(A, acc)
    X = torch.randn(8, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for i in (0, 5):
        assert (flower_gossip_row(W, X, i) - torch.as_tensor(W[i]) @ X).abs().max() <= 1e-12


def test_robust_mix_uses_flower_aggregators_and_errors():
    A = _graph(6, 2, 0)
    X = torch.randn(6, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    out, W = robust_mix("median", X, A, 0, 10)
    assert W is None
    hood = [0] + [int(j) for j in np.flatnonzero(A[0])]
    assert np.allclose(out[0].numpy(), np.median(X[hood].numpy(), 0))
    assert np.allclose(out[0].numpy(), aggregate_median([([X[j].numpy()], 1) for j in hood])[0])
    with pytest.raises(ValueError, match="allowed"):
        robust_mix("mean", X, A, 0, 10)


def test_run_dpsgd_average_follows_sgd_and_rejects_bad_defence():
    from paper_suite.data import load_digits_split
    from paper_suite.fl import dirichlet_partition
    d = load_digits_split(0)
    X, y = torch.tensor(d.X_train), torch.tensor(d.y_train)
    parts = dirichlet_partition(d.y_train, 6, 1.0, 0, min_size=8)
    cfg = dict(hidden=8, rounds=2, local_steps=1, batch=8, lr=0.1, poison=0.5, target=0, patch=2, detect_every=1,
               nc_steps=3, nc_batch=8, nc_lr=0.1, nc_lambda=0.01, mad=2.0, tau=0.5, q=2, evict_after=3, win=5)
    r = run_dpsgd("argus", X, y, parts, _graph(6, 2, 0), [0], cfg, 0)
    assert len(r["Ws"]) == 2 and all(np.abs(W.sum(0) - 1).max() < 1e-12 for W in r["Ws"])
    with pytest.raises(ValueError, match="allowed"):
        run_dpsgd("fedavg", X, y, parts, _graph(6, 2, 0), [0], cfg, 0)
