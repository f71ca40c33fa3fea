"""paper_suite.security.flowleak against references that share no code with it: path enumeration with scipy's
softmax, hand-computed routing, Monte Carlo with an independent Gumbel-max sampler, the classical coupon collector,
the Poissonisation integral (scipy quad), and brute-force enumeration of query multisets."""
from itertools import combinations_with_replacement

import networkx as nx
import numpy as np
import pytest
from scipy import integrate
from scipy.special import softmax

from paper_suite.security.flowleak import (STRATEGIES, Knowledge, estimated_reach, expected_coverage,
                                           expected_queries_to_cover, greedy_queries, guided_task, payload_effect,
                                           random_workflow, run_strategy, static_workflow, task_pool,
                                           visit_probabilities, walk)


def edge_score(G, u, v, phi):
    return float(np.dot(G.edges[u, v]["w"], phi) + G.edges[u, v]["b"])


def path_probabilities(G, phi, tau=1.0):
    """Every root-to-sink path with its probability: product of softmax choices along it (a tree or a DAG)."""
    out = []

    def go(path, p):
        succ = list(G.successors(path[-1]))
        if not succ:
            out.append((path, p))
            return
        q = softmax(np.array([edge_score(G, path[-1], v, phi) for v in succ]) / tau)
        for v, qv in zip(succ, q):
            go(path + [v], p * qv)

    go([0], 1.0)
    return out


def diamond():
    """0 routes to 1 or 2, both hand over to 3 (a DAG with a merge), then 3 -> 4."""
    G = nx.DiGraph()
    G.add_edge(0, 1, w=np.array([2.0, 0.0]), b=0.5)
    G.add_edge(0, 2, w=np.array([0.0, 2.0]), b=0.0)
    G.add_edge(1, 3, w=np.zeros(2), b=0.0)
    G.add_edge(2, 3, w=np.zeros(2), b=0.0)
    G.add_edge(3, 4, w=np.zeros(2), b=0.0)
    G.add_edge(1, 4, w=np.zeros(2), b=0.0)   # 1 is a router too: to 3 or straight to 4
    return G


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("tau", [0.5, 1.0, 3.0])
def test_visit_probabilities_match_path_enumeration(seed, tau):
    G = random_workflow(seed)
    for phi in task_pool(6)[::4]:
        ref = np.zeros(G.number_of_nodes())
        for path, p in path_probabilities(G, phi, tau):
            ref[path] += p
        np.testing.assert_allclose(visit_probabilities(G, phi, tau), ref, atol=1e-12)


def test_visit_probabilities_on_a_dag_with_merges():
    G = diamond()
    phi = np.array([0.3, 0.1])
    ref = np.zeros(5)
    for path, p in path_probabilities(G, phi):
        ref[path] += p
    got = visit_probabilities(G, phi)
    np.testing.assert_allclose(got, ref, atol=1e-12)
    assert got[0] == 1.0 and np.isclose(got[4], 1.0)    # every path ends at 4


def test_visit_probabilities_batch_and_monte_carlo():
    G = random_workflow(11)
    Phi = task_pool(6)[[0, 7, 12]]
    B = visit_probabilities(G, Phi)
    assert B.shape == (3, G.number_of_nodes())
    for k in range(3):
        np.testing.assert_allclose(B[k], visit_probabilities(G, Phi[k]))
    # an independent Gumbel-max sampler
    rng = np.random.default_rng(0)
    freq = np.zeros(G.number_of_nodes())
    R = 20_000
    for _ in range(R):
        v = 0
        freq[v] += 1
        while list(G.successors(v)):
            succ = list(G.successors(v))
            s = np.array([edge_score(G, v, u, Phi[1]) for u in succ]) + rng.gumbel(size=len(succ))
            v = succ[int(np.argmax(s))]
            freq[v] += 1
    assert np.abs(freq / R - B[1]).max() < 0.015


def test_walk_follows_edges_from_the_entry():
    G = random_workflow(4)
    rng = np.random.default_rng(1)
    for _ in range(50):
        p = walk(G, task_pool(6)[rng.integers(21)], rng)
        assert p[0] == 0 and G.out_degree(p[-1]) == 0
        assert all(G.has_edge(a, b) for a, b in zip(p, p[1:]))


def test_invalid_workflows_and_tau_are_rejected():
    C = nx.DiGraph([(0, 1), (1, 0)])
    with pytest.raises(ValueError, match="acyclic"):
        visit_probabilities(C, np.zeros(2))
    U = nx.DiGraph()
    U.add_edge(0, 1, w=np.zeros(2), b=0.0)
    U.add_node(2)
    with pytest.raises(ValueError, match="reachable"):
        visit_probabilities(U, np.zeros(2))
    with pytest.raises(ValueError, match="tau"):
        visit_probabilities(diamond(), np.zeros(2), tau=0.0)
    N = nx.DiGraph()
    N.add_edge(0, 5, w=np.zeros(2), b=0.0)
    with pytest.raises(ValueError, match="0..n-1"):
        visit_probabilities(N, np.zeros(2))


def test_expected_coverage_monte_carlo_and_edges():
    rng = np.random.default_rng(2)
    P = rng.uniform(0, 0.5, size=(4, 7))
    hits = rng.random((40_000, 4, 7)) < P
    assert abs(hits.any(axis=1).mean() - expected_coverage(P)) < 0.004
    assert expected_coverage(P[0]) == pytest.approx(P[0].mean())         # one query: the mean probability
    with pytest.raises(ValueError):
        expected_coverage(np.array([[0.2, 1.2]]))


@pytest.mark.parametrize("m", [1, 2, 5, 9])
def test_coupon_collector_equal_probabilities(m):
    assert expected_queries_to_cover(np.full(m, 1 / m)) == pytest.approx(m * sum(1 / k for k in range(1, m + 1)))


def test_coupon_collector_single_outcome_is_geometric():
    assert expected_queries_to_cover([0.25]) == pytest.approx(4.0)


@pytest.mark.parametrize("seed", range(4))
def test_coupon_collector_matches_poissonisation_integral(seed):
    pi = np.random.default_rng(seed).dirichlet(np.ones(6)) * 0.9       # sum < 1: some queries hit no outcome
    ref = integrate.quad(lambda t: 1 - np.prod(1 - np.exp(-pi * t)), 0, np.inf, limit=500)[0]
    assert expected_queries_to_cover(pi) == pytest.approx(ref, rel=1e-6)


def test_coupon_collector_monte_carlo():
    pi = np.array([0.5, 0.3, 0.15])
    rng = np.random.default_rng(3)
    T = []
    for _ in range(20_000):
        seen, t = set(), 0
        while len(seen) < 3:
            t += 1
            u = rng.random()
            b = int(np.searchsorted(np.cumsum(pi), u, side="right"))
            if b < 3:
                seen.add(b)
        T.append(t)
    assert np.mean(T) == pytest.approx(expected_queries_to_cover(pi), rel=0.02)


def test_coupon_collector_rejects_bad_input():
    for bad in ([], [0.5, 0.0], [0.7, 0.6], np.full(21, 0.01)):
        with pytest.raises(ValueError):
            expected_queries_to_cover(bad)


@pytest.mark.parametrize("seed", range(25))
def test_greedy_within_one_minus_one_over_e_of_brute_force(seed):
    P = np.random.default_rng(seed).uniform(0, 0.9, size=(5, 4))
    budget = 3
    best = max(expected_coverage(P[list(S)]) for S in combinations_with_replacement(range(5), budget))
    got = expected_coverage(P[greedy_queries(P, budget)])
    assert got >= (1 - (1 - 1 / budget) ** budget) * best - 1e-12
    assert got <= best + 1e-12


def test_greedy_first_pick_is_the_best_single_query_and_repeats_are_allowed():
    P = np.array([[0.9, 0.0, 0.0], [0.2, 0.2, 0.2], [0.0, 0.0, 0.1]])
    assert greedy_queries(P, 1) == [int(np.argmax(P.sum(1)))]
    Q = np.array([[0.5, 0.5], [0.0, 0.0]])
    assert greedy_queries(Q, 3) == [0, 0, 0]
    assert greedy_queries(P, 0) == []
    with pytest.raises(ValueError):
        greedy_queries(P, -1)


def test_estimated_reach_with_everything_known_equals_eq3():
    G = random_workflow(5)
    kn = Knowledge(G.number_of_nodes())
    for a in G:
        kn.learn(G, a, np.random.default_rng(0), frag_noise=0.0)
    Phi = task_pool(6)
    reach = estimated_reach(kn, Phi)
    V = visit_probabilities(G, Phi)
    for v in G:
        np.testing.assert_allclose(reach[v], V[:, v], atol=1e-12)
    assert kn.edges() == set(G.edges)


def test_guided_task_targets_the_unextracted_branch():
    G = random_workflow(8)
    router = next(u for u in G if G.out_degree(u) > 1)
    target = next(v for v in G.successors(router) if G.edges[router, v]["b"] == 0)   # a non-default branch
    hidden = {target} | nx.descendants(G, target)
    kn = Knowledge(G.number_of_nodes())
    for a in G:
        if a not in hidden:
            kn.learn(G, a, np.random.default_rng(0), frag_noise=0.0)
    assert target in kn.known and not kn.extracted[target]
    pool = task_pool(6)
    k = guided_task(kn, pool, np.random.default_rng(0))
    dom = int(np.argmax(G.edges[router, target]["w"]))
    assert pool[k][dom] == 1.0                      # the chosen task is about the missing branch's domain


def test_payload_effect_values_and_errors():
    c, p, i = payload_effect("naive", 1.0)
    assert (c, i) == (0.0, 1.0) and p == pytest.approx(0.9)
    assert payload_effect("naive", 0.0)[1] == 0.0
    c, p, i = payload_effect("tppt", 1.0)
    assert c == 1.0 and p == pytest.approx(0.63) and i == pytest.approx(0.4)
    with pytest.raises(ValueError, match="allowed"):
        payload_effect("polite", 0.5)
    with pytest.raises(ValueError):
        payload_effect("naive", 1.5)


def test_random_workflow_shape():
    for s in range(30):
        G = random_workflow(s)
        assert 4 <= G.number_of_nodes() <= 12
        assert nx.is_arborescence(G)
        routers = [u for u in G if G.out_degree(u) > 1]
        assert 1 <= len(routers) <= 3
    A, B = random_workflow(3), random_workflow(3)                      # seeded: the same workflow twice
    assert list(A.edges) == list(B.edges)
    assert all(np.array_equal(A.edges[e]["w"], B.edges[e]["w"]) and A.edges[e]["b"] == B.edges[e]["b"] for e in A.edges)


def test_run_strategy_static_and_errors():
    S = static_workflow(5)
    o = run_strategy(S, **STRATEGIES["FlowLeak"], budget=3, rng=np.random.default_rng(0))
    assert o["executed"] == [1.0, 1.0, 1.0] and len(o["coverage"]) == 3
    assert all(a <= b for a, b in zip(o["coverage"], o["coverage"][1:]))
    with pytest.raises(ValueError, match="allowed"):
        run_strategy(S, "clever", "tppt", 1.0, 3, np.random.default_rng(0))


def test_run_strategy_until_full_on_a_dynamic_workflow():
    G = random_workflow(2)
    o = run_strategy(G, **STRATEGIES["FlowLeak"], budget=1, rng=np.random.default_rng(0), until_full=True, cap=500)
    assert o["queries_to_full"] == len(o["coverage"]) and o["coverage"][-1] == 1.0
    assert o["knowledge"].extracted.all()
