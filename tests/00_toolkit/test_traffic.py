"""Unit tests for paper_suite.traffic against references that share none of its code: networkx shortest
paths and path enumeration, closed forms, finite differences, and the raw files of the aequilibrae wheel."""
import itertools

import networkx as nx
import numpy as np
import pytest

from paper_suite.traffic import (Network, all_or_nothing, enumerate_paths, grid_network, link_time,
                                 link_time_derivative, link_time_integral, load_sioux_falls, shortest_path_tree)


def small_net(seed=0, n=9, m=30):
    rng = np.random.default_rng(seed)
    G = nx.gnm_random_graph(n, m, seed=seed, directed=True)
    G.add_edges_from([(i, (i + 1) % n) for i in range(n)])
    tail, head = map(np.array, zip(*sorted(G.edges())))
    dem = rng.integers(0, 4, size=(n, n)).astype(float)
    np.fill_diagonal(dem, 0)
    net = Network(n, tail, head, t0=rng.uniform(1, 3, len(tail)), cap=rng.uniform(1, 2, len(tail)),
                  alpha=0.15, beta=4, demand=dem)
    return net, G


def test_bpr_closed_form_and_derivatives():
    net, _ = small_net()
    x = np.linspace(0, 3, net.n_links)
    want = net.t0 * (1 + 0.15 * (x / net.cap) ** 4)
    assert np.allclose(link_time(net, x), want)
    assert np.allclose(link_time(net, x, tolls=np.ones(net.n_links)), want + 1)
    h = 1e-6
    assert np.allclose(link_time_derivative(net, x), (link_time(net, x + h) - link_time(net, x - h)) / (2 * h), rtol=1e-5, atol=1e-8)
    # integral by the trapezoid rule
    u = np.linspace(0, 1, 20001)[:, None] * x[None, :]
    assert np.allclose(np.trapezoid(link_time(net, u), u, axis=0), link_time_integral(net, x), rtol=1e-7)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_all_or_nothing_matches_networkx(seed):
    net, G = small_net(seed)
    c = np.random.default_rng(seed + 10).uniform(0.5, 4, net.n_links)
    for e, (a, b) in enumerate(zip(net.tail, net.head)):
        G[a][b]["w"] = c[e]
    ref = np.zeros(net.n_links)
    dist, _ = shortest_path_tree(net, c, np.arange(net.n_nodes))
    for o, d in itertools.product(range(net.n_nodes), repeat=2):
        if o != d:
            assert dist[o, d] == pytest.approx(nx.dijkstra_path_length(G, o, d, weight="w"))
        if net.demand[o, d] > 0:
            p = nx.dijkstra_path(G, o, d, weight="w")
            for a, b in zip(p[:-1], p[1:]):
                ref[net.link_index(a, b)] += net.demand[o, d]
    assert np.allclose(all_or_nothing(net, c), ref)


def test_enumerate_paths_against_networkx_and_brute_force():
    g = grid_network(3, 3, [(0, 8), (2, 6)], demand=[1.0, 2.0], seed=0)
    ps = enumerate_paths(g)
    G = nx.grid_2d_graph(3, 3).to_directed()
    assert ps.n_paths == 2 * len(list(nx.all_simple_paths(G, (0, 0), (2, 2))))
    assert np.all(np.asarray(ps.incidence.sum(1)).ravel() == ps.hops)
    assert list(ps.demand) == [1.0, 2.0] and ps.hops.min() == 4
    # each row is a connected o -> d walk: in-degree - out-degree pattern of a path
    A = ps.incidence.toarray()
    for k in range(ps.n_paths):
        o, d = ps.od_pairs[ps.od[k]]
        div = np.bincount(g.tail, A[k], g.n_nodes) - np.bincount(g.head, A[k], g.n_nodes)
        want = np.zeros(g.n_nodes); want[o] += 1; want[d] -= 1
        assert np.allclose(div, want)
    cut = enumerate_paths(g, cutoff=4)
    assert np.all(cut.hops <= 4) and cut.n_paths == 2 * 6


def test_network_validation():
    with pytest.raises(ValueError):
        Network(2, [0, 0], [1, 1], t0=1.0, cap=1.0, alpha=0.15, beta=4, demand=np.zeros((2, 2)))   # parallel
    with pytest.raises(ValueError):
        Network(2, [0], [1], t0=0.0, cap=1.0, alpha=0.15, beta=4, demand=np.zeros((2, 2)))
    with pytest.raises(ValueError):
        Network(2, [0], [1], t0=1.0, cap=1.0, alpha=0.15, beta=4, demand=np.zeros((3, 3)))


def test_grid_shape():
    g = grid_network(4, 5, [(0, 19)], demand=3.0, seed=1)
    assert g.n_nodes == 20 and g.n_links == 2 * (4 * 4 + 3 * 5) and g.demand.sum() == 3.0
    assert np.all((g.t0 >= 1) & (g.t0 <= 2)) and np.all((g.cap >= 0.5) & (g.cap <= 1.5))


def test_sioux_falls_matches_tntp():
    sf = load_sioux_falls()
    assert (sf.n_nodes, sf.n_links) == (24, 76) and sf.demand.sum() == 360600
    assert sf.demand[0, 1] == 100 and sf.demand[0, 3] == 500   # TNTP trips: 1 -> 2: 100, 1 -> 4: 500
    assert np.allclose(sf.alpha, 0.15) and np.allclose(sf.beta, 4)
    # rows of TNTP SiouxFalls_flow.tntp (best-known UE): our link parameters give the published cost at the
    # published volume
    for a, b, vol, cost in [(1, 2, 4494.6576464564205, 6.00081623735432), (6, 8, 12492.925360562731, 14.690955002063726),
                            (10, 16, 11047.093881273468, 20.084809978398383), (24, 23, 7861.833243795729, 3.722946742102766)]:
        e = sf.link_index(a - 1, b - 1)
        x = np.zeros(sf.n_links); x[e] = vol
        assert link_time(sf, x)[e] == pytest.approx(cost, rel=1e-12)
