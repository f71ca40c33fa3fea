"""Tests of paper_suite.interpretability.gem against references that share no code with it:
autograd, scipy's NNLS and SLSQP, explicit loops and sums, numpy's stationary distribution."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.optimize import minimize, nnls

from paper_suite.interpretability.gem import (
    MODES, anisotropy, distance_to_hull, ece, free_energy, gem_loss, gem_target, markov_corpus, project_simplex,
    regularised_loss, reliability, remove_direction, train_regularised)
from paper_suite.tinytf import GPT, GPTConfig, hidden_states


@pytest.fixture
def Eu():
    g = torch.Generator().manual_seed(0)
    return torch.randn(25, 7, generator=g, dtype=torch.float64), torch.randn(2, 3, 7, generator=g, dtype=torch.float64)


def test_gem_target_is_grad_logZ_and_in_hull(Eu):
    E, u = Eu
    u = u.clone().requires_grad_(True)
    g = torch.autograd.grad(torch.logsumexp(u @ E.T, -1).sum(), u)[0]
    mu = gem_target(u, E)
    assert mu.shape == u.shape
    torch.testing.assert_close(mu, g)
    # explicit sum over the vocabulary
    p = np.exp(u.detach().numpy() @ E.numpy().T)
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(mu.detach().numpy(), p @ E.numpy(), rtol=1e-12)
    assert float(distance_to_hull(mu.detach(), E).max()) < 1e-6


def test_free_energy_gradient_and_value(Eu):
    E, u = Eu
    u = u.clone().requires_grad_(True)
    phi = free_energy(u, E)
    assert phi.shape == (2, 3)
    ref = 0.5 * (u.detach().numpy() ** 2).sum(-1) - np.log(np.exp(u.detach().numpy() @ E.numpy().T).sum(-1))
    np.testing.assert_allclose(phi.detach().numpy(), ref, rtol=1e-12)
    torch.testing.assert_close(torch.autograd.grad(phi.sum(), u)[0], (u - gem_target(u, E)).detach())


def test_gem_loss_value_stopgrad_and_zero_at_fixed_point(Eu):
    E, u = Eu
    u = u.clone().requires_grad_(True)
    L = gem_loss(u, E)
    assert L.dim() == 0
    ref = np.mean([np.sum((x - gem_target(torch.tensor(x), E).numpy()) ** 2) for x in u.detach().reshape(-1, 7).numpy()])
    assert abs(L.item() - ref) < 1e-10
    g_sg = torch.autograd.grad(L, u)[0]
    torch.testing.assert_close(g_sg, 2 * (u - gem_target(u, E)).detach() / 6)      # 6 positions; mu detached
    g_full = torch.autograd.grad(gem_loss(u, E, stop_grad=False), u)[0]
    assert not torch.allclose(g_full, g_sg)
    v = u.detach()[0, 0] * 0.1
    for _ in range(300):
        v = gem_target(v, E * 0.3)
    assert float(gem_loss(v, E * 0.3)) < 1e-20


def test_project_simplex_matches_slsqp():
    rng = np.random.default_rng(1)
    for _ in range(5):
        x = rng.standard_normal(6) * 2
        res = minimize(lambda q: ((q - x) ** 2).sum(), np.full(6, 1 / 6), method="SLSQP", bounds=[(0, None)] * 6,
                       constraints=[{"type": "eq", "fun": lambda q: q.sum() - 1}], options={"ftol": 1e-14})
        np.testing.assert_allclose(project_simplex(torch.tensor(x)[None]).numpy()[0], res.x, atol=1e-6)


def test_distance_to_hull_matches_nnls():
    g = torch.Generator().manual_seed(3)
    E = torch.randn(30, 5, generator=g, dtype=torch.float64)
    h = torch.cat([torch.randn(8, 5, generator=g, dtype=torch.float64) * 4,
                   torch.softmax(torch.randn(4, 30, generator=g, dtype=torch.float64), -1) @ E])
    d = distance_to_hull(h, E)
    for hh, dd in zip(h.numpy(), d.numpy()):
        q, _ = nnls(np.vstack([E.numpy().T, 1e4 * np.ones((1, 30))]), np.concatenate([hh, [1e4]]))
        assert abs(dd - np.linalg.norm(hh - E.numpy().T @ q)) <= 1e-3 * max(1, np.linalg.norm(hh))
    assert distance_to_hull(h.reshape(3, 4, 5), E).shape == (3, 4)
    with pytest.raises(ValueError, match="iters"):
        distance_to_hull(h, E, iters=0)


def test_ece_and_reliability_match_loop():
    rng = np.random.default_rng(2)
    c = rng.random(1000)
    ok = rng.random(1000) < c
    ref, n = 0.0, 0
    for b in range(15):
        m = (c > b / 15) & (c <= (b + 1) / 15)
        n += m.sum()
        if m.any():
            ref += m.mean() * abs(ok[m].mean() - c[m].mean())
    assert n == 1000
    assert abs(ece(torch.tensor(c), torch.tensor(ok)) - ref) < 1e-12
    cnt, acc, cf = reliability(torch.tensor(c), torch.tensor(ok))
    assert int(cnt.sum()) == 1000 and cnt.shape == (15,)
    assert ece(torch.tensor([1.0, 1.0]), torch.tensor([True, True])) == 0.0


def test_anisotropy_matches_double_sum():
    H = torch.randn(15, 4, dtype=torch.float64) + 2
    C = F.cosine_similarity(H[:, None], H[None], dim=-1).numpy()
    assert abs(float(anisotropy(H)) - (C.sum() - np.trace(C)) / (15 * 14)) < 1e-12
    assert abs(float(anisotropy(torch.ones(5, 3))) - 1) < 1e-6


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=13, block_size=8, n_layer=3, d_model=16, n_head=2)).eval()
    return m, torch.randint(13, (4, 8))


def test_remove_direction_is_orthogonal():
    h, e = torch.randn(6, 5, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    r = remove_direction(h, e)
    assert torch.allclose((r * e).sum(-1), torch.zeros(6, dtype=torch.float64), atol=1e-12)
    torch.testing.assert_close(remove_direction(r, e), r)


def test_regularised_loss_modes_and_bad_mode(tiny):
    m, x = tiny
    tot, ce = regularised_loss(m, x, x, "ce")
    torch.testing.assert_close(tot, m(x, x)[1])
    tot, ce = regularised_loss(m, x, x, "gem", lam=0.5)
    u = m.ln_f(hidden_states(m, x)[-1])
    torch.testing.assert_close(tot, ce + 0.5 * gem_loss(u, m.tok.weight))
    tot, _ = regularised_loss(m, x, x, "ls")
    torch.testing.assert_close(tot, F.cross_entropy(m(x)[0].flatten(0, 1), x.flatten(), label_smoothing=0.1))
    for mode in MODES:
        assert torch.isfinite(regularised_loss(m, x, x, mode)[0])
    with pytest.raises(ValueError, match="allowed: ce, gem"):
        regularised_loss(m, x, x, "bogus")
    with pytest.raises(ValueError, match="unknown mode"):
        train_regularised(m, torch.arange(50) % 13, mode="bogus", lam=0.1, steps=1, batch=2)


def test_gem_training_lowers_the_gem_loss():
    ids = torch.arange(400) % 13
    out = {}
    for mode in ("ce", "gem"):
        torch.manual_seed(0)
        m = GPT(GPTConfig(vocab_size=13, block_size=8, n_layer=2, d_model=16, n_head=2))
        train_regularised(m, ids, mode=mode, lam=1.0, steps=60, batch=8)
        x = ids[:8][None]
        with torch.no_grad():
            out[mode] = float(gem_loss(m.ln_f(hidden_states(m, x)[-1]), m.tok.weight))
    assert out["gem"] < 0.5 * out["ce"]


def test_markov_corpus_entropy_rate():
    x, H = markov_corpus(200_000, vocab=8, branching=3, seed=1)
    xs = x.numpy()
    C = np.zeros((8, 8))
    np.add.at(C, (xs[:-1], xs[1:]), 1)
    P = C / C.sum(1, keepdims=True)
    w, v = np.linalg.eig(P.T)
    pi = np.real(v[:, np.argmin(abs(w - 1))])
    pi /= pi.sum()
    Hemp = -(pi[:, None] * np.where(P > 0, P * np.log(np.where(P > 0, P, 1)), 0)).sum()
    assert abs(H - Hemp) < 0.02
    assert set(np.unique(xs)) <= set(range(8)) and (C > 0).sum(1).max() <= 3
