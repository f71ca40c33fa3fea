"""paper_suite.security.watermark_governance against references that share no code with it: scipy's binomial and
normal distributions, direct enumeration of the watermarked softmax, Monte Carlo with freshly drawn random green
lists, brute force over the provider's utility, and properties (exact list size, determinism, independence)."""
import math
from itertools import product

import numpy as np
import pytest
import torch
from scipy import stats

from paper_suite.security.watermark_governance import (Z_1PCT, detect_z, edited_green_rate, expected_z, green_hits,
                                                       green_mask, green_prob, heldout_nll, provider_choice,
                                                       random_edits, switch_point, watermark_logits)


@pytest.mark.parametrize("vocab,gamma", [(103, 0.25), (103, 0.5), (50, 0.1), (7, 0.6)])
def test_green_mask_size_and_determinism(vocab, gamma):
    m = green_mask(4, vocab, gamma, 9)
    assert m.dtype == torch.bool and m.shape == (vocab,) and int(m.sum()) == int(gamma * vocab)
    assert torch.equal(m, green_mask(4, vocab, gamma, 9))


def test_green_lists_behave_like_independent_draws():
    # overlap of two lists of size n out of V is hypergeometric: mean n²/V, variance known in closed form
    V, n = 100, 50
    ov = np.array([(green_mask(p, V, 0.5, 1) & green_mask(p, V, 0.5, 2)).sum().item() for p in range(400)])
    hyp = stats.hypergeom(V, n, n)
    assert abs(ov.mean() - hyp.mean()) < 4 * hyp.std() / math.sqrt(len(ov))
    assert 0.6 < ov.var() / hyp.var() < 1.5
    # a context window hashes differently from its last token
    assert not torch.equal(green_mask((3, 4), V, 0.5, 1), green_mask(4, V, 0.5, 1))


def test_nested_lists_for_one_key():
    # both lists are prefixes of one permutation: the γ = 0.25 list lies inside the γ = 0.5 list
    small, big = green_mask(11, 100, 0.25, 5), green_mask(11, 100, 0.5, 5)
    assert bool((small & ~big).sum() == 0)


def test_watermark_logits_adds_delta_on_green_only():
    l = torch.randn(3, 40)
    prev = torch.tensor([1, 2, 3])
    out = watermark_logits(l, prev, 0.25, 1.7, 8)
    for i, p in enumerate(prev.tolist()):
        g = green_mask(p, 40, 0.25, 8)
        assert torch.allclose(out[i][g], l[i][g] + 1.7) and torch.equal(out[i][~g], l[i][~g])
    assert torch.equal(watermark_logits(l[0], 1, 0.25, 1.7, 8), out[0])


def test_detect_z_matches_direct_count():
    rng = np.random.default_rng(3)
    toks = rng.integers(0, 60, 81).tolist()
    k = sum(bool(green_mask(toks[t - 1], 60, 0.25, 2)[toks[t]]) for t in range(1, 81))
    T = 80
    assert abs(detect_z(toks, 60, 0.25, 2) - (k - 0.25 * T) / math.sqrt(T * 0.25 * 0.75)) < 1e-12
    assert detect_z(torch.tensor(toks), 60, 0.25, 2) == detect_z(toks, 60, 0.25, 2)


def test_detect_z_null_fpr_matches_binomial():
    # random text: z > 2.326 has the exact binomial tail probability (γ·V integer so the null is exact)
    V, g, T = 100, 0.25, 100
    rng = np.random.default_rng(0)
    z = np.array([detect_z(rng.integers(0, V, T + 1), V, g, 3) for _ in range(1500)])
    kmin = math.floor(g * T + Z_1PCT * math.sqrt(T * g * (1 - g))) + 1
    p = stats.binom(T, g).sf(kmin - 1)
    se = math.sqrt(p * (1 - p) / len(z))
    assert abs((z > Z_1PCT).mean() - p) < 4 * se
    assert abs(Z_1PCT - stats.norm.ppf(0.99)) < 1e-12


def test_unique_pairs_and_bad_input():
    assert len(green_hits([1, 2] * 20, 10, 0.5, 1, unique=True)) == 2
    assert len(green_hits([1, 2, 3, 4], 10, 0.5, 1, context=2)) == 2
    with pytest.raises(ValueError, match="at least"):
        detect_z([1], 10, 0.5, 1)
    with pytest.raises(ValueError, match="gamma"):
        green_mask(0, 10, 1.5, 1)


def test_green_prob_against_enumeration_and_flat_closed_form():
    torch.manual_seed(0)
    l = torch.randn(50) * 1.5
    g = green_mask(0, 50, 0.3, 4)
    q = torch.softmax(l.double() + 2.2 * g.double(), -1)      # the watermarked softmax, written out
    assert abs(green_prob(l, g, 2.2).item() - q[g].sum().item()) < 1e-12
    gam, d = int(0.3 * 50) / 50, 2.2
    assert abs(green_prob(torch.zeros(50), g, d).item() - gam * math.exp(d) / (gam * math.exp(d) + 1 - gam)) < 1e-12


def test_expected_z_and_edit_formula_by_monte_carlo():
    # Eq. (6) with fresh random lists: mark tokens green with prob p, edit at rate ε, recount
    rng = np.random.default_rng(1)
    V, gam, p, eps, T, n = 40, 0.25, 0.8, 0.2, 60, 3000
    lists = {}
    def green(prev, tok):
        if prev not in lists:
            lists[prev] = set(rng.permutation(V)[: int(gam * V)].tolist())
        return tok in lists[prev]
    rates = []
    for _ in range(n // 10):
        lists.clear()
        seq = [int(rng.integers(V))]
        for _ in range(T):
            G = sorted(lists.setdefault(seq[-1], set(rng.permutation(V)[: int(gam * V)].tolist())))
            R = [v for v in range(V) if v not in G]
            seq.append(int(rng.choice(G)) if rng.random() < p else int(rng.choice(R)))
        ed = [s if (i == 0 or rng.random() >= eps) else int((s + rng.integers(1, V)) % V) for i, s in enumerate(seq)]
        rates.append(np.mean([green(ed[t - 1], ed[t]) for t in range(1, len(ed))]))
    pred = edited_green_rate(p, gam, eps)
    assert abs(np.mean(rates) - pred) < 0.02
    assert abs(expected_z(pred, gam, T) - (pred - gam) * math.sqrt(T) / math.sqrt(gam * (1 - gam))) < 1e-12
    assert abs(edited_green_rate(p, gam, eps, context=2) - ((1 - eps) ** 3 * p + (1 - (1 - eps) ** 3) * gam)) < 1e-12


def test_random_edits_rate_and_always_change():
    x = torch.randint(0, 30, (2000, 50), generator=torch.Generator().manual_seed(0))
    e = random_edits(x, 0.3, 30, torch.Generator().manual_seed(1))
    assert abs((e != x).float().mean().item() - 0.3) < 0.01 and e.max() < 30 and e.min() >= 0
    assert torch.equal(random_edits(x, 0.0, 30, torch.Generator()), x)


def test_heldout_nll_against_manual_cross_entropy():
    l = torch.randn(6, 20)
    prev, tgt = torch.arange(6), torch.randint(0, 20, (6,))
    want = np.mean([-(torch.log_softmax(l[i].double() + 0.9 * green_mask(i, 20, 0.5, 3).double(), -1)[tgt[i]]).item()
                    for i in range(6)])
    assert abs(heldout_nll(l, prev, tgt, 0.5, 0.9, 3) - want) < 1e-6   # logits biased in float32
    assert heldout_nll(l, prev, tgt, 0.5, 0.9, 3) >= 0


def brute_choice(c, tau, req, q, F):
    best, arg = -np.inf, None
    for i in range(len(c)):           # weakest first; strict > keeps the weaker one on ties
        u = -c[i] - q * F * (tau[i] < req)
        if u > best + 1e-12:
            best, arg = u, i
    return arg


def test_provider_choice_against_brute_force_and_properties():
    rng = np.random.default_rng(0)
    for _ in range(300):
        c = np.sort(rng.uniform(0, 1, 3))
        tau = np.sort(rng.uniform(0, 1, 3))
        q, F = rng.uniform(0, 1), rng.uniform(0, 3)
        assert provider_choice(c, tau, 0.5, q, F) == brute_choice(c, tau, 0.5, q, F)
        assert provider_choice(c, tau, 0.5, 0.0, F) == 0                       # self-reporting: weakest
        picks = [provider_choice(c, tau, 0.5, 1.0, f) for f in np.linspace(0, 3, 61)]
        assert all(a <= b for a, b in zip(picks, picks[1:]))                    # non-decreasing in q·F
        s = switch_point(c, tau, 0.5)
        if np.isfinite(s):
            comp = int(np.flatnonzero(tau >= 0.5)[0])
            assert provider_choice(c, tau, 0.5, 1.0, s + 1e-6) == comp
    assert switch_point([0, 1], [0.1, 0.2], 0.9) == math.inf


def test_provider_choice_bad_input():
    with pytest.raises(ValueError, match="equal"):
        provider_choice([0, 1], [0.5], 0.9, 1.0, 1.0)
    with pytest.raises(ValueError, match="non-negative"):
        provider_choice([0, 1], [0.5, 0.9], 0.9, -1.0, 1.0)
