"""paper_suite.dynamics.sign_sgd against closed forms, scipy/numpy, brute force and torch.optim.Muon."""
import math

import numpy as np
import pytest
import torch
from scipy import stats

from paper_suite.dynamics.sign_sgd import (Muon, Signum, abs_gauss_mean, gradient_noise_density, hidden_matrices,
                                           iid_noise, iterations_to_target, l1_stationarity, make_optimizers,
                                           matrix_expected_nuclear, newton_schulz, noise_density,
                                           nuclear_stationarity, rank_one_noise, sgd_expected_l1,
                                           sign_sgd_expected_l1, signsgd_bound, sparse_sigma)


@pytest.mark.parametrize("m,s", [(0.0, 1.0), (1.3, 0.7), (-2.0, 3.0)])
def test_abs_gauss_mean_is_the_folded_normal_mean(m, s):
    ref = stats.foldnorm(abs(m) / s, scale=s).mean()
    got = float(abs_gauss_mean(torch.tensor(m, dtype=torch.float64), torch.tensor(s * s, dtype=torch.float64)))
    assert got == pytest.approx(ref, rel=1e-10)


def test_sgd_law_matches_an_independent_numpy_simulation():
    rng = np.random.default_rng(0)
    L, sig, x0, eta, T = np.array([1.0, 0.5, 2.0]), np.array([1.0, 0.0, 0.3]), np.array([1.0, -2.0, 0.5]), 0.2, 9
    x = np.tile(x0, (200_000, 1))
    for _ in range(T):
        x = x - eta * (L * x + sig * rng.standard_normal(x.shape))
    mc = np.abs(L * x).sum(1)
    ex = sgd_expected_l1(torch.tensor(L), torch.tensor(sig), torch.tensor(x0), torch.tensor([eta]), torch.tensor([T]))
    assert abs(mc.mean() - float(ex[0, 0])) < 4 * mc.std() / math.sqrt(len(mc))


def test_noise_density_range_and_sparse_sigma():
    assert noise_density(sparse_sigma(100, 1, 5.0)) == pytest.approx(0.01)
    assert noise_density(sparse_sigma(100, 100, 5.0)) == pytest.approx(1.0)
    assert noise_density(torch.tensor([3.0, 1.0])) == pytest.approx(16 / (2 * 10))
    with pytest.raises(ValueError):
        sparse_sigma(4, 5, 1.0)


def test_noiseless_iteration_counts_have_closed_forms():
    x0, L = torch.tensor([1.0, 0.6], dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    zero = torch.zeros(2, dtype=torch.float64)
    # SGD: ‖∇f‖₁ = (1-η)^t ‖x0‖₁ ≤ 0.4  ⇔  t ≥ log(0.25)/log(0.9) = 13.16
    T, lr = iterations_to_target("sgd", L, zero, x0, 0.4, torch.tensor([0.1]), max_steps=1000)
    assert T == 14 and lr == pytest.approx(0.1)
    # SignSGD with η = 0.15: ‖∇f‖₁ = 1.6, 1.3, 1.0, 0.7, 0.4 → 4 steps
    T, _ = iterations_to_target("sign", L, zero, x0, 0.4 + 1e-6, torch.tensor([0.15]), max_steps=100, chains=1)
    assert T == 4


def test_sign_sgd_on_one_noisy_coordinate_obeys_the_bound():
    L, sig, x0 = torch.ones(8), sparse_sigma(8, 1, 2.0), torch.full((8,), 1.0)
    eta, T = 0.05, 200
    c = sign_sgd_expected_l1(L, sig, x0, torch.tensor([eta]), steps=T - 1, chains=64, seed=0)
    assert c.shape == (T, 1) and float(c.mean()) <= signsgd_bound(4.0, 8.0, 2.0, eta, T)


def test_newton_schulz_properties():
    G = torch.randn(5, 7, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    U, S, Vh = torch.linalg.svd(G, full_matrices=False)
    assert torch.allclose(newton_schulz(G, steps=40, coeffs=(1.5, -0.5, 0.0)), U @ Vh, atol=1e-8)
    sv = torch.linalg.svdvals(newton_schulz(G))
    assert sv.min() > 0.5 and sv.max() < 1.3
    assert torch.allclose(nuclear_stationarity(G), torch.tensor(np.linalg.norm(G.numpy(), "nuc", axis=(1, 2))))


@pytest.mark.parametrize("shape,nesterov,wd", [((24, 8), True, 0.1), ((8, 24), False, 0.0)])
def test_muon_equals_torch_muon(shape, nesterov, wd):
    g = torch.Generator().manual_seed(0)
    W0, grads = torch.randn(*shape, generator=g), [torch.randn(*shape, generator=g) for _ in range(4)]
    out = []
    for cls in (Muon, torch.optim.Muon):
        w = torch.nn.Parameter(W0.clone())
        opt = cls([w], lr=0.05, weight_decay=wd, momentum=0.9, nesterov=nesterov)
        for gr in grads:
            w.grad = gr.clone(); opt.step()
        out.append(w.detach())
    assert torch.allclose(out[0], out[1], atol=1e-6)
    with pytest.raises(ValueError):
        Muon([torch.nn.Parameter(torch.zeros(3))])


def test_signum_steps_by_the_sign_of_the_average():
    w = torch.nn.Parameter(torch.zeros(3))
    opt = Signum([w], lr=0.1, momentum=0.5)
    for gr in (torch.tensor([1.0, -1.0, 2.0]), torch.tensor([-3.0, -1.0, -1.0])):
        w.grad = gr; opt.step()
    # averages: (.5,-.5,1) then (-1.25,-.75,0): steps -0.1·sign
    assert torch.allclose(w.detach(), torch.tensor([0.0, 0.2, -0.1]))


def test_matrix_runs_and_noise_shapes():
    gen = torch.Generator().manual_seed(0)
    u, v = torch.tensor([0.6, 0.8]), torch.tensor([1.0, 0.0])
    z = rank_one_noise(u, v, 3.0)((100, 2, 2), gen)
    assert torch.allclose(z[:, :, 1], torch.zeros(100, 2)) and torch.linalg.matrix_rank(z[0]) == 1
    assert abs(float(iid_noise(2.0)((20000,), gen).std()) - 2.0) < 0.05
    ts, c = matrix_expected_nuclear("sgd", torch.eye(2), iid_noise(0.0), torch.tensor([0.5]), max_steps=3, chains=2, seed=0)
    assert ts.tolist() == [0, 1, 2, 3] and torch.allclose(c[:, 0], 2 * 0.5 ** ts.double())
    with pytest.raises(ValueError):
        matrix_expected_nuclear("adam", torch.eye(2), iid_noise(0.0), torch.tensor([0.5]), max_steps=1, chains=1, seed=0)


def test_gpt_helpers():
    from paper_suite.tinytf import GPT, GPTConfig
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, d_model=16))
    ids = torch.randint(11, (400,), generator=torch.Generator().manual_seed(0))
    rho = gradient_noise_density(m, ids, n_batches=4, batch=4, seed=0)
    d = sum(p.numel() for p in m.parameters())
    assert 1 / d <= rho <= 1
    hid, rest = hidden_matrices(m)
    assert all(p.ndim == 2 for p in hid) and len(hid) == 4
    assert len(make_optimizers("muon", m, 0.01, 0.001)) == 2
    with pytest.raises(ValueError, match="allowed: sgdm, signum, muon"):
        make_optimizers("adam", m, 0.1)
    assert l1_stationarity(torch.tensor([1.0, -2.0])) == 3.0
