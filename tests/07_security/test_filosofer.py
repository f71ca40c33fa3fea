"""paper_suite.security.filosofer against references that share no code with it: per-sample autograd loops for the
diagonal Fisher, torch.kron with an explicit column-major vec for the K-FAC quadratic, numpy's SVD (Eckart-Young)
for the LoRA restoration, brute-force maximisation over random directions, and the toolkit's LoRALinear."""
import numpy as np
import pytest
import torch
import torch.nn as nn

from paper_suite.lora import LoRALinear
from paper_suite.security.filosofer import (fisher_diagonal, fisher_obfuscation, kfac_factors, kfac_quadratic,
                                            lora_restore, tee_flops)


def spd(n, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    M = torch.randn(n, n, generator=g, dtype=dtype)
    return M @ M.T + 0.1 * torch.eye(n, dtype=dtype)


def small_model(dtype=torch.float64):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3)).to(dtype)


def loop_fisher(model, X, y=None):
    out = {k: torch.zeros_like(v) for k, v in model.named_parameters()}
    for i in range(len(X)):
        lp = torch.log_softmax(model(X[i:i + 1]), -1)[0]
        classes = range(lp.numel()) if y is None else [int(y[i])]
        for c in classes:
            gs = torch.autograd.grad(lp[c], list(model.parameters()), retain_graph=True)
            w = lp[c].exp().detach() if y is None else 1.0
            for (k, _), g in zip(model.named_parameters(), gs):
                out[k] += w * g ** 2 / len(X)
    return out


@pytest.mark.parametrize("labels", [True, False])
def test_fisher_diagonal_matches_per_sample_loop(labels):
    m = small_model()
    X = torch.randn(9, 4, dtype=torch.float64)
    y = torch.randint(0, 3, (9,)) if labels else None
    got, ref = fisher_diagonal(m, X, y, batch=4), loop_fisher(m, X, y)
    assert set(got) == {k for k, _ in m.named_parameters()}
    for k in ref:
        assert got[k].shape == ref[k].shape and got[k].dtype == torch.float64
        assert torch.allclose(got[k], ref[k], atol=1e-12)


def test_fisher_diagonal_skips_frozen_and_keeps_float32():
    m = small_model(torch.float32)
    m[0].weight.requires_grad_(False)
    got = fisher_diagonal(m, torch.randn(5, 4))
    assert "0.weight" not in got and got["2.weight"].dtype == torch.float32
    assert all((v >= 0).all() for v in got.values())


def test_true_fisher_of_last_layer_closed_form():
    # logits = W h + b: d log p_c / dW_kj = (1[c=k] - p_k) h_j, and E_{c~p}[(1[c=k] - p_k)^2] = p_k (1 - p_k)
    m = small_model()
    X = torch.randn(7, 4, dtype=torch.float64)
    with torch.no_grad():
        h = torch.relu(m[0](X))
        p = torch.softmax(m(X), -1)
    ref = ((p * (1 - p)).T @ (h ** 2)) / len(X)
    assert torch.allclose(fisher_diagonal(m, X)["2.weight"], ref, atol=1e-12)


def test_kfac_quadratic_against_kron():
    A, G = spd(5, 1), spd(3, 2)
    D = torch.randn(3, 5, dtype=torch.float64)
    v = D.T.reshape(-1)                           # column-major vec
    assert torch.isclose(kfac_quadratic(D, A, G), v @ torch.kron(A, G) @ v)
    with pytest.raises(ValueError, match="shapes"):
        kfac_quadratic(D, G, A)


def test_kfac_factors_exact_on_one_sample():
    m = small_model()
    x = torch.randn(1, 4, dtype=torch.float64)
    A, G = kfac_factors(m, m[2], x)
    diag = torch.kron(A, G).diagonal().reshape(6, 3).T
    assert torch.allclose(diag, fisher_diagonal(m, x)["2.weight"], atol=1e-12)


@pytest.mark.parametrize("k", [1, 3, 7])
def test_fisher_obfuscation_norm_closed_form_rank(k):
    A, G = spd(5, 3), spd(4, 4)
    D = fisher_obfuscation(A, G, 2.5, k=k)
    assert D.shape == (4, 5) and torch.isclose(D.norm(), torch.tensor(2.5, dtype=torch.float64))
    prods = np.sort(np.outer(np.linalg.eigvalsh(G.numpy()), np.linalg.eigvalsh(A.numpy())).ravel())[::-1]
    assert np.isclose(float(kfac_quadratic(D, A, G)), 2.5 ** 2 / k * prods[:k].sum())
    assert np.linalg.matrix_rank(D.numpy(), tol=1e-8) <= k


def test_fisher_obfuscation_k1_is_the_maximiser():
    A, G = spd(4, 5), spd(3, 6)
    best = float(kfac_quadratic(fisher_obfuscation(A, G, 1.0, k=1), A, G))
    R = torch.randn(5000, 3, 4, dtype=torch.float64)
    R = R / R.flatten(1).norm(dim=1)[:, None, None]
    assert max(float(kfac_quadratic(d, A, G)) for d in R) <= best + 1e-12
    assert np.isclose(best, np.linalg.eigvalsh(torch.kron(A, G).numpy()).max())


def test_fisher_obfuscation_signs_oppose_weight():
    A, G = spd(4, 7), spd(3, 8)
    W = torch.randn(3, 4, dtype=torch.float64)
    D = fisher_obfuscation(A, G, 1.0, k=2, weight=W)
    assert float((W * D).sum()) < 0
    with pytest.raises(ValueError, match="k must"):
        fisher_obfuscation(A, G, 1.0, k=0)


def test_fisher_obfuscation_float32():
    D = fisher_obfuscation(spd(4, 1, torch.float32), spd(3, 2, torch.float32), 1.0, k=2)
    assert D.dtype == torch.float32


@pytest.mark.parametrize("rank", [1, 2, 4])
def test_lora_restore_eckart_young(rank):
    D = torch.randn(5, 7, dtype=torch.float64)
    B, A = lora_restore(D, rank)
    assert B.shape == (5, rank) and A.shape == (rank, 7)
    s = np.linalg.svd(D.numpy(), compute_uv=False)
    assert np.isclose(float((B @ A + D).norm()), np.sqrt((s[rank:] ** 2).sum()))


def test_lora_restore_exact_for_low_rank_and_through_loralinear():
    D = fisher_obfuscation(spd(6, 1), spd(5, 2), 3.0, k=3)
    B, A = lora_restore(D, 3)
    assert torch.allclose(B @ A, -D)
    lin = nn.Linear(6, 5).double()
    obf = nn.Linear(6, 5).double()
    obf.load_state_dict(lin.state_dict())
    with torch.no_grad():
        obf.weight += D
    lo = LoRALinear(obf, 3, alpha=3.0)
    with torch.no_grad():
        lo.A.copy_(A); lo.B.copy_(B)
    x = torch.randn(8, 6, dtype=torch.float64)
    assert torch.allclose(lo(x), lin(x))
    with pytest.raises(ValueError, match="rank must"):
        lora_restore(D, 0)


def test_tee_flops_counts():
    dims = [(4, 8), (8, 3)]
    f = tee_flops(dims, [1], {0: 2})
    assert f["total"] == 2 * 32 + 2 * 24 + 8
    assert f["tee"] == 2 * 24 + 8 + 2 * 2 * 12
    assert tee_flops(dims, [0, 1], {})["share"] == 1.0
