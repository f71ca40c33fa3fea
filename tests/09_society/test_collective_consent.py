"""Tests of paper_suite.society.collective_consent against references that share no code with it:
exhaustive enumeration of voter coalitions T and option sets B (tiny profiles), networkx max-flow,
Moulin's integer veto function, closed-form special cases and the axioms themselves."""
from fractions import Fraction
from itertools import chain, combinations

import networkx as nx
import numpy as np
import pytest

from paper_suite.society.collective_consent import (
    approval_counts, approval_weighted_veto_core, check_profile, consent_veto_core, decisive_dominance,
    DATASETS, latin_square_profile, majority_consent, moulin_veto_function, objections, positions,
    proportional_veto_core, top_k_consent, undominated, veto_core, veto_core_enumeration, veto_network)


def subsets(xs):
    xs = list(xs)
    return chain.from_iterable(combinations(xs, r) for r in range(len(xs) + 1))


def core_by_coalitions(R, A, w):
    """Definition (4'), (6): enumerate every voter coalition T and option set B, exact fractions."""
    n, m = R.shape
    w = [Fraction(int(x), int(sum(w))) for x in w]
    rank = [{c: p for p, c in enumerate(row)} for row in R.tolist()]
    core = []
    for c in range(m):
        blocked = False
        for T in subsets(i for i in range(n) if not A[i, c]):
            if not T:
                continue
            for B in subsets(d for d in range(m) if d != c):
                if all(rank[i][b] < rank[i][c] for i in T for b in B) and \
                        Fraction(len(T), n) + sum((w[b] for b in B), Fraction(0)) > 1:
                    blocked = True
                    break
            if blocked:
                break
        if not blocked:
            core.append(c)
    return core


def tiny(seed):
    r = np.random.default_rng(seed)
    n, m = int(r.integers(1, 7)), int(r.integers(2, 5))
    R = np.array([r.permutation(m) for _ in range(n)])
    return R, top_k_consent(R, r.integers(0, m + 1, size=n))


@pytest.mark.parametrize("seed", range(120))
def test_cores_match_coalition_enumeration(seed):
    R, A = tiny(seed)
    m = R.shape[1]
    ones = np.ones(m, dtype=np.int64)
    none = np.zeros_like(A)
    assert proportional_veto_core(R) == core_by_coalitions(R, none, ones)
    assert consent_veto_core(R, A) == core_by_coalitions(R, A, ones)
    a = approval_counts(A)
    w = a if a.sum() else ones
    assert approval_weighted_veto_core(R, A) == core_by_coalitions(R, A, w)
    assert veto_core_enumeration(R, A, w) == core_by_coalitions(R, A, w)


def test_moulin_veto_function_matches_fractional_rule():
    for n in range(1, 15):
        for m in range(1, 9):
            for t in range(n + 1):
                v = moulin_veto_function(t, n, m)
                assert v == -(-m * t // n) - 1
                assert all((Fraction(t, n) + Fraction(b, m) > 1) == (b >= m - v) for b in range(m))


def test_pvc_of_unanimous_profile_is_the_top():
    R = np.array([[2, 0, 1, 3]] * 5)
    assert proportional_veto_core(R) == [2]


def test_pvc_known_example():
    # three voters 0>1>2, two voters 2>1>0: Moulin's core is {1}
    R = np.array([[0, 1, 2]] * 3 + [[2, 1, 0]] * 2)
    assert proportional_veto_core(R) == [1]


@pytest.mark.parametrize("seed", range(30))
def test_flow_value_matches_networkx(seed):
    R, A = DATASETS["Urn"](25, 5, seed)
    pos = positions(R)
    for w in (np.ones(5, dtype=np.int64), approval_counts(A) + (approval_counts(A).sum() == 0)):
        for c in range(5):
            g, s, t, d = veto_network(pos, A, w, c)
            if not d:
                continue
            G = nx.DiGraph()
            coo = g.tocoo()
            for u, v, cap in zip(coo.row.tolist(), coo.col.tolist(), coo.data.tolist()):
                G.add_edge(u, v, capacity=cap)
            from scipy.sparse.csgraph import maximum_flow
            assert nx.maximum_flow_value(G, s, t) == maximum_flow(g, s, t).flow_value


@pytest.mark.parametrize("name", list(DATASETS))
def test_properties_on_generated_profiles(name):
    for seed in range(15):
        R, A = DATASETS[name](40, 6, seed)
        check_profile(R, A)
        pvc, cpvc, aw = proportional_veto_core(R), consent_veto_core(R, A), approval_weighted_veto_core(R, A)
        assert pvc and cpvc and aw                       # non-empty (veto by consumption)
        assert set(pvc) <= set(cpvc)                     # consent only removes blocking coalitions
        unanimous = set(np.flatnonzero(A.all(axis=0)).tolist())
        assert unanimous <= set(cpvc) and unanimous <= set(aw)
        ob = objections(R, A)
        assert not set(cpvc) & ob["protection"] and not set(pvc) & ob["protection"]
        assert not set(majority_consent(A)) & ob["support"]
        assert not set(undominated(R, A)) & ob["dominance"]


def test_equal_approvals_give_the_consent_veto_core():
    for seed in range(40):
        R, A = latin_square_profile(4, 5, seed)
        assert len(set(approval_counts(A).tolist())) == 1
        assert approval_weighted_veto_core(R, A) == consent_veto_core(R, A)


def test_common_consent_set_gives_majority():
    r = np.random.default_rng(0)
    for _ in range(30):
        m = 5
        S = r.choice(m, size=int(r.integers(1, m)), replace=False)
        R = np.array([np.concatenate([r.permutation(S), r.permutation(np.setdiff1d(np.arange(m), S))])
                      for _ in range(11)])
        A = np.zeros((11, m), bool); A[:, S] = True
        assert approval_weighted_veto_core(R, A) == majority_consent(A) == sorted(S.tolist())


def test_dominance_brute_force():
    for seed in range(60):
        R, A = tiny(seed)
        n, m = R.shape
        D = decisive_dominance(R, A)
        rank = positions(R)
        for d in range(m):
            for c in range(m):
                want = d != c and all(rank[i, d] < rank[i, c] for i in range(n) if A[i, c]) and \
                    3 * sum(rank[i, d] < rank[i, c] for i in range(n)) >= 2 * n
                assert D[d, c] == want


def test_majority_consent_strict():
    A = np.array([[1, 1], [1, 0], [0, 1], [0, 0]], bool)   # a = (2, 2), n = 4: neither is a strict majority
    assert majority_consent(A) == []


def test_input_validation():
    with pytest.raises(ValueError):
        proportional_veto_core(np.array([[0, 0, 1]]))
    with pytest.raises(ValueError):
        approval_weighted_veto_core(np.array([[0, 1, 2]]), np.array([[False, True, False]]))
    with pytest.raises(ValueError):
        veto_core(np.array([[0, 1]]), None, np.array([0, 0]))
