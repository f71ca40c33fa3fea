"""paper_suite.dictionary against hand-written references: brute-force TopK, scikit-learn's R², planted
dictionaries, and what splicing must leave unchanged."""
import numpy as np
import pytest
import torch
import torch.nn as nn
from sklearn.metrics import r2_score

from paper_suite.dictionary import (SparseDictionary, dead_fraction, dictionary_loss, l0, normalized_mse, splice,
                                    train_dictionary)


def _planted(n_rows, d=12, m=16, active=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    D = torch.randn(m, d, generator=g)
    D /= D.norm(dim=1, keepdim=True)
    idx = torch.rand(n_rows, m, generator=g).argsort(1)[:, :active]
    Z = torch.zeros(n_rows, m).scatter(1, idx, 0.5 + torch.rand(n_rows, active, generator=g))
    return Z @ D, D


def test_topk_code_matches_brute_force():
    torch.manual_seed(0)
    sae = SparseDictionary(8, 20, kind="topk", k=5, seed=3)
    with torch.no_grad():
        sae.b_enc.normal_()
    x = torch.randn(30, 8)
    z = sae.encode(x).detach().numpy()
    u = ((x - sae.b_dec) @ sae.W_enc + sae.b_enc).detach().numpy()
    for r in range(30):
        ref = np.zeros(20)
        top = np.argsort(-u[r], kind="stable")[:5]
        ref[top] = np.maximum(u[r, top], 0)
        assert np.allclose(z[r], ref, atol=1e-6)


def test_relu_penalty_is_the_decoder_weighted_l1_and_rescaling_invariant():
    torch.manual_seed(1)
    d = SparseDictionary(6, 9, kind="relu")
    with torch.no_grad():
        d.W_dec.mul_(torch.rand(9, 1) + 0.5)       # decoder rows of different norms
    x = torch.randn(40, 6)
    loss, y_hat, z = dictionary_loss(d, x, x, scale=1.7, l1_coef=0.25)
    ref = ((x - y_hat) ** 2).sum(1).mean() / 1.7**2 + 0.25 * (z * d.W_dec.norm(dim=1)).sum(1).mean() / 1.7
    assert torch.isclose(loss, ref)
    with torch.no_grad():                            # latent 4: encoder x 3, decoder / 3
        d.W_enc[:, 4] *= 3; d.b_enc[4] *= 3; d.W_dec[4] /= 3
    assert torch.isclose(dictionary_loss(d, x, x, scale=1.7, l1_coef=0.25)[0], loss, atol=1e-5)


def test_auxk_term_by_hand():
    torch.manual_seed(2)
    d = SparseDictionary(5, 8, kind="topk", k=2)
    x = torch.randn(10, 5)
    dead = torch.tensor([False, True, False, True, True, False, False, False])
    loss, y_hat, _ = dictionary_loss(d, x, x, scale=1.0, dead=dead, aux_k=2, aux_coef=0.5)
    u = d.pre_acts(x).detach()
    z_aux = torch.zeros_like(u)
    for r in range(10):
        cand = [(u[r, j].item(), j) for j in range(8) if dead[j]]
        for v, j in sorted(cand, reverse=True)[:2]:
            z_aux[r, j] = max(v, 0.0)
    e = (x - y_hat).detach()
    ref = ((x - y_hat) ** 2).sum(1).mean() + 0.5 * ((e - z_aux @ d.W_dec) ** 2).sum(1).mean()
    assert torch.isclose(loss, ref, atol=1e-6)


def test_metrics_against_references():
    rng = np.random.default_rng(0)
    y, p = rng.normal(size=(50, 4)) * [1, 2, 3, 4], rng.normal(size=(50, 4))
    assert normalized_mse(torch.tensor(p), torch.tensor(y)) == pytest.approx(
        1 - r2_score(y, p, multioutput="variance_weighted"), rel=1e-12)
    codes = torch.tensor(rng.normal(size=(3, 7, 11)) * (rng.random((3, 7, 11)) < 0.2))
    flat = codes.reshape(-1, 11).numpy()
    assert l0(codes) == pytest.approx(np.count_nonzero(flat, axis=1).mean())
    assert dead_fraction(codes) == pytest.approx(np.mean(~flat.any(0)))


def test_topk_sae_recovers_a_planted_dictionary_and_keeps_unit_decoder_rows():
    X, D = _planted(1500)
    sae = SparseDictionary(12, 32, kind="topk", k=3, seed=0)
    hist = train_dictionary(sae, X, steps=300, batch=128, lr=5e-3, seed=0)
    with torch.no_grad():
        y_hat, z = sae(X)
    assert normalized_mse(y_hat, X) < 0.15 and l0(z) <= 3
    assert (D @ sae.decoder_directions.T).max(1).values.gt(0.9).float().mean() >= 0.9
    assert torch.allclose(sae.W_dec.norm(dim=1), torch.ones(32), atol=1e-5)
    assert len(hist["loss"]) == 300 and hist["nmse"][-1] < hist["nmse"][0]


def test_relu_l1_coefficient_trades_sparsity_for_reconstruction():
    X, _ = _planted(1500)
    out = []
    for lam in (0.05, 0.5):
        d = SparseDictionary(12, 32, kind="relu", seed=0)
        train_dictionary(d, X, steps=200, batch=128, lr=5e-3, l1_coef=lam, seed=0)
        with torch.no_grad():
            y_hat, z = d(X)
        out.append((l0(z), normalized_mse(y_hat, X)))
    assert out[1][0] < out[0][0] and out[1][1] > out[0][1]


def test_transcoder_learns_a_map_and_needs_targets():
    X, _ = _planted(1500)
    A = torch.randn(12, 6, generator=torch.Generator().manual_seed(5)) / 4
    tc = SparseDictionary(12, 32, kind="topk", k=3, d_out=6, transcoder=True, seed=0)
    train_dictionary(tc, X, X @ A, steps=300, batch=128, lr=5e-3, seed=0)
    with torch.no_grad():
        assert normalized_mse(tc(X)[0], X @ A) < 0.25
    with pytest.raises(ValueError, match="needs targets"):
        train_dictionary(tc, X, steps=1)


def test_same_seed_same_dictionary():
    X, _ = _planted(500)
    a, b = (SparseDictionary(12, 32, kind="topk", k=3, seed=1) for _ in range(2))
    for d in (a, b):
        train_dictionary(d, X, steps=30, batch=64, seed=7)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_bad_arguments():
    with pytest.raises(ValueError, match="allowed: relu, topk"):
        SparseDictionary(4, 8, kind="jumprelu")
    with pytest.raises(ValueError, match="needs 0 < k"):
        SparseDictionary(4, 8, kind="topk", k=9)
    with pytest.raises(ValueError, match="transcoder=True"):
        SparseDictionary(4, 8, kind="topk", k=2, d_out=3)
    with pytest.raises(ValueError, match="expected x"):
        train_dictionary(SparseDictionary(4, 8, kind="topk", k=2), torch.randn(10, 5), steps=1)


def test_splice_error_term_edits_and_transcoders():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3))
    sae = SparseDictionary(6, 12, kind="topk", k=4, seed=2)
    with torch.no_grad():
        sae.b_dec.normal_()
    x = torch.randn(9, 5)
    with torch.no_grad():
        h = net[0](x)
        ref = net(x)
        with splice(net, "0", sae, error=True) as codes:           # error term kept, no edit: nothing changes
            assert torch.allclose(net(x), ref, atol=1e-6)
        assert len(codes) == 1 and torch.equal(codes[0], sae.encode(h))
        with splice(net, "0", sae):                                  # the model runs on the reconstruction
            assert torch.allclose(net(x), net[2](net[1](sae(h)[0])), atol=1e-6)
        z = sae.encode(h)
        j = int(z.abs().sum(0).argmax())
        zero_j = lambda c: c.index_fill(-1, torch.tensor([j]), 0.0)
        with splice(net, "0", sae, error=True, edit=zero_j):         # ablation moves h by exactly -z_j d_j
            assert torch.allclose(net(x), net[2](net[1](h - z[:, j:j + 1] * sae.W_dec[j])), atol=1e-5)
        assert torch.allclose(net(x), ref)                           # the hook is gone afterwards
        tc = SparseDictionary(6, 12, kind="topk", k=4, d_out=3, transcoder=True)
        with splice(net, "2", tc, read="input"):                     # reads the layer's input
            assert torch.allclose(net(x), tc(torch.tanh(h))[0], atol=1e-6)
    with pytest.raises(ValueError, match="allowed: output, input"):
        with splice(net, "0", sae, read="both"):
            pass
    with pytest.raises(KeyError, match="no submodule"):
        with splice(net, "7", sae):
            pass
