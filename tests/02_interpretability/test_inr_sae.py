"""paper_suite.interpretability.inr_sae against independent references: numpy's SVD for the stable rank, per-entry
loops for Fourier features and TopK codes, skimage's PSNR, and the pixel-wise structure of an INR for ablations."""
import math

import numpy as np
import pytest
import torch
from skimage.metrics import peak_signal_noise_ratio

from paper_suite.dictionary import SparseDictionary
from paper_suite.interpretability.inr_sae import (CohortINR, ablate_atoms, coord_grid, cross_image_correlation,
                                                  effective_support, fit_inr, fourier_features, psnr, reptile_init,
                                                  stable_rank, support_fraction, topk_codes)


@pytest.mark.parametrize("shape", [(5, 3), (3, 9), (12, 12)])
def test_stable_rank_matches_numpy_svd_and_bounds(shape):
    W = torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
    s = np.linalg.svd(W.double().numpy(), compute_uv=False)
    assert math.isclose(stable_rank(W), float((s**2).sum() / s[0] ** 2), rel_tol=1e-10)
    assert 1.0 <= stable_rank(W) <= np.linalg.matrix_rank(W.double().numpy()) + 1e-9
    assert math.isclose(stable_rank(torch.diag(torch.tensor([3.0, 3.0, 3.0]))), 3.0, rel_tol=1e-12)


def test_stable_rank_rejects_bad_input():
    with pytest.raises(ValueError):
        stable_rank(torch.randn(2, 3, 4))
    with pytest.raises(ValueError):
        stable_rank(torch.zeros(3, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fourier_features_per_entry(dtype):
    g = torch.Generator().manual_seed(1)
    x, B = torch.rand(6, 3, generator=g).to(dtype), torch.randn(4, 3, generator=g, dtype=torch.float64)
    out = fourier_features(x, B)
    assert out.shape == (6, 8) and out.dtype == dtype
    for i in range(6):
        for j in range(4):
            p = 2 * math.pi * sum(float(x[i, c]) * float(B[j, c]) for c in range(3))
            assert math.isclose(float(out[i, j]), math.cos(p), abs_tol=1e-4)
            assert math.isclose(float(out[i, 4 + j]), math.sin(p), abs_tol=1e-4)
    with pytest.raises(ValueError):
        fourier_features(x, torch.randn(4, 2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_topk_codes_brute_force_and_toolkit(dtype):
    g = torch.Generator().manual_seed(2)
    d, m, k = 5, 9, 3
    x, We, be, bd = (torch.randn(7, d, generator=g), torch.randn(d, m, generator=g), torch.randn(m, generator=g),
                     torch.randn(d, generator=g))
    z = topk_codes(x.to(dtype), We.to(dtype), be.to(dtype), bd.to(dtype), k)
    assert z.dtype == dtype and z.shape == (7, m)
    a = (x.double().numpy() - bd.double().numpy()) @ We.double().numpy() + be.double().numpy()
    for r in range(7):
        keep = np.argsort(-a[r])[:k]
        ref = np.zeros(m)
        ref[keep] = np.maximum(a[r, keep], 0)
        assert np.allclose(z[r].double().numpy(), ref, atol=1e-5)
    sae = SparseDictionary(d, m, kind="topk", k=k)
    with torch.no_grad():
        sae.W_enc.copy_(We); sae.b_enc.copy_(be); sae.b_dec.copy_(bd)
        assert torch.allclose(sae.encode(x), topk_codes(x, We, be, bd, k), atol=1e-6)
    with pytest.raises(ValueError):
        topk_codes(x, We, be, bd, 0)


def test_psnr_matches_skimage():
    g = np.random.default_rng(3)
    t = g.random((10, 10))
    p = np.clip(t + 0.05 * g.standard_normal((10, 10)), 0, 1)
    ours = psnr(torch.tensor(p, dtype=torch.float32), torch.tensor(t, dtype=torch.float32))
    assert math.isclose(ours, peak_signal_noise_ratio(t, p.astype(np.float32).astype(np.float64), data_range=1.0), rel_tol=1e-5)
    assert math.isclose(psnr(torch.tensor(p), torch.tensor(t), data_range=2.0),
                        peak_signal_noise_ratio(t, p, data_range=2.0), rel_tol=1e-10)
    with pytest.raises(ValueError):
        psnr(torch.zeros(3), torch.zeros(4))


def test_siren_initialisation_bounds_and_groups():
    m = CohortINR("siren", 3, 32, 2, groups=4, seed=0)
    assert m.W[0].shape == (4, 2, 32) and m.W[0].abs().max() <= 1 / 2
    assert m.W[1].abs().max() <= math.sqrt(6 / 32) / 30 and torch.equal(m.W[1][0], m.W[1][3])
    x = coord_grid(5)
    with torch.no_grad():
        h = torch.sin(30 * (x @ m.W[0][0] + m.b[0][0]))
        assert torch.allclose(m.hidden(x, 1)[0], h, atol=1e-6)
    with pytest.raises(ValueError):
        CohortINR("relu", 2, 8, 1)


def test_freeze_depth_keeps_frozen_layers_and_moves_others():
    x = coord_grid(7)
    for kind in ("siren", "ffmlp"):
        m = CohortINR(kind, 3, 16, 1, groups=2, n_freq=8, seed=1)
        before = [w.detach().clone() for w in m.W]
        fit_inr(m, x, torch.rand(2, 49, 1), steps=5, lr=1e-2, freeze=2)
        assert torch.equal(before[0], m.W[0]) and torch.equal(before[1], m.W[1]) and not torch.equal(before[2], m.W[2])
    with pytest.raises(ValueError):
        fit_inr(m, x, torch.rand(2, 49, 1), steps=1, lr=1e-3, freeze=4)


def test_ablation_changes_only_support_pixels_and_is_linear_at_last_layer():
    x = coord_grid(8)
    m = CohortINR("ffmlp", 3, 16, 1, groups=2, n_freq=8, seed=2)
    sae = SparseDictionary(16, 24, kind="topk", k=3, seed=0)
    with torch.no_grad():
        h = m.hidden(x, 3)[0]
        z = sae.encode(h)
        f = m(x)[0, :, 0]
        atoms = torch.arange(24)
        out = ablate_atoms(m, x, 3, sae, 0, atoms)
        # after the last hidden layer the readout is linear: the change is -z_i (d_i . H)
        ref = f.unsqueeze(0) - z.T * (sae.W_dec @ m.H[0])[:, 0:1]
    assert torch.allclose(out, ref, atol=1e-5)
    assert torch.allclose(out[:, :][(z.T == 0)], f.expand(24, -1)[(z.T == 0)], atol=1e-6)


def test_map_statistics():
    maps = torch.tensor([[0.0, 2.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    assert torch.allclose(support_fraction(maps), torch.tensor([0.5, 1.0], dtype=torch.float64))
    assert math.isclose(float(effective_support(maps)[1]), 1.0) and math.isclose(float(effective_support(maps)[0]), 9 / 20)
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(3, 40, generator=g), torch.randn(3, 40, generator=g)
    maps3 = torch.stack([a, b, -a])                                      # images x units x N
    ref = [np.mean([np.corrcoef(maps3[i, u], maps3[j, u])[0, 1] for i in range(3) for j in range(3) if i != j]) for u in range(3)]
    assert np.allclose(cross_image_correlation(maps3).numpy(), ref, atol=1e-10)


def test_reptile_moves_init_toward_task_solutions():
    x = coord_grid(6)
    sig = torch.rand(2, 36)
    r0 = reptile_init("siren", 2, 8, x, sig, outer=0, inner=3, lr=1e-3, seed=0)
    r1 = reptile_init("siren", 2, 8, x, sig, outer=3, inner=3, lr=1e-3, seed=0)
    assert not torch.equal(r0.W[1], r1.W[1])


def test_full_preset_configuration_starts():
    """The full preset's model sizes (width 256, 5 layers, 256 features, 4096 atoms) build and take a step."""
    x = coord_grid(32)
    for kind in ("siren", "ffmlp"):
        m = CohortINR(kind, 5, 256, 80, sigma=10.0, n_freq=256, seed=0)
        fit_inr(m, x, torch.rand(1, 1024, 80), steps=1, lr=1e-4)
        t = m.transfer(groups=2, seed=1)
        fit_inr(t, x, torch.rand(2, 1024, 1), steps=1, lr=1e-4, freeze=3)
        sae = SparseDictionary(256, 4096, kind="topk", k=16)
        out = ablate_atoms(t, x, 3, sae, 1, torch.arange(4))
        assert out.shape == (4, 1024) and torch.isfinite(out).all()
