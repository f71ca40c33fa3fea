"""Unit tests for paper_suite.diffusion against references that share none of its code: Monte Carlo,
least-squares regression, scipy's logistic distribution, and exact Gaussian covariances."""
import math

import numpy as np
import pytest
import torch
from scipy import stats

from paper_suite.diffusion import (CondConvDenoiser, CondMLPDenoiser, GaussianDenoiser, add_noise, alpha_sigma,
                                   ddim_sample, ddpm_sample, denoising_errors, drop_conditions, eps_mse_to_x_mmse,
                                   eps_to_x, gaussian_mmse_curve, gaussian_posterior_mean, keep_bits,
                                   logistic_logpdf, logsnr_cosine, logsnr_linear, sample_logsnr, train_denoiser,
                                   x_to_eps)

COV = torch.tensor([[1.5, 0.6, 0.0], [0.6, 1.0, 0.2], [0.0, 0.2, 0.3]], dtype=torch.float64)


def gauss(n, seed, cov=COV):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, cov.shape[0], generator=g, dtype=torch.float64) @ torch.linalg.cholesky(cov).T


def test_channel_is_variance_preserving_with_the_right_snr():
    g = torch.linspace(-8, 8, 17, dtype=torch.float64)
    a, s = alpha_sigma(g)
    assert torch.allclose(a**2 + s**2, torch.ones_like(g))
    assert torch.allclose(torch.log(a**2 / s**2), g)


def test_schedules():
    t = torch.linspace(0, 1, 101)
    for f in (logsnr_cosine, logsnr_linear):
        y = f(t, -10.0, 9.0)
        assert abs(float(y[0]) - 9) < 1e-3 and abs(float(y[-1]) + 10) < 1e-3 and (y.diff() < 0).all()
    # cosine schedule: alpha^2 = cos^2(pi/2 * t') in the unclipped case
    tt = torch.tensor([0.3])
    lo, hi = -60.0, 60.0
    a2 = torch.sigmoid(logsnr_cosine(tt, lo, hi).double())
    assert abs(float(a2) - math.cos(math.pi / 2 * 0.3) ** 2) < 1e-4


def test_logistic_matches_scipy():
    x = torch.linspace(-6, 6, 13, dtype=torch.float64)
    assert np.allclose(logistic_logpdf(x, 0.5, 1.7).numpy(), stats.logistic.logpdf(x.numpy(), 0.5, 1.7))
    d = sample_logsnr(5000, "logistic", lo=-1e9, hi=1e9, loc=0.5, scale=1.7, generator=torch.Generator().manual_seed(0))
    assert stats.kstest(d.numpy(), stats.logistic(0.5, 1.7).cdf).pvalue > 0.01
    u = sample_logsnr(5000, "uniform", lo=-3, hi=2, generator=torch.Generator().manual_seed(0))
    assert u.min() >= -3 and u.max() <= 2 and stats.kstest(u.numpy(), stats.uniform(-3, 5).cdf).pvalue > 0.01
    with pytest.raises(ValueError):
        sample_logsnr(3, "nope")


def test_posterior_mean_equals_least_squares_regression():
    x = gauss(200000, 0)
    eps = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    z = add_noise(x, torch.tensor(0.7, dtype=torch.float64), eps)
    W = np.linalg.lstsq(z.numpy(), x.numpy(), rcond=None)[0]          # best linear = posterior mean for Gaussians
    probe = torch.randn(5, 3, dtype=torch.float64)
    assert np.allclose(gaussian_posterior_mean(probe, torch.tensor(0.7), COV).numpy(), probe.numpy() @ W, atol=0.01)


def test_mmse_curve_matches_monte_carlo_and_limits():
    lam = torch.linalg.eigvalsh(COV).numpy()
    for g in (-2.0, 0.5, 3.0):
        x = gauss(100000, 2)
        eps = torch.randn(x.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        z = add_noise(x, torch.tensor(g, dtype=torch.float64), eps)
        mc = float(((x - gaussian_posterior_mean(z, torch.tensor(g), COV)) ** 2).sum(1).mean())
        assert abs(mc / gaussian_mmse_curve(lam, [g])[0] - 1) < 0.02
    assert abs(gaussian_mmse_curve(lam, [-40])[0] - float(COV.trace())) < 1e-9
    assert abs(gaussian_mmse_curve(lam, [30])[0] * math.exp(30) - 3) < 1e-6


def test_parameterisations_round_trip_and_error_scaling():
    g = torch.tensor([-3.0, 0.0, 4.0]); x = torch.randn(3, 6); e = torch.randn(3, 6)
    z = add_noise(x, g, e)
    assert torch.allclose(eps_to_x(z, e, g), x, atol=1e-4) and torch.allclose(x_to_eps(z, x, g), e, atol=1e-3)
    e_hat = e + 0.1 * torch.randn(3, 6)
    x_err = ((x - eps_to_x(z, e_hat, g)) ** 2).sum(1)
    assert torch.allclose(x_err, eps_mse_to_x_mmse(((e - e_hat) ** 2).sum(1), g), rtol=1e-3)


def test_condition_dropout_frequencies_and_keep_bits():
    k = drop_conditions(200000, 3, [0.2, 0.5, 0.9], torch.Generator().manual_seed(0))
    assert np.allclose(k.mean(0).numpy(), [0.8, 0.5, 0.1], atol=0.005)
    assert abs(float((k.sum(1) == 0).float().mean()) - 0.2 * 0.5 * 0.9) < 0.005     # independence
    assert keep_bits(2, 4, [1, 3]).tolist() == [[0, 1, 0, 1]] * 2 and keep_bits(1, 2, []).sum() == 0


@pytest.mark.parametrize("cls", [CondMLPDenoiser, CondConvDenoiser])
def test_denoisers_shapes_skip_and_dropped_conditions(cls):
    kw = dict(hidden=16) if cls is CondMLPDenoiser else dict(channels=8, blocks=1)
    m = cls((1, 8, 8), [(3,), (1, 8, 8)], **kw)
    z, g = torch.randn(4, 1, 8, 8), torch.tensor([-2.0, 0.0, 1.0, 5.0])
    c = [torch.eye(3)[[0, 1, 2, 0]], torch.rand(4, 1, 8, 8)]
    assert m(z, g, c, keep_bits(4, 2, [0, 1])).shape == z.shape
    # a dropped condition is invisible: changing its value does not change the output
    c2 = [c[0], torch.rand(4, 1, 8, 8)]
    k = keep_bits(4, 2, [0])
    assert torch.allclose(m(z, g, c, k), m(z, g, c2, k))
    # the skip path (Eq. 9b): with the last layer zeroed the prediction is the unit-Gaussian denoiser σ z
    with torch.no_grad():
        m.out.weight.zero_(); m.out.bias.zero_()
    assert torch.allclose(m(z, g, c, k), alpha_sigma(g)[1].reshape(-1, 1, 1, 1) * z, atol=1e-6)


def test_samplers_reproduce_the_gaussian_covariance():
    gd = GaussianDenoiser(COV.float())
    for f, steps in ((ddim_sample, 60), (ddpm_sample, 200)):
        xs = f(gd, 6000, steps=steps, seed=0).double()
        assert (torch.cov(xs.T) - COV).abs().max() < 0.08, f.__name__


def test_denoising_errors_exact_model_and_common_random_numbers():
    gd = GaussianDenoiser(COV.float())
    x = gauss(20000, 4).float()
    grid = [-2.0, 1.0, 4.0]
    e = denoising_errors(gd, x, subsets=[(), ()], logsnr_grid=grid, seed=0)
    assert np.array_equal(e[0], e[1])                                     # same x, same ε for every subset
    lam = torch.linalg.eigvalsh(COV).numpy()
    assert np.allclose(eps_mse_to_x_mmse(e[0], grid), gaussian_mmse_curve(lam, grid), rtol=0.03)


def test_training_lowers_the_loss_towards_the_mmse():
    x = gauss(4000, 5).float()
    net = CondMLPDenoiser((3,), hidden=32, depth=2)
    torch.set_num_threads(1)
    losses = train_denoiser(net, x, steps=200, batch=128, lr=5e-3, logsnr_lo=-4, logsnr_hi=4, seed=0)
    assert np.mean(losses[-50:]) < np.mean(losses[:20])
    lam = torch.linalg.eigvalsh(COV).numpy()
    e = denoising_errors(net, x[:2000], logsnr_grid=[0.0], seed=1)[0, 0]
    assert e >= 0.95 * gaussian_mmse_curve(lam, [0.0])[0] and e <= 1.25 * gaussian_mmse_curve(lam, [0.0])[0]


def test_samplers_with_an_eps_parameterised_exact_model():
    gd = GaussianDenoiser(COV.float())

    class EpsModel(torch.nn.Module):
        shape, objective, n_cond = (3,), "eps", 0

        def forward(self, z, g, conds=(), keep=None):
            return x_to_eps(z, gd(z, g), g)

    for f in (ddim_sample, ddpm_sample):
        xs = f(EpsModel(), 6000, steps=60, logsnr_min=-9, logsnr_max=11, seed=1).double()
        assert (torch.cov(xs.T) - COV).abs().max() < 0.1, f.__name__


# --- Gaussian mixtures and classifier-free guidance (Eqs. 14-16) ---------------------------------------------
from paper_suite.diffusion import cfg_ddim_sample, gmm_noised, gmm_score_hessian  # noqa: E402


def _mixture(seed=0, K=3, d=3):
    g = torch.Generator().manual_seed(seed)
    w = torch.softmax(torch.randn(K, generator=g, dtype=torch.float64), 0)
    mu = 2 * torch.randn(K, d, generator=g, dtype=torch.float64)
    A = torch.randn(K, d, d, generator=g, dtype=torch.float64)
    return w, mu, A @ A.transpose(1, 2) + 0.1 * torch.eye(d, dtype=torch.float64)


def test_gmm_score_and_hessian_match_scipy_finite_differences():
    w, mu, C = _mixture()
    logp = lambda x: np.log(sum(float(w[k]) * stats.multivariate_normal(mu[k].numpy(), C[k].numpy()).pdf(x)
                                for k in range(3)))
    x = np.array([[0.3, -0.5, 1.0], [2.0, 0.1, -1.0]])
    s, H = gmm_score_hessian(torch.tensor(x), w, mu, C)
    assert s.shape == (2, 3) and H.shape == (2, 3, 3)
    h = 1e-4
    E = np.eye(3) * h
    for b in range(2):
        fd = np.array([(logp(x[b] + E[i]) - logp(x[b] - E[i])) / (2 * h) for i in range(3)])
        assert np.allclose(s[b].numpy(), fd, rtol=1e-6, atol=1e-7)
        fd2 = np.array([[(logp(x[b] + E[i] + E[j]) - logp(x[b] + E[i] - E[j]) - logp(x[b] - E[i] + E[j])
                          + logp(x[b] - E[i] - E[j])) / (4 * h * h) for j in range(3)] for i in range(3)])
        assert np.allclose(H[b].numpy(), fd2, rtol=1e-4, atol=1e-4)
        assert torch.allclose(H[b], H[b].T)


def test_gmm_noised_matches_monte_carlo_moments():
    w, mu, C = _mixture(1)
    g = torch.Generator().manual_seed(2)
    n = 400_000
    k = torch.multinomial(w, n, replacement=True, generator=g)
    x = mu[k] + (torch.linalg.cholesky(C)[k] @ torch.randn(n, 3, 1, generator=g, dtype=torch.float64))[..., 0]
    gam = torch.tensor(-0.7, dtype=torch.float64)
    z = add_noise(x, gam, torch.randn(n, 3, generator=g, dtype=torch.float64))
    wn, mn, Cn = gmm_noised(w, mu, C, gam)
    assert torch.equal(wn, w)
    mean = (w[:, None] * mn).sum(0)
    cov = (w[:, None, None] * (Cn + mn[:, :, None] * mn[:, None, :])).sum(0) - mean[:, None] * mean[None]
    assert torch.allclose(z.mean(0), mean, atol=0.01)
    assert torch.allclose(torch.cov(z.T), cov, atol=0.03)
    # γ → ∞ leaves the mixture unchanged, γ → −∞ gives N(0, I)
    _, m_hi, C_hi = gmm_noised(w, mu, C, 30.0)
    assert torch.allclose(m_hi, mu, atol=1e-6) and torch.allclose(C_hi, C, atol=1e-6)
    _, m_lo, C_lo = gmm_noised(w, mu, C, -30.0)
    assert torch.allclose(C_lo, torch.eye(3, dtype=torch.float64).expand(3, 3, 3), atol=1e-6)


def test_cfg_ddim_reduces_to_ddim_and_records_every_evaluation():
    torch.manual_seed(0)
    net = CondMLPDenoiser((4,), [(3,)], hidden=16, depth=2)
    c = [torch.randn(6, 3)]
    for w_, subset in ((1.0, [0]), (0.0, [])):
        ref = ddim_sample(net, 6, c, keep_bits(6, 1, subset), steps=10, seed=5)
        assert torch.allclose(cfg_ddim_sample(net, 6, c, guidance=w_, steps=10, seed=5), ref, atol=1e-5)
    calls = []
    net.register_forward_hook(lambda m, i, o: calls.append(1))
    x, rec = cfg_ddim_sample(net, 6, c, guidance=4.0, steps=10, seed=5, record=True)
    assert len(calls) == 2 * 11                                  # two branches per evaluation, none extra
    assert rec["z"].shape == rec["eps_cond"].shape == rec["eps_uncond"].shape == (11, 6, 4)
    assert rec["logsnr"].shape == (11,) and (rec["logsnr"].diff() > 0).all()
    # the record reproduces the guided DDIM update, Eqs. (12) and (16)
    for k in range(10):
        g0, g1 = rec["logsnr"][k].float(), rec["logsnr"][k + 1].float()
        e = rec["eps_uncond"][k] + 4.0 * (rec["eps_cond"][k] - rec["eps_uncond"][k])
        (a0, s0), (a1, s1) = alpha_sigma(g0), alpha_sigma(g1)
        assert torch.allclose(a1 * (rec["z"][k] - s0 * e) / a0 + s1 * e, rec["z"][k + 1], atol=1e-4)
    with pytest.raises(ValueError, match="schedule"):
        cfg_ddim_sample(net, 2, [torch.randn(2, 3)], guidance=1.0, schedule="bogus")


def test_cfg_ddim_on_an_exact_two_class_model_moves_toward_the_condition():
    class TwoMeans(torch.nn.Module):
        """Exact ε-predictor of N(±m, 0.01 I) (conditional) and of their even mixture (unconditional)."""
        shape, objective, n_cond = (2,), "eps", 1

        def forward(self, z, logsnr, conds, keep):
            a, s = alpha_sigma(logsnr.double())
            m = torch.tensor([[2.0, 0.0], [-2.0, 0.0]], dtype=torch.float64)
            w = torch.full((2,), 0.5, dtype=torch.float64)
            C = 0.01 * torch.eye(2, dtype=torch.float64).expand(2, 2, 2)
            out = []
            for b in range(len(z)):
                wn, mn, Cn = gmm_noised(w, m, C, logsnr[b].double())
                if keep[b, 0] > 0:
                    j = int(conds[0][b, 0] < 0)            # +1 → component 0 (mean +2)
                    wn, mn, Cn = wn[j:j + 1] / wn[j], mn[j:j + 1], Cn[j:j + 1]
                out.append(-s[b] * gmm_score_hessian(z[b:b + 1].double(), wn, mn, Cn)[0][0])
            return torch.stack(out).float()

    c = [torch.tensor([[1.0]] * 20 + [[-1.0]] * 20)]
    x = cfg_ddim_sample(TwoMeans(), 40, c, guidance=1.0, steps=30, logsnr_min=-8, logsnr_max=8)
    assert (x[:20, 0] > 1.5).all() and (x[20:, 0] < -1.5).all()


# --- DDIM inversion (Eq. 12b) ----------------------------------------------------------------------------------
def test_ddim_invert_recovers_the_initial_noise_and_converges_with_steps():
    from paper_suite.diffusion import ddim_invert
    gd = GaussianDenoiser(COV.float())
    z0 = torch.randn((800, 3), generator=torch.Generator().manual_seed(4))    # ddim_sample's initial noise, seed 4
    errs = []
    for steps in (20, 200):
        zr = ddim_invert(gd, ddim_sample(gd, 800, steps=steps, seed=4), steps=steps)
        errs.append(float(((zr - z0).norm(dim=1) / z0.norm(dim=1)).median()))
    assert errs[1] < 0.05 and errs[1] < errs[0] / 3       # first-order discretisation error
    with pytest.raises(ValueError, match="allowed: cosine, linear"):
        ddim_invert(gd, z0, schedule="bogus")
