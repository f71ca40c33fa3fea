"""paper_suite.security.arao against references that share no code with it: brute force over the whole strategy
grid, Shapley values by enumerating all orders of the axes (itertools.permutations), the toolkit's exact Shapley
(paper_suite.games), and properties (budget, feasibility, axioms, identity of the rewriter at v = 0)."""
from itertools import permutations, product
from math import factorial

import numpy as np
import pytest

from paper_suite.games import shapley_exact
from paper_suite.security.arao import (AXES, LEVELS, axis_shapley, cma_attack_batch, constraints, coordinate_attack,
                                       coordinate_attack_batch, detector, feasible, free_rewrite, make_claims,
                                       rewrite, sample_styles, snap, token_attack_batch)

K = len(AXES)
GRID = np.array(list(product(LEVELS, repeat=K)))


def table_score(seed):
    T = np.random.default_rng(seed).normal(size=(5,) * K)
    return lambda v: float(T[tuple((np.asarray(v) * 2 + 2).astype(int))])


class Counter:
    def __init__(self, f):
        self.f, self.calls = f, 0

    def __call__(self, v):
        self.calls += 1
        return self.f(v)


def test_rewrite_identity_at_zero_and_claim_verbatim():
    claim = "Zorvex cures gout"
    assert rewrite(claim, np.zeros(K)) == claim
    assert rewrite(claim, [0.0] * K) == claim
    outs = {rewrite(claim, v) for v in GRID[::37]}
    assert all(claim in o for o in outs)
    assert len(outs) == len(GRID[::37])                 # different strategies, different texts
    v = np.zeros(K); v[AXES.index("certainty")] = -1.0
    assert rewrite(claim, v) != claim and "certain" in rewrite(claim, v)


@pytest.mark.parametrize("bad", [[0.0] * (K - 1), [0.3] + [0.0] * (K - 1)])
def test_rewrite_rejects_malformed_strategy(bad):
    with pytest.raises(ValueError, match="strategy"):
        rewrite("x", bad)


def test_constraints_forbid_only_the_contradictory_pairs():
    A, b = constraints()
    ok = np.array([feasible(v, A, b) for v in GRID])
    e, r = AXES.index("emotion"), AXES.index("register")
    a, n = AXES.index("authority"), AXES.index("narrative")
    ref = (GRID[:, e] - GRID[:, r] <= 1) & (GRID[:, a] + GRID[:, n] <= 1)
    assert np.array_equal(ok, ref)
    assert feasible(np.zeros(K), A, b)
    # every coalition of a feasible strategy is feasible (what the axis game relies on)
    for v in GRID[ok][::211]:
        for m in product((0, 1), repeat=K):
            assert feasible(np.where(np.array(m, bool), v, 0.0), A, b)
    assert feasible(np.full(K, 5.0))                    # no constraint without A


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_sweep_is_exact_for_separable_scores(seed):
    G = np.random.default_rng(seed).normal(size=(K, 5))
    f = Counter(lambda v: float(sum(G[k, LEVELS.index(float(x))] for k, x in enumerate(v))))
    v, s, calls = coordinate_attack(f, K, budget=10_000)
    brute = min(float(sum(G[k, LEVELS.index(float(x))] for k, x in enumerate(w))) for w in GRID)
    assert np.isclose(s, brute) and np.isclose(f.f(v), s)
    assert calls == f.calls == 1 + 2 * 4 * K            # one improving sweep, one confirming sweep


@pytest.mark.parametrize("budget", [1, 2, 5, 24, 25, 64, 500])
def test_budget_is_never_exceeded_and_result_is_a_coordinatewise_minimum(budget):
    A, b = constraints()
    f = Counter(table_score(3))
    v, s, calls = coordinate_attack(f, K, A, b, budget=budget)
    assert calls == f.calls <= budget and feasible(v, A, b) and np.isclose(f.f(v), s)
    assert s <= f.f(np.zeros(K))
    if calls < budget:                                  # converged: no feasible single-axis move improves
        for k in range(K):
            for a in LEVELS:
                w = v.copy(); w[k] = a
                assert not feasible(w, A, b) or f.f(w) >= s


def test_coordinate_attack_start_and_errors():
    A, b = constraints()
    f = table_score(4)
    start = np.zeros(K); start[0] = 1.0
    v, s, c = coordinate_attack(f, K, A, b, budget=1, start=start)
    assert np.array_equal(v, start) and c == 1
    bad = np.zeros(K); bad[AXES.index("emotion")], bad[AXES.index("register")] = 1.0, -1.0
    with pytest.raises(ValueError, match="start"):
        coordinate_attack(f, K, A, b, start=bad)
    with pytest.raises(ValueError, match="budget"):
        coordinate_attack(f, K, A, b, budget=0)


def test_lock_step_attack_equals_per_item_attack():
    A, b = constraints()
    fs = [table_score(10 + i) for i in range(5)]
    V, best, calls, trace = coordinate_attack_batch(lambda req: np.array([fs[i](w) for i, w in req]), 5, K, A, b,
                                                    budget=50)
    for i, f in enumerate(fs):
        v, s, c = coordinate_attack(f, K, A, b, budget=50)
        assert np.array_equal(v, V[i]) and np.isclose(s, best[i]) and c == calls[i]
        assert np.all(np.diff(trace[i]) <= 0)
        for t in (1, 3, 26, 50):
            assert np.isclose(coordinate_attack(f, K, A, b, budget=t)[1], trace[i, t - 1])
    # restricted to two axes: the others stay neutral
    V2, *_ = coordinate_attack_batch(lambda req: np.array([fs[i](w) for i, w in req]), 5, K, A, b, budget=50,
                                     axes=[0, 3])
    assert np.all(V2[:, [1, 2, 4, 5]] == 0)


def shapley_by_orders(u, n):
    """Shapley values as the average marginal contribution over all n! orders."""
    phi = np.zeros(n)
    for order in permutations(range(n)):
        S = np.zeros(n, bool)
        for k in order:
            before = u(S.copy()); S[k] = True
            phi[k] += u(S.copy()) - before
    return phi / factorial(n)


@pytest.mark.parametrize("seed", [0, 1])
def test_axis_shapley_against_orders_and_toolkit(seed):
    f = table_score(20 + seed)
    v_adv = np.array([1.0, -0.5, 0.0, -1.0, 1.0, 0.5])
    cnt = Counter(f)
    phi = axis_shapley(cnt, v_adv)
    assert cnt.calls <= 2 ** K
    u = lambda m: f(np.where(m, v_adv, 0.0)) - f(np.zeros(K))
    np.testing.assert_allclose(phi, shapley_by_orders(u, K), atol=1e-12)
    np.testing.assert_allclose(phi, shapley_exact(u, K), atol=1e-12)
    assert np.isclose(phi.sum(), f(v_adv) - f(np.zeros(K)))           # efficiency
    assert abs(phi[2]) < 1e-12                                        # dummy: axis left at 0


def test_axis_shapley_symmetry_additive_game_and_size_limit():
    w = np.array([0.3, -0.2, 0.0, 0.5])
    lin = lambda v: float(w @ v)                                      # additive game: phi_k = w_k v_k
    v_adv = np.array([1.0, -1.0, 0.5, 0.5])
    np.testing.assert_allclose(axis_shapley(lin, v_adv), w * v_adv, atol=1e-12)
    sym = lambda v: float(np.prod(np.abs(v[:2])) + v[2])              # axes 0 and 1 interchangeable
    p = axis_shapley(sym, np.array([1.0, 1.0, 0.5]))
    assert np.isclose(p[0], p[1]) and np.isclose(p.sum(), 1.5)
    with pytest.raises(ValueError, match="K <= 10"):
        axis_shapley(lin, np.ones(11))


def test_data_and_styles():
    X, y = make_claims("extremist", 40, seed=0)
    assert len(X) == 40 and y.sum() == 20
    with pytest.raises(ValueError, match="misinfo"):
        make_claims("news", 10)
    with pytest.raises(ValueError, match="held_out"):
        make_claims("misinfo", 10, templates="test")
    A, b = constraints()
    yy = np.arange(2000) % 2
    V = sample_styles(yy, 0.9, seed=1, A=A, b=b)
    c = AXES.index("certainty")
    assert all(feasible(v, A, b) for v in V)
    assert np.mean(V[yy == 1, c] > 0) > 0.85 and abs(np.mean(V[yy == 0, c] > 0) - 0.4) < 0.06


def test_snap_cma_token_and_free_rewrite():
    A, b = constraints()
    r = np.random.default_rng(0)
    for z in r.uniform(-2, 2, size=(300, K)):
        v = snap(z, A, b)
        assert feasible(v, A, b) and set(v) <= set(LEVELS)
    fs = [table_score(30 + i) for i in range(3)]
    best, trace = cma_attack_batch(lambda req: np.array([fs[i](w) for i, w in req]), 3, K, A, b, budget=20)
    assert trace.shape == (3, 20) and np.all(np.diff(trace, axis=1) <= 0)
    assert np.all(best <= np.array([f(np.zeros(K)) for f in fs]))
    texts, s, tr = token_attack_batch(lambda xs: np.array([len(x) % 7 for x in xs], float), ["Zorvex cures gout"] * 2,
                                      budget=10, max_edits=2)
    assert tr.shape == (2, 10) and np.all(np.diff(tr, axis=1) <= 0)
    assert "Zorvex cures gout" in free_rewrite("Zorvex cures gout", r)


def test_detector_learns_the_planted_cue():
    A, b = constraints()
    X, y = make_claims("misinfo", 300, seed=1, templates="train")
    V = sample_styles(y, 0.9, seed=2, A=A, b=b)
    m = detector().fit([rewrite(x, v) for x, v in zip(X, V)], y)
    Xt, yt = make_claims("misinfo", 100, seed=3, templates="train")
    h = [x for x, t in zip(Xt, yt) if t == 1]
    c = AXES.index("certainty")
    hedged, assertive = np.zeros(K), np.zeros(K)
    hedged[c], assertive[c] = -1.0, 1.0
    p_h = m.predict_proba([rewrite(x, hedged) for x in h])[:, 1]
    p_a = m.predict_proba([rewrite(x, assertive) for x in h])[:, 1]
    assert np.mean(p_h) < np.mean(p_a)
