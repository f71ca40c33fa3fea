"""paper_suite.applications.afp against references that share no code with it: torch-geometric's FeaturePropagation
(Rossi et al.), direct linear solves, networkx's PageRank, loops over nodes, scikit-learn and brute-force matching."""
import itertools

import networkx as nx
import numpy as np
import pytest
import torch

from paper_suite.applications.afp import (afp_impute, agreement, amgc_instance, balance_blocks, clustering_accuracy,
                                          confidence_weights, feature_propagation, harmonic_extension,
                                          multiscale_embedding, node_reliability, pagerank, reliability_propagation,
                                          sym_operator, topology_infonce, train_encoder)


@pytest.fixture(scope="module")
def inst():
    return amgc_instance(120, 3, 6, 1.5, 6.0, 3.0, 0.6, 0.2, seed=3)


def test_fp_matches_torch_geometric(inst):
    from torch_geometric.data import Data
    from torch_geometric.transforms import FeaturePropagation
    adj, x, kn = inst["adj"], inst["x"], inst["known"]
    ei = torch.from_numpy(np.argwhere(adj > 0).T.copy())
    xt = torch.from_numpy(x.copy())
    miss = torch.from_numpy(np.repeat(~kn[:, None], x.shape[1], axis=1))
    xt[miss] = float("nan")
    data = Data(x=xt, edge_index=ei, edge_weight=torch.ones(ei.shape[1], dtype=torch.float64), num_nodes=len(adj))
    ref = FeaturePropagation(missing_mask=miss, num_iterations=40)(data).x
    np.testing.assert_allclose(feature_propagation(adj, x, kn, 40), ref.numpy(), atol=1e-12)


@pytest.mark.parametrize("weighted", [False, True])
def test_propagation_reaches_the_harmonic_extension(inst, weighted):
    adj, x, kn = inst["adj"], inst["x"], inst["known"]
    r = np.random.default_rng(0).uniform(0.1, 2.0, len(adj)) if weighted else np.ones(len(adj))
    X = reliability_propagation(adj, x, kn, r, 3000)
    # the fixed point by a different route: minimise the energy with a generic solver on the unknown block
    W = adj * r[None, :]
    P = W / W.sum(1, keepdims=True)
    U, K = ~kn, kn
    ref = np.linalg.lstsq(np.eye(U.sum()) - P[np.ix_(U, U)], P[np.ix_(U, K)] @ x[K], rcond=None)[0]
    np.testing.assert_allclose(X[U], ref, atol=1e-9)
    np.testing.assert_array_equal(X[K], x[K])
    np.testing.assert_allclose(harmonic_extension(W, x, kn), X, atol=1e-9)


def test_unweighted_extension_minimises_dirichlet_energy(inst):
    adj, x, kn = inst["adj"], inst["x"], inst["known"]
    X = harmonic_extension(adj, x, kn)
    L = np.diag(adj.sum(1)) - adj
    E = np.trace(X.T @ L @ X)
    rng = np.random.default_rng(1)
    for _ in range(5):
        Y = X.copy()
        Y[~kn] += 0.01 * rng.standard_normal(Y[~kn].shape)
        assert np.trace(Y.T @ L @ Y) > E


def test_sym_extension_differs_from_rw_on_irregular_graphs(inst):
    adj, x, kn = inst["adj"], inst["x"], inst["known"]
    assert np.abs(harmonic_extension(adj, x, kn, "sym") - harmonic_extension(adj, x, kn, "rw")).max() > 1e-3
    with pytest.raises(ValueError, match="laplacian"):
        harmonic_extension(adj, x, kn, "combinatorial")


def test_component_without_observed_node_is_rejected():
    A = np.zeros((4, 4))
    A[0, 1] = A[1, 0] = A[2, 3] = A[3, 2] = 1
    kn = np.array([True, False, False, False])
    with pytest.raises(ValueError, match="no observed node"):
        reliability_propagation(A, np.ones((4, 2)), kn, np.ones(4), 10)
    with pytest.raises(ValueError, match="positive"):
        reliability_propagation(A, np.ones((4, 2)), np.ones(4, bool), -np.ones(4), 10)


def test_pagerank_matches_networkx():
    G = nx.les_miserables_graph()
    G = nx.convert_node_labels_to_integers(G)
    A = nx.to_numpy_array(G, weight=None)
    ref = nx.pagerank(G, alpha=0.85, weight=None, tol=1e-13)
    np.testing.assert_allclose(pagerank(A, iters=300), [ref[i] for i in range(len(A))], atol=1e-9)


def test_agreement_by_loops(inst):
    adj, X = inst["adj"], np.random.default_rng(2).standard_normal((120, 6))
    for j in range(0, 120, 7):
        m = X[adj[j] > 0].mean(0)
        assert np.isclose(agreement(adj, X)[j], X[j] @ m / np.linalg.norm(X[j]) / np.linalg.norm(m))


def test_reliability_factors():
    A = np.ones((4, 4)) - np.eye(4)
    X = np.array([[1.0, 0], [1, 0.05], [1, -0.05], [-1, 0]])
    r = node_reliability(A, X, np.ones(4, bool), beta=0.0)
    assert np.argmin(r) == 3 and r.min() >= 1e-3
    r_u = node_reliability(A, X, np.array([True, True, False, True]), beta=0.0, gamma=0.0, rho_u=0.25, eps=0.0)
    np.testing.assert_allclose(r_u, [1, 1, 0.25, 1])


def test_afp_impute_returns_the_propagation_of_its_weights(inst):
    X, r = afp_impute(inst["adj"], inst["x"], inst["known"], iters=80, rounds=2)
    np.testing.assert_allclose(X, reliability_propagation(inst["adj"], inst["x"], inst["known"], r, 80))


def test_confidence_weights_by_bfs(inst):
    adj, kn = inst["adj"], inst["known"]
    G = nx.from_numpy_array((adj > 0).astype(int))
    d = nx.multi_source_dijkstra_path_length(G, set(np.flatnonzero(kn)), weight=lambda u, v, e: 1)
    np.testing.assert_allclose(confidence_weights(adj, kn, 0.8), [0.8 ** d[i] for i in range(len(adj))])


def test_multiscale_embedding_blocks():
    rng = np.random.default_rng(3)
    S, X = rng.random((7, 7)), rng.standard_normal((7, 2))
    Z = multiscale_embedding(S, X, 3)
    blocks = np.split(Z, 5, axis=1)
    for k in range(4):
        np.testing.assert_allclose(blocks[k], np.linalg.matrix_power(S, k) @ X)
    np.testing.assert_allclose(blocks[4], (np.eye(7) - S) @ X)
    with pytest.raises(ValueError):
        multiscale_embedding(S, X, -1)


def test_sym_operator_spectrum(inst):
    S = sym_operator(inst["adj"])
    ev = np.linalg.eigvalsh(S)
    assert np.isclose(ev.max(), 1.0) and ev.min() > -1.0
    np.testing.assert_allclose(S, S.T)


def test_balance_blocks():
    Z = np.random.default_rng(4).standard_normal((50, 6)) * np.array([1, 1, 10, 10, 0.1, 0.1])
    B = balance_blocks(Z, 3)
    for blk in np.split(B, 3, axis=1):
        assert np.isclose(np.linalg.norm(blk, axis=1).mean(), 1.0)
    np.testing.assert_allclose(B.mean(0), 0, atol=1e-12)


def test_topology_infonce_by_loops_and_errors():
    rng = np.random.default_rng(5)
    z = torch.tensor(rng.standard_normal((9, 4)), requires_grad=True)
    A = rng.random((9, 9)) < 0.4
    A = np.triu(A, 1)
    A = A | A.T
    c = rng.integers(0, 3, 9)
    tau = 0.3
    zn = z.detach().numpy() / np.linalg.norm(z.detach().numpy(), axis=1, keepdims=True)
    s = zn @ zn.T / tau
    ls = []
    for i in range(9):
        pos = [j for j in range(9) if j != i and A[i, j] and c[j] == c[i]]
        if pos:
            den = sum(np.exp(s[i, k]) for k in range(9) if k != i)
            ls.append(-np.log(sum(np.exp(s[i, j]) for j in pos) / den))
    loss = topology_infonce(z, A, c, tau)
    assert np.isclose(loss.item(), np.mean(ls))
    loss.backward()
    assert torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="positive"):
        topology_infonce(z, np.zeros((9, 9), bool), c, tau)


def test_clustering_accuracy_by_brute_force():
    rng = np.random.default_rng(6)
    for _ in range(20):
        y = rng.integers(0, 3, 30)
        p = rng.integers(0, 4, 30)
        # brute force over injective maps of the 4 predicted clusters to the 3 classes (+ one unmatched)
        best = 0.0
        for perm in itertools.permutations(range(4)):
            hits = sum(1 for v, t in zip(p, y) if perm[v] < 3 and perm[v] == t)
            best = max(best, hits / 30)
        assert np.isclose(clustering_accuracy(y, p), best)


def test_amgc_instance(inst):
    n = 120
    assert inst["known"].sum() == round(0.4 * n)
    assert inst["bad"].sum() == round(0.2 * inst["known"].sum()) and not (inst["bad"] & ~inst["known"]).any()
    assert (inst["x"][~inst["known"]] == 0).all()
    good = inst["known"] & ~inst["bad"]
    np.testing.assert_array_equal(inst["x"][good], inst["x_true"][good])
    with pytest.raises(ValueError):
        amgc_instance(50, 2, 4, 1.0, 5, 2, 1.2, 0.1, seed=0)


def test_encoder_is_seeded(inst):
    Z = np.random.default_rng(7).standard_normal((120, 8))
    kw = dict(hidden=8, epochs=3, tau=0.5, refresh=2, lr=1e-2, seed=1)
    a = train_encoder(Z, inst["adj"], 3, **kw)
    b = train_encoder(Z, inst["adj"], 3, **kw)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (120, 8)
