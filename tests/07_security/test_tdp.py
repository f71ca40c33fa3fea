"""paper_suite.security.tdp against references that share no code with it: networkx's local edge connectivity and
all_simple_paths, networkx's iterative personalised PageRank, scikit-learn's logistic regression for the
Bradley–Terry ranker, a brute-force minimum cut on tiny graphs (Menger's dual), and properties (renaming invariance,
antisymmetry, the Menger bound, the reader under the attacks)."""
import itertools

import networkx as nx
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from paper_suite.security.tdp import (FEATURES, VOCAB_A, Index, PairwiseRanker, Passage, WorldSpec, attack,
                                      candidate_subgraph, clean_passages, make_kg_world, read, robustrag_answer,
                                      short_paths, support_paths, tdp_answer, topology_features)


@pytest.mark.parametrize("i", range(25))
def test_support_paths_matches_networkx(i):
    rng = np.random.default_rng(i)
    G = nx.gnp_random_graph(int(rng.integers(5, 16)), float(rng.uniform(0.1, 0.7)), seed=i)
    u, v = (int(x) for x in rng.choice(G.number_of_nodes(), 2, replace=False))
    assert support_paths(G, u, v) == nx.connectivity.local_edge_connectivity(G, u, v)


def brute_min_cut(G, q, a):
    """min |delta(S)| over all vertex sets S with q in S and a not in S, by enumeration (Menger's dual of Eq. 3)."""
    others = [v for v in G if v not in (q, a)]
    best = G.number_of_edges()
    for bits in range(2 ** len(others)):
        S = {q} | {v for j, v in enumerate(others) if bits >> j & 1}
        best = min(best, sum(1 for u, v in G.edges() if (u in S) != (v in S)))
    return best


@pytest.mark.parametrize("i", range(8))
def test_support_paths_matches_brute_force_min_cut(i):
    G = nx.gnp_random_graph(9, 0.45, seed=50 + i)
    assert support_paths(G, 0, 8) == brute_min_cut(G, 0, 8)


def test_support_paths_edge_cases():
    G = nx.Graph([(0, 1), (2, 3)])
    assert support_paths(G, 0, 3) == 0            # unreachable
    assert support_paths(G, 0, 99) == 0           # absent
    assert support_paths(nx.complete_graph(7), 1, 4) == 6
    assert isinstance(support_paths(nx.cycle_graph(5), 0, 2), int) and support_paths(nx.cycle_graph(5), 0, 2) == 2


@pytest.mark.parametrize("i", range(10))
def test_short_paths_match_networkx(i):
    G = nx.gnp_random_graph(11, 0.35, seed=200 + i)
    assert sorted(short_paths(G, 0, 10)) == sorted(tuple(p) for p in nx.all_simple_paths(G, 0, 10, cutoff=3))


def test_topology_features_shape_first_entry_finite_and_unreachable():
    G = nx.gnp_random_graph(14, 0.3, seed=1)
    f = topology_features(G, 0, 9)
    assert f.dtype == np.float64 and f.shape == (len(FEATURES),)
    assert f[0] == support_paths(G, 0, 9)
    g = topology_features(nx.Graph([(0, 1), (1, 2), (5, 6)]), 0, 6)
    assert np.isfinite(g).all() and g.shape == f.shape and g[0] == 0
    h = topology_features(nx.Graph([(0, 1)]), 0, "absent")
    assert np.isfinite(h).all() and h[0] == 0


def test_topology_features_invariant_under_renaming():
    G = nx.gnp_random_graph(15, 0.3, seed=4)
    perm = np.random.default_rng(0).permutation(15)
    H = nx.relabel_nodes(G, {u: f"x{int(perm[u])}" for u in G})
    assert np.allclose(topology_features(G, 2, 11), topology_features(H, f"x{perm[2]}", f"x{perm[11]}"), atol=1e-12)


def test_ppr_feature_matches_networkx_pagerank():
    G = nx.gnp_random_graph(12, 0.35, seed=7)
    ref = nx.pagerank(G, alpha=0.85, personalization={0: 1.0}, tol=1e-13, max_iter=10_000)[5]
    assert abs(topology_features(G, 0, 5)[FEATURES.index("PPR(q->a)")] - ref) < 1e-9


def test_ranker_matches_sklearn_and_is_antisymmetric():
    rng = np.random.default_rng(3)
    X1, X2 = rng.normal(size=(400, 5)), rng.normal(size=(400, 5))
    y = (X1 - X2) @ np.array([1.0, -2.0, 0.5, 0.0, 0.3]) + rng.logistic(size=400) > 0
    r = PairwiseRanker(l2=0.5).fit(X1, X2, y)
    sk = LogisticRegression(C=2.0, fit_intercept=False, tol=1e-12, max_iter=10_000).fit((X1 - X2) / r.scale, y)
    assert np.allclose(r.w, sk.coef_[0], atol=1e-6)
    p = r.prob(X1, X2)
    assert p.shape == (400,) and np.allclose(p + r.prob(X2, X1), 1.0)
    assert np.allclose(r.prob(X1, X1), 0.5)


def test_ranker_errors():
    with pytest.raises(RuntimeError):
        PairwiseRanker().prob(np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError):
        PairwiseRanker().fit(np.zeros((3, 2)), np.zeros((3, 2)), [True, False])
    with pytest.raises(ValueError):
        PairwiseRanker(l2=0).fit(np.zeros((2, 2)), np.ones((2, 2)), [True, False])


@pytest.fixture(scope="module")
def world():
    spec = WorldSpec(persons=160, cities=20, companies=20, schools=10, friends=2, visited=1, rho=0.75, stale=0.2,
                     vocab=VOCAB_A)
    w = make_kg_world(spec, 0)
    return w, Index(clean_passages(w, 0))


def test_attack_kinds_and_bad_kind(world):
    w, _ = world
    q = w.entities["person"][0]
    tgt = next(c for c in w.entities["city"] if c != w.home[q])
    nb = sorted({t for h, _, t in w.triples if h == q} | {h for h, _, t in w.triples if t == q})
    a1 = attack(w, q, tgt, "A1", copies=5)
    assert len(a1) == 5 and all(p.injected and (p.h, p.role, p.t) == (q, "home", tgt) for p in a1)
    a3 = attack(w, q, tgt, "A3", background=2, neighbours=nb)
    assert all(tgt in (p.h, p.t) for p in a3) and len(a3) <= 5
    with pytest.raises(ValueError, match="A1, A2, A3"):
        attack(w, q, tgt, "A4")


def test_reader_is_fooled_tdp_is_not_and_menger_bound_holds(world):
    w, idx = world
    rng = np.random.default_rng(0)
    phis, labels = [], []
    for q in w.entities["person"][:60]:                       # a ranker fitted on a few attacked queries
        tgt = next(c for c in rng.permutation(w.entities["city"]) if c != w.home[q])
        ret = idx.retrieve(q, attack(w, q, tgt, "A1"))
        phis.append((topology_features(candidate_subgraph(ret, q, w.home[q]), q, w.home[q]),
                     topology_features(candidate_subgraph(ret, q, tgt), q, tgt)))
    f = rng.random(len(phis)) < 0.5
    g, p = np.stack([x[0] for x in phis]), np.stack([x[1] for x in phis])
    ranker = PairwiseRanker().fit(np.where(f[:, None], p, g), np.where(f[:, None], g, p), ~f)
    hits_read, hits_tdp = 0, 0
    for q in w.entities["person"][60:120]:
        tgt = next(c for c in rng.permutation(w.entities["city"]) if c != w.home[q])
        inj = attack(w, q, tgt, "A1")
        ret = idx.retrieve(q, inj)
        hits_read += read(ret, q) == tgt
        hits_tdp += tdp_answer(ret, q, ranker) == tgt
        ga = candidate_subgraph(ret, q, tgt)
        clean = nx.Graph(ga)
        clean.remove_edge(q, tgt) if not any((p.h, p.t) == (q, tgt) and not p.injected for p in ret) else None
        assert support_paths(ga, q, tgt) <= support_paths(clean, q, tgt) + 1     # Eq. (4), one injected pair
    assert hits_read >= 55 and hits_tdp <= 10


def test_robustrag_abstains_without_strict_majority():
    ps = [Passage("q", "home", "a", ""), Passage("q", "home", "b", "")]
    assert robustrag_answer(ps, "q") is None
    assert robustrag_answer(ps + [Passage("q", "home", "a", "x")], "q") == "a"
