"""Unit tests for paper_suite.generative.inmark against references that share none of its code: exact binomial sums
(math.comb), an eigenvalue form of the Fréchet distance and its Gaussian closed form, explicit re-computation of the
loss terms, scipy's DCT, and properties of the attacks and marks."""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
from scipy.fft import dctn

from paper_suite.diffusion import CondMLPDenoiser, alpha_sigma
from paper_suite.generative.inmark import (MarkDecoder, MarkEncoder, block_dct, block_idct, crop_resize, dct_carriers,
                                           dct_decode, dct_embed, detection_threshold, frechet_distance,
                                           gaussian_blur, inmark_loss, jpeg_like, match_pvalue, ring_mask,
                                           treering_distance, treering_noise, tweedie_x0)


def tail(n, k):
    return sum(math.comb(n, j) for j in range(k, n + 1)) / 2**n


def test_match_pvalue_is_the_exact_binomial_tail_per_row():
    r = np.random.default_rng(0)
    bits = r.integers(0, 2, 32)
    bh = r.integers(0, 2, (50, 32))
    bh[0] = bits
    p = match_pvalue(bh, bits)
    k = (bh == bits).sum(1)
    assert p.shape == (50,)
    assert np.allclose(p, [tail(32, int(kk)) for kk in k], rtol=1e-10)
    assert np.isclose(p[0], 2.0**-32)
    with pytest.raises(ValueError, match="bits"):
        match_pvalue(bh[:, :5], bits)


@pytest.mark.parametrize("n,fpr", [(32, 0.01), (32, 0.001), (16, 0.05), (48, 0.01)])
def test_detection_threshold_is_the_smallest_count_with_tail_below_fpr(n, fpr):
    tau = detection_threshold(n, fpr)
    assert tail(n, tau) <= fpr and tail(n, tau - 1) > fpr
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        detection_threshold(n, 1.5)


def test_detection_threshold_gives_at_most_the_nominal_fpr_on_fair_coins():
    r = np.random.default_rng(1)
    bits = r.integers(0, 2, 32)
    k = (r.integers(0, 2, (200000, 32)) == bits).sum(1)
    assert (k >= detection_threshold(32, 0.01)).mean() <= 0.0105


def fd_eig(a, b):
    """FD with tr((Σa Σb)^½) = Σ sqrt(eig(Σa Σb)) (real, non-negative for PSD products)."""
    Sa, Sb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    ev = np.linalg.eigvals(Sa @ Sb)
    return ((a.mean(0) - b.mean(0)) ** 2).sum() + np.trace(Sa) + np.trace(Sb) - 2 * np.sqrt(np.clip(ev.real, 0, None)).sum()


def test_frechet_distance_matches_the_eigenvalue_form_and_is_symmetric():
    r = np.random.default_rng(2)
    a = r.normal(size=(500, 4)) @ r.normal(size=(4, 4))
    b = r.normal(size=(400, 4)) @ r.normal(size=(4, 4)) + 0.5
    assert np.isclose(frechet_distance(a, b), fd_eig(a, b), rtol=1e-6)
    assert np.isclose(frechet_distance(a, b), frechet_distance(b, a), rtol=1e-6)
    assert abs(frechet_distance(a, a)) < 1e-8
    # two isotropic Gaussians' sample statistics: d = |Δμ|² + Σ (sa − sb)² for diagonal covariances
    x = np.diag([1.0, 2.0, 3.0])
    y = np.diag([2.0, 2.0, 1.0])
    ga, gb = r.normal(size=(300, 3)) @ x, r.normal(size=(300, 3)) @ y
    Sa, Sb = np.cov(ga, rowvar=False), np.cov(gb, rowvar=False)
    assert frechet_distance(ga, gb) >= 0
    assert np.isclose(frechet_distance(ga, gb), fd_eig(ga, gb), rtol=1e-6)


def test_inmark_loss_parts_match_an_explicit_computation():
    torch.manual_seed(0)
    net = CondMLPDenoiser((1, 4, 4), hidden=16, depth=2)
    ref = CondMLPDenoiser((1, 4, 4), hidden=16, depth=2)
    dec = nn.Sequential(nn.Flatten(), nn.Linear(16, 6))
    x0, eps = torch.randn(7, 1, 4, 4), torch.randn(7, 1, 4, 4)
    gam = torch.linspace(-4, 4, 7)
    bits = torch.tensor([1, 0, 1, 1, 0, 0])
    total, parts = inmark_loss(net, ref, dec, x0, bits, gam, eps, lam=0.7, mu=0.3)
    a, s = alpha_sigma(gam)
    a, s = a.reshape(-1, 1, 1, 1), s.reshape(-1, 1, 1, 1)
    z = a * x0 + s * eps
    e_hat, e_ref = net(z, gam), ref(z, gam)
    x_hat = (z - s * e_hat) / a
    den = ((e_hat - eps) ** 2).sum((1, 2, 3)).mean()
    lg = dec(x_hat)
    p = torch.sigmoid(lg)
    bce = -(bits * torch.log(p) + (1 - bits) * torch.log(1 - p)).mean()
    dis = ((e_hat - e_ref) ** 2).sum((1, 2, 3)).mean()
    assert torch.isclose(parts["denoise"], den, rtol=1e-5)
    assert torch.isclose(parts["mark"], bce, rtol=1e-5)
    assert torch.isclose(parts["distill"], dis, rtol=1e-5)
    assert torch.isclose(total, den + 0.7 * bce + 0.3 * dis, rtol=1e-5)
    total.backward()
    assert all(p_.grad is None for p_ in ref.parameters())          # the reference is frozen
    assert any(p_.grad is not None and p_.grad.abs().sum() > 0 for p_ in net.parameters())


def test_tweedie_for_an_x_predicting_model_returns_its_prediction():
    net = CondMLPDenoiser((3,), hidden=8, depth=1, objective="x")
    z, g = torch.randn(5, 3), torch.randn(5)
    xh, eh = tweedie_x0(net, z, g)
    assert torch.allclose(xh, net(z, g))
    a, s = alpha_sigma(g)
    assert torch.allclose(a[:, None] * xh + s[:, None] * eh, z, atol=1e-5)


def test_block_dct_matches_scipy_and_inverts():
    x = torch.randn(2, 1, 16, 8)
    y = block_dct(x)
    assert y.shape == (2, 1, 2, 1, 8, 8)
    assert np.allclose(y[1, 0, 1, 0].numpy(), dctn(x[1, 0, 8:, :].numpy(), norm="ortho"), atol=1e-5)
    assert torch.allclose(block_idct(y), x, atol=1e-5)


def test_attacks_properties():
    x = torch.randn(3, 1, 8, 8)
    c = torch.full((1, 1, 8, 8), 0.3)
    assert torch.allclose(gaussian_blur(c), c, atol=1e-6)                  # blur keeps constants
    assert torch.allclose(crop_resize(x, 0.0), x, atol=1e-5)               # no crop = identity
    assert torch.allclose(jpeg_like(x, q=1e-6), x, atol=1e-4)              # a tiny step = identity
    q = jpeg_like(x, q=0.5)
    assert torch.allclose(jpeg_like(q, q=0.5), q, atol=1e-4)               # quantisation is idempotent
    xr = x.clone().requires_grad_()
    (jpeg_like(xr) + gaussian_blur(xr) + crop_resize(xr)).sum().backward()
    assert torch.isfinite(xr.grad).all() and xr.grad.abs().sum() > 0


def test_dct_mark_roundtrip_and_orthonormal_carriers():
    car = dct_carriers(32, seed=3)
    G = car.flatten(1) @ car.flatten(1).T
    assert torch.allclose(G, torch.eye(32), atol=1e-5)
    m = torch.randint(0, 2, (32,), generator=torch.Generator().manual_seed(0))
    x = 0.01 * torch.randn(4, 1, 8, 8)
    assert (dct_decode(dct_embed(x, m, car, 0.5), car) == m).all()
    with pytest.raises(ValueError, match="fewer than"):
        dct_carriers(100)


def test_mark_pair_shapes_and_bounded_residual():
    enc, dec = MarkEncoder((1, 8, 8), 32, strength=0.2), MarkDecoder((1, 8, 8), 32)
    x = torch.randn(5, 1, 8, 8)
    xm = enc(x, torch.randint(0, 2, (32,)))
    assert xm.shape == x.shape and (xm - x).abs().max() <= 0.2 + 1e-6
    assert dec(xm).shape == (5, 32)


def test_tree_ring_key_is_written_and_detected():
    mask = ring_mask(8, 1.0, 2.5)
    assert mask.sum() > 4 and not mask[4, 4]
    key = torch.zeros(int(mask.sum()))
    zk = treering_noise(50, (1, 8, 8), key, mask, torch.Generator().manual_seed(0))
    zn = torch.randn(50, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    # the ring is conjugate-symmetric, so writing a real key leaves it exactly in place after taking the real part
    assert treering_distance(zk, key, mask).max() < 1e-4
    assert treering_distance(zn, key, mask).min() > 1.0
