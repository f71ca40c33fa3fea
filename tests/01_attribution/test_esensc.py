"""paper_suite.attribution.esensc against independent references: brute-force Shapley, closed forms, axioms."""
import itertools
import math

import numpy as np
import pytest

from paper_suite.attribution.esensc import (RESIDUALS, esensc, esensc_bias, esensc_from_values, extreme_coalitions,
                                            nmse, rank_agreement, residual_weights, shapley_exact,
                                            sparse_interaction_model)
from paper_suite.games import (CountingGame, InterventionalGame, TableGame, all_coalitions, random_game,
                               table_from_dividends)


def _brute_shapley(v, n):
    """Shapley values by averaging marginal contributions over all orders; v maps a frozenset to a float."""
    phi = np.zeros(n)
    for order in itertools.permutations(range(n)):
        S = set()
        for i in order:
            phi[i] += v(frozenset(S | {i})) - v(frozenset(S))
            S.add(i)
    return phi / math.factorial(n)


def _as_mask_fn(v, n):
    return lambda m: v(frozenset(np.flatnonzero(m).tolist()))


def _plain_by_hand(v, n):
    """Eq. (6) written from the definitions, coalition by coalition."""
    N = frozenset(range(n))
    a = np.array([v(frozenset({i})) - v(frozenset()) for i in range(n)])
    b = np.array([v(N) - v(N - {i}) for i in range(n)])
    T = v(N) - v(frozenset())
    es = a + (T - a.sum()) / n
    ensc = b + (T - b.sum()) / n
    return (es + ensc) / 2


def test_uses_exactly_2n_plus_2_evaluations():
    for n in (1, 4, 9):
        g = CountingGame(TableGame(random_game(n, seed=n)))
        esensc(g, n)
        assert g.calls == 2 * n + 2


def test_plain_rule_matches_definition_of_es_and_ensc():
    n = 5
    t = random_game(n, seed=11)
    v = lambda S: t[sum(1 << i for i in S)]
    assert np.allclose(esensc(_as_mask_fn(v, n), n, residual="equal"), _plain_by_hand(v, n))


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("k", range(10))
def test_exact_for_every_game_with_at_most_three_players(n, k):
    rng = np.random.default_rng(100 * n + k)
    vals = {frozenset(S): rng.standard_normal() for r in range(n + 1) for S in itertools.combinations(range(n), r)}
    v = vals.__getitem__
    assert np.allclose(esensc(_as_mask_fn(v, n), n), _brute_shapley(v, n), atol=1e-12)


@pytest.mark.parametrize("residual", RESIDUALS)
def test_exact_for_games_of_order_two(residual):
    n = 6
    t = random_game(n, order=2, seed=3)
    v = lambda S: t[sum(1 << i for i in S)]
    assert np.allclose(esensc(TableGame(t), n, residual), _brute_shapley(v, n), atol=1e-10)


def test_not_exact_with_three_way_interactions():
    n = 5
    d = np.zeros(2**n); d[0b00111] = 1.0
    t = table_from_dividends(d)
    assert np.abs(esensc(TableGame(t), n, "equal") - shapley_exact(TableGame(t), n)).max() > 0.05


def test_bias_formula_matches_brute_force():
    n = 6
    t = random_game(n, seed=21)
    v = lambda S: t[sum(1 << i for i in S)]
    assert np.allclose(esensc(TableGame(t), n, "equal") - _brute_shapley(v, n), esensc_bias(t), atol=1e-10)


@pytest.mark.parametrize("residual", RESIDUALS)
def test_efficiency_and_symmetry(residual):
    n = 6
    t = random_game(n, seed=5)
    phi = esensc(TableGame(t), n, residual)
    assert np.isclose(phi.sum(), t[-1] - t[0])
    sym = lambda S: float(len(S & {0, 1}) ** 2 + 0.5 * (2 in S) * (3 in S) + (4 in S))   # 0~1 symmetric
    phi = esensc(_as_mask_fn(sym, n), n, residual)
    assert np.isclose(phi[0], phi[1])


def test_null_player_on_a_model_that_ignores_features():
    rng = np.random.default_rng(0)
    W = rng.standard_normal((3, 8))
    f = lambda X: np.tanh(X[:, 2:5] @ W).sum(1) + X[:, 2] * X[:, 3] * X[:, 4]    # reads features 2, 3, 4 only
    g = InterventionalGame(f, rng.standard_normal(6), rng.standard_normal((15, 6)))
    for r in ("active", "proportional"):
        phi = esensc(g, 6, r)
        assert np.all(phi[[0, 1, 5]] == 0.0)
    assert np.abs(esensc(g, 6, "equal")[[0, 1, 5]]).max() > 1e-6   # the plain rule pays null players


def test_exact_on_additive_model_interventional():
    rng = np.random.default_rng(1)
    f = lambda X: np.sin(X[:, 0]) + X[:, 1] ** 2 - 0.3 * X[:, 2] + X[:, 1] * X[:, 3]   # order <= 2
    g = InterventionalGame(f, rng.standard_normal(5), rng.standard_normal((12, 5)))
    assert np.allclose(esensc(g, 5), shapley_exact(g, 5), atol=1e-12)


def test_residual_weights_and_extreme_coalitions():
    assert np.allclose(residual_weights(np.array([0.0, 1, 0]), np.array([0.0, 1, 2]), "active"), [0, 0.5, 0.5])
    assert np.allclose(residual_weights(np.array([0.0, 1, 0]), np.array([0.0, 3, 2]), "proportional"), [0, 0.5, 0.5])
    assert np.allclose(residual_weights(np.zeros(4), np.zeros(4)), 0.25)
    with pytest.raises(ValueError):
        residual_weights(np.zeros(2), np.zeros(2), "bogus")
    e = extreme_coalitions(4)
    assert e.shape == (10, 4) and sorted(e.sum(1).tolist()) == [0, 1, 1, 1, 1, 3, 3, 3, 3, 4]
    vals = np.arange(10.0)
    assert np.isclose(esensc_from_values(vals, 4).sum(), vals[1] - vals[0])


def test_metrics_and_synthetic_model():
    ref = np.array([[1.0, -2.0, 0.5], [0.1, 0.2, 0.3]])
    assert nmse(ref, ref) == 0.0 and np.isclose(nmse(2 * ref, ref), 1.0)
    assert np.isclose(rank_agreement(-ref, ref), 1.0)
    f = sparse_interaction_model(20, seed=0)
    assert f(np.zeros((3, 20))).tolist() == [0.0, 0.0, 0.0] and f(np.ones((2, 20))).shape == (2,)
