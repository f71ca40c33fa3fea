"""paper_suite.applications.runes against references that share no code with it: brute-force enumeration of
position tuples (itertools), a direct per-sequence simulation of the generator's rule, set arithmetic by hand."""
import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paper_suite.applications.runes import (RULES, ngram_predict, planted_rule_data, refine_window, rule_fires,
                                            rule_recovery, soft_rule_activation)


def brute_fires(ev, ants, w):
    B, L = ev.shape
    return np.array([[any(all(ev[b, p] == a for p, a in zip(c, ants))
                          for c in itertools.combinations(range(max(0, t - w + 1), t + 1), len(ants)))
                      for t in range(L)] for b in range(B)])


def brute_soft(x, pi, w):
    B, L, _ = x.shape
    R, S, _ = pi.shape
    out = torch.zeros(B, L, R, dtype=x.dtype)
    for b in range(B):
        for t in range(L):
            for r in range(R):
                best = 0.0
                for c in itertools.combinations(range(max(0, t - w + 1), t + 1), S):
                    best = max(best, float(np.prod([float(pi[r, s] @ x[b, c[s]]) for s in range(S)])))
                out[b, t, r] = best
    return out


@pytest.mark.parametrize("ants,w", [((1, 2), 3), ((0, 0), 4), ((3,), 1), ((2,), 3), ((1, 2, 3), 5), ((2, 1), 6)])
def test_rule_fires_matches_brute_force(ants, w):
    ev = np.random.default_rng(len(ants) * 10 + w).integers(0, 4, (25, 18))
    assert (rule_fires(ev, ants, w) == brute_fires(ev, ants, w)).all()


@pytest.mark.parametrize("w", [2, 3, 5])
def test_soft_activation_matches_brute_max_product(w):
    g = torch.Generator().manual_seed(w)
    x = torch.softmax(torch.randn(2, 9, 5, generator=g, dtype=torch.float64), -1)
    pi = torch.softmax(3 * torch.randn(3, 2, 5, generator=g, dtype=torch.float64), -1)
    np.testing.assert_allclose(soft_rule_activation(x, pi, w).numpy(), brute_soft(x, pi, w).numpy(), atol=1e-12)


def test_one_hot_corner_identity():
    ev = np.random.default_rng(3).integers(0, 5, (30, 20))
    x = F.one_hot(torch.tensor(ev), 5).double()
    for ants, w in [((1, 2), 3), ((4, 4), 5), ((0, 3, 1), 6)]:
        pi = F.one_hot(torch.tensor([ants]), 5).double()
        assert (soft_rule_activation(x, pi, w)[..., 0].numpy() == rule_fires(ev, ants, w)).all()


def test_bad_windows_and_shapes_are_refused():
    with pytest.raises(ValueError, match="window"):
        rule_fires(np.zeros((2, 5), int), (1, 2), 1)
    with pytest.raises(ValueError, match="window"):
        soft_rule_activation(torch.zeros(1, 4, 3), torch.zeros(1, 2, 3), 0)
    with pytest.raises(ValueError, match=r"\(B, L, V\)"):
        soft_rule_activation(torch.zeros(4, 3), torch.zeros(1, 2, 3), 2)


def test_planted_data_deterministic_and_rule_acts():
    rules = [((0, 1), 3, 2), ((3, 4), 4, 5)]
    a = planted_rule_data(300, 40, 8, rules, p_fire=1.0, seed=5)
    assert a.dtype == np.int64 and a.shape == (300, 40) and a.min() >= 0 and a.max() < 8
    assert (a == planted_rule_data(300, 40, 8, rules, p_fire=1.0, seed=5)).all()
    assert not (a == planted_rule_data(300, 40, 8, rules, p_fire=1.0, seed=6)).all()
    # at p_fire = 1 the first firing rule decides e_{t+1}; checked by a direct loop over each sequence
    for b in range(300):
        for t in range(39):
            for ants, w, c in rules:
                if brute_fires(a[b:b + 1, : t + 1], ants, w)[0, t]:
                    assert a[b, t + 1] == c
                    break
    # at p_fire = 0 the rules never force anything: e_{t+1} = c after a firing only at the chain's rate
    z = planted_rule_data(2000, 40, 8, rules, p_fire=0.0, seed=5)
    f = rule_fires(z, (0, 1), 3)[:, :-1]
    assert (z[:, 1:][f] == 2).mean() < 0.9
    with pytest.raises(ValueError, match="outside"):
        planted_rule_data(3, 5, 4, [((0, 9), 2, 1)])


def test_rule_recovery_by_hand():
    planted = [((0, 1), 3, 2), ((3, 4), 4, 5)]
    assert rule_recovery([], planted) == (0.0, 0.0)
    assert rule_recovery([((0, 1), 3, 2)], planted) == (1.0, 0.5)
    assert rule_recovery([((0, 1), 3, 2), ((0, 1), 4, 2), ((1, 0), 3, 2)], planted) == (1 / 3, 0.5)
    assert rule_recovery([[[3, 4], 4, 5], ((0, 1), 3, 2), ((0, 1), 3, 2)], planted) == (1.0, 1.0)


def test_refine_window_finds_planted_window():
    rules = [((0, 1), 3, 2), ((3, 4), 5, 5)]
    ev = planted_rule_data(1500, 40, 10, rules, seed=1)
    for r in rules:
        assert refine_window(ev, (r[0], 2, 0), range(2, 7)) == r


def test_rules_discretised_model_is_the_exact_rule():
    m = RULES(6, [3], seed=0)
    m.hard = torch.tensor([[1, 2]])
    with torch.no_grad():
        m.cons[0, 4] = 2.0
    ev = torch.tensor(np.random.default_rng(0).integers(0, 6, (10, 15)))
    assert m.rules(1.0) == [((1, 2), 3, 4)]
    a = m.activations(ev)[..., 0].numpy()
    assert (a == rule_fires(ev.numpy(), (1, 2), 3)).all()


def test_ngram_backoff_on_deterministic_cycle():
    cyc = np.tile(np.arange(5), 8)[None].repeat(4, 0)
    pred = ngram_predict(cyc, cyc, k=3)
    assert (pred == cyc[:, 1:]).all()
