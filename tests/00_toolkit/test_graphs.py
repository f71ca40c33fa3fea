"""paper_suite.graphs against networkx, scipy's matrix exponential, brute force and closed forms."""
import networkx as nx
import numpy as np
import pytest
import torch
from scipy.linalg import expm

from paper_suite.graphs import (add_self_loops, chance_accuracy, consensus_clusters, csbm, degrees, dirichlet_energy,
                                edge_index_from_nx, edge_weights, effective_rank, graph_odeint, laplacian_spectrum,
                                linear_diffusion, linear_probe, normalized_adjacency, normalized_laplacian, propagate,
                                spectral_gap, split_nodes, time_grid, to_dense)


@pytest.fixture(scope="module")
def g():
    return csbm(60, 3, 0.35, 0.03, 5, 2.0, seed=1)


def test_csbm_structure(g):
    assert g.n == 60 and g.x.shape == (60, 5) and g.n_classes == 3
    assert np.bincount(g.y.numpy()).tolist() == [20, 20, 20]
    G = nx.Graph(g.edge_index.T.tolist())
    assert nx.is_connected(G) and G.number_of_nodes() == 60
    e = set(map(tuple, g.edge_index.T.tolist()))
    assert all((j, i) in e for i, j in e) and all(i != j for i, j in e)
    # the class means μ e_y, Eq. (1)
    m = torch.stack([g.x[g.y == c].mean(0) for c in range(3)])
    assert torch.allclose(m[:, :3], 2.0 * torch.eye(3, dtype=m.dtype), atol=0.8)
    # reproducible by seed
    assert torch.equal(csbm(60, 3, 0.35, 0.03, 5, 2.0, seed=1).edge_index, g.edge_index)


def test_csbm_rejects_bad_sizes():
    with pytest.raises(ValueError):
        csbm(30, 4, 0.5, 0.1, 3, 1.0)


def test_operators_against_networkx(g):
    G = nx.Graph(g.edge_index.T.tolist())
    G.add_edges_from((i, i) for i in range(g.n))
    Lnx = nx.normalized_laplacian_matrix(G, nodelist=range(g.n)).toarray()
    assert np.allclose(normalized_laplacian(g.edge_index, g.n).numpy(), Lnx)
    Anx = nx.to_numpy_array(G, nodelist=range(g.n))
    d = Anx.sum(1)
    assert np.allclose(normalized_adjacency(g.edge_index, g.n, kind="rw").numpy(), Anx / d[:, None])
    assert np.allclose(normalized_adjacency(g.edge_index, g.n, kind="sym").numpy(), Anx / np.sqrt(np.outer(d, d)))
    ev = np.linalg.eigvalsh(Lnx)
    assert np.allclose(laplacian_spectrum(g.edge_index, g.n).numpy(), ev)
    assert spectral_gap(g.edge_index, g.n) == pytest.approx(ev[1])


def test_spectral_gap_zero_iff_disconnected():
    two = nx.disjoint_union(nx.path_graph(4), nx.path_graph(3))
    assert abs(spectral_gap(edge_index_from_nx(two), 7)) < 1e-12
    assert spectral_gap(edge_index_from_nx(nx.path_graph(7)), 7) > 1e-3


def test_weighted_propagate_matches_dense(g):
    w = torch.rand(g.edge_index.shape[1], dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    W = to_dense(g.edge_index, g.n, w)
    x = torch.randn(g.n, 3, dtype=torch.float64)
    assert torch.allclose(propagate(g.edge_index, w, x), W @ x)
    ei, wl = add_self_loops(g.edge_index, g.n, w, loop_weight=2.0)
    assert torch.allclose(degrees(ei, g.n, wl), W.sum(1) + 2.0)
    with pytest.raises(ValueError):
        edge_weights(g.edge_index, g.n, kind="lap")


def test_dirichlet_energy_brute_force(g):
    x = torch.randn(g.n, 4, dtype=torch.float64)
    pairs = g.edge_index.T.tolist()
    brute = 0.5 * sum(float(((x[i] - x[j]) ** 2).sum()) for i, j in pairs)
    assert dirichlet_energy(x, g.edge_index) == pytest.approx(brute)
    d = np.array([1 + sum(1 for i, _ in pairs if i == k) for k in range(g.n)], dtype=float)
    xs = x.numpy() / np.sqrt(d)[:, None]
    brute_n = 0.5 * sum(float(((xs[i] - xs[j]) ** 2).sum()) for i, j in pairs)
    assert dirichlet_energy(x, g.edge_index, normalized=True) == pytest.approx(brute_n)
    # vanishing sets: constant rows (combinatorial), rows ∝ √d (normalised)
    assert dirichlet_energy(torch.ones(g.n, 2, dtype=torch.float64), g.edge_index) == 0
    assert dirichlet_energy(torch.tensor(np.sqrt(d))[:, None], g.edge_index, normalized=True) < 1e-20


def test_effective_rank_and_clusters():
    rng = np.random.default_rng(0)
    assert effective_rank(torch.tensor(np.outer(rng.normal(size=9), rng.normal(size=4)))) == pytest.approx(1.0)
    assert effective_rank(torch.eye(5) * 3) == pytest.approx(5.0)
    s = np.array([3.0, 1.0])
    p = s / s.sum()
    assert effective_rank(torch.diag(torch.tensor(s))) == pytest.approx(np.exp(-(p * np.log(p)).sum()))
    pts = torch.tensor([[1.0, 0], [1.0, 1e-6], [0, 1.0], [0, 1.0 + 1e-7], [5.0, 5.0]])
    lab = consensus_clusters(pts, rtol=1e-3)
    assert len(set(lab)) == 3 and lab[0] == lab[1] and lab[2] == lab[3]


@pytest.mark.parametrize("kind", ["rw", "sym"])
def test_linear_diffusion_matches_expm(g, kind):
    A = normalized_adjacency(g.edge_index, g.n, kind=kind).numpy()
    t = time_grid(4.0, 0.02, 5)
    X = linear_diffusion(g.edge_index, g.x, t, kind, step=0.02)
    for k, tk in enumerate(t.tolist()):
        ref = expm(tk * (A - np.eye(g.n))) @ g.x.numpy()
        assert np.abs(X[k].numpy() - ref).max() < 1e-7
    Xd = linear_diffusion(g.edge_index, g.x, t, kind, method="dopri5", step=None)
    assert np.abs(Xd[-1].numpy() - ref).max() < 1e-5


def test_graph_odeint_tuple_state():
    f = lambda t, s: (-s[0], 2 * s[1])
    t = time_grid(1.0, 0.01)
    a, b = graph_odeint(f, (torch.ones(2, dtype=torch.float64), torch.ones(1, dtype=torch.float64)), t, step=0.01)
    assert torch.allclose(a[-1], torch.full((2,), np.exp(-1.0), dtype=torch.float64), atol=1e-9)
    assert torch.allclose(b[-1], torch.tensor([np.exp(2.0)], dtype=torch.float64), atol=1e-7)


def test_time_grid_on_steps():
    t = time_grid(1.03, 0.1, 4)
    assert t[0] == 0 and abs(t[-1] - 1.0) < 1e-12
    assert torch.allclose(t / 0.1, (t / 0.1).round())


def test_split_probe_chance(g):
    tr, te = split_nodes(g.y, 0.5, 0)
    assert len(np.intersect1d(tr, te)) == 0 and len(tr) + len(te) == g.n
    assert np.bincount(g.y.numpy()[tr]).tolist() == [10, 10, 10]
    y = torch.tensor([0, 0, 0, 1])
    assert chance_accuracy(y, np.arange(4)) == 0.75
    # separable features are read perfectly; constant features give the majority rate
    x = torch.nn.functional.one_hot(g.y).double() * 5
    assert linear_probe(x, g.y, tr, te) == 1.0
    assert linear_probe(torch.ones(g.n, 2), g.y, tr, te) <= chance_accuracy(g.y, te) + 1e-12
