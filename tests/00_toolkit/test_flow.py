"""paper_suite.flow against closed forms: the interpolant's endpoints and derivative (autograd), the CFM loss of
known fields, its minimiser for a Gaussian coupling (the conditional mean, by least squares), Euler's first-order
error and its agreement with scipy's ODE solver."""
import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from paper_suite.flow import cfm_loss, euler_integrate, interpolant, sample_times, target_velocity


def test_interpolant_endpoints_and_derivative():
    g = torch.Generator().manual_seed(0)
    z0, z1 = torch.randn(4, 2, 3, generator=g, dtype=torch.float64), torch.randn(4, 2, 3, generator=g, dtype=torch.float64)
    assert torch.equal(interpolant(z0, z1, 0.0), z0) and torch.allclose(interpolant(z0, z1, 1.0), z1)
    t = torch.rand(4, generator=g, dtype=torch.float64).requires_grad_(True)
    zt = interpolant(z0, z1, t)
    (dt,) = torch.autograd.grad(zt.sum(), t)
    assert torch.allclose(dt, target_velocity(z0, z1).sum((1, 2)))
    with pytest.raises(ValueError):
        interpolant(z0, z1[:, :1], 0.5)
    with pytest.raises(ValueError):
        interpolant(z0, z1, torch.rand(3))


def test_loss_values_and_stop_gradient():
    z0, z1 = torch.randn(6, 5), torch.randn(6, 5)
    assert torch.allclose(cfm_loss(lambda z, t: torch.zeros_like(z), z0, z1), ((z1 - z0) ** 2).mean())
    assert float(cfm_loss(lambda z, t: z1 - z0, z0, z1)) < 1e-12
    a = z0.clone().requires_grad_(True)
    zero = lambda z, t: torch.zeros_like(z)
    assert not cfm_loss(zero, a, z1).requires_grad                 # zero field: the only path is the detached target
    cfm_loss(zero, a, z1, stop_gradient=False).backward()
    assert float(a.grad.abs().max()) > 0


def test_minimiser_is_conditional_mean():
    """z0 ~ N(0,1), z1 = z0 + m with m ~ ±1: E[z1 − z0 | z_t] = E[m | z_t] has a closed form; a least-squares fit of
    v on features of (z_t, t) at fixed t recovers it better than the conditional target's own spread."""
    g = torch.Generator().manual_seed(0)
    n, t = 200_000, 0.6
    z0 = torch.randn(n, generator=g, dtype=torch.float64)
    m = torch.where(torch.rand(n, generator=g) < 0.5, -2.0, 2.0).double()
    z1 = z0 + m
    zt = interpolant(z0[:, None], z1[:, None], torch.full((n,), t, dtype=torch.float64))[:, 0]
    # z_t = z0 + t m ~ N(t m, 1): posterior of m is logistic
    exact = 2.0 * torch.tanh(2.0 * t * zt)
    feats = torch.stack([torch.tanh(2.0 * t * zt), zt, torch.ones_like(zt)], 1)
    coef = torch.linalg.lstsq(feats, target_velocity(z0, z1)[:, None]).solution
    assert torch.allclose(coef[:, 0], torch.tensor([2.0, 0.0, 0.0], dtype=torch.float64), atol=0.03)
    assert float(((feats @ coef)[:, 0] - exact).abs().max()) < 0.1


def test_euler_against_scipy_and_order():
    f = lambda z, t: -z * (1 + t[:, None])
    z0 = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    ref = solve_ivp(lambda s, y: -y * (1 + s), (0, 1), z0[0].numpy(), rtol=1e-11, atol=1e-12).y[:, -1]
    errs = [float(np.abs(euler_integrate(f, z0, n)[0].numpy() - ref).max()) for n in (64, 128, 256)]
    assert 1.8 < errs[0] / errs[1] < 2.2 and 1.8 < errs[1] / errs[2] < 2.2
    path = euler_integrate(f, z0, 4, return_path=True, t_start=0.5, t_end=1.0)
    assert path.shape == (5, 1, 2) and torch.equal(path[0], z0)
    with pytest.raises(ValueError):
        euler_integrate(f, z0, 0)


def test_sample_times():
    s = sample_times(16, generator=torch.Generator().manual_seed(1), stratified=True)
    assert torch.equal(torch.sort((s * 16).floor()).values, torch.arange(16.0))
    u = sample_times(1000, generator=torch.Generator().manual_seed(1))
    assert 0 <= float(u.min()) and float(u.max()) < 1 and abs(float(u.mean()) - 0.5) < 0.05
