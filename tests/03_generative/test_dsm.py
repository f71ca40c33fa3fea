"""Unit tests for paper_suite.generative.dsm against references that share none of its code: finite differences of
closed-form mixture scores (scipy densities), explicit loops, Monte Carlo, torch.autograd Hessians and scikit-learn."""
import math

import numpy as np
import pytest
import torch
from scipy import stats

from paper_suite.diffusion import CondMLPDenoiser, cfg_ddim_sample
from paper_suite.generative.dsm import (CallCounter, PromptGMM, auroc_tpr, conditional_dsm, dsm_statistic,
                                        hessian_metrics, point_vs_broad_ratio, score_evolution, wen_statistic)

DT = torch.float64


def mixture(seed=0, K=3, d=2):
    r = np.random.default_rng(seed)
    w = r.dirichlet(np.ones(K))
    mu = 1.5 * r.standard_normal((K, d))
    A = r.standard_normal((K, d, d))
    S = 0.3 * A @ A.transpose(0, 2, 1) + 0.05 * np.eye(d)
    return w, mu, S


def noised_logp(x, gam, w, mu, S):
    """log p_γ(x) by scipy densities of the noised components (no toolkit code)."""
    a2 = 1 / (1 + math.exp(-gam))
    return np.log(sum(w[k] * stats.multivariate_normal(math.sqrt(a2) * mu[k], a2 * S[k] + (1 - a2) * np.eye(len(x)))
                      .pdf(x) for k in range(len(w))))


def derivs(x, gam, w, mu, S, h=1e-4):
    """Score, Hessian and ∇ tr H of log p_γ by central finite differences of scipy log-densities."""
    d = len(x)
    E = np.eye(d) * h
    f = lambda v: noised_logp(v, gam, w, mu, S)
    s = np.array([(f(x + E[i]) - f(x - E[i])) / (2 * h) for i in range(d)])
    return s


def torch_derivs(x, gam, w, mu, S):
    """Score, Hessian and ∇ tr H by torch.autograd of an explicit log-density."""
    a2 = 1 / (1 + math.exp(-gam))
    wt, mut, St = (torch.tensor(v, dtype=DT) for v in (w, mu, S))
    C = a2 * St + (1 - a2) * torch.eye(mut.shape[1], dtype=DT)

    def logp(v):
        comps = torch.distributions.MultivariateNormal(math.sqrt(a2) * mut, C)
        return torch.logsumexp(torch.log(wt) + comps.log_prob(v), 0)

    xt = torch.tensor(x, dtype=DT)
    s = torch.func.grad(logp)(xt)
    H = torch.func.hessian(logp)(xt)
    gtr = torch.func.grad(lambda v: torch.diagonal(torch.func.hessian(logp)(v)).sum())(xt)
    return s, H, gtr


@pytest.mark.parametrize("gam", [-1.5, 0.5, 3.0])
def test_score_evolution_matches_finite_differences_in_logsnr(gam):
    w, mu, S = mixture(1)
    h = 1e-4
    for x in np.random.default_rng(2).standard_normal((3, 2)):
        s, H, gtr = torch_derivs(x, gam, w, mu, S)
        fd = (derivs(x, gam + h, w, mu, S) - derivs(x, gam - h, w, mu, S)) / (2 * h)
        law = score_evolution(torch.tensor(x)[None], s[None], H[None], gtr[None], gam)[0].numpy()
        assert np.linalg.norm(law - fd) <= 1e-3 * np.linalg.norm(fd) + 1e-6


def test_flow_form_is_the_total_derivative_and_drops_hx():
    w, mu, S = mixture(3)
    gam, h = 1.0, 1e-5
    x = np.array([0.4, -0.8])
    s, H, gtr = torch_derivs(x, gam, w, mu, S)
    v = 0.5 / (1 + math.exp(gam)) * (x + s.numpy())                  # dz/dγ of the probability-flow ODE
    sp = torch_derivs(x + h * v, gam + h, w, mu, S)[0]
    sm = torch_derivs(x - h * v, gam - h, w, mu, S)[0]
    fd = ((sp - sm) / (2 * h)).numpy()
    flow = score_evolution(torch.tensor(x)[None], s[None], H[None], gtr[None], gam, along_flow=True)[0].numpy()
    assert np.allclose(flow, fd, rtol=1e-5, atol=1e-7)
    # the flow form does not depend on x once s, H, ∇ tr H are given; the fixed-x form does
    shifted = torch.tensor(x + 5.0)[None]
    assert torch.allclose(score_evolution(shifted, s[None], H[None], gtr[None], gam, along_flow=True)[0],
                          torch.tensor(flow))
    assert not torch.allclose(score_evolution(shifted, s[None], H[None], gtr[None], gam)[0],
                              score_evolution(torch.tensor(x)[None], s[None], H[None], gtr[None], gam)[0])


def test_dsm_wen_and_conditional_dsm_against_loops():
    g = torch.Generator().manual_seed(0)
    ec, eu = torch.randn(5, 3, 2, 4, generator=g), torch.randn(5, 3, 2, 4, generator=g)
    D, W, C = dsm_statistic(ec, eu), wen_statistic(ec, eu), conditional_dsm(ec)
    assert D.shape == (4, 3) and W.shape == (5, 3) and C.shape == (4, 3)
    for k in range(4):
        for b in range(3):
            ref = sum(float(((ec[k + 1, b] - ec[k, b]) - (eu[k + 1, b] - eu[k, b]))[i, j]) ** 2
                      for i in range(2) for j in range(4))
            assert abs(float(D[k, b]) - ref) < 1e-5
            assert abs(float(C[k, b]) - float(((ec[k + 1, b] - ec[k, b]) ** 2).sum())) < 1e-5
    assert torch.allclose(W[2], ((ec[2] - eu[2]) ** 2).sum((1, 2)))
    # a branch offset that is constant along the path leaves DSM at zero
    assert torch.allclose(dsm_statistic(eu + torch.randn(1, 3, 2, 4, generator=g), eu), torch.zeros(4, 3), atol=1e-6)


def test_closed_form_ratio_by_monte_carlo_and_limits():
    r = np.random.default_rng(0)
    for gam in (-1.0, 2.5):
        a2 = 1 / (1 + math.exp(-gam))
        out = []
        for v in (0.03**2, 0.4**2):
            C = lambda g_: v / (1 + math.exp(-g_)) + 1 / (1 + math.exp(g_))
            z = r.standard_normal((200_000, 3)) * math.sqrt(a2 * v + 1 - a2)
            ds = (-z / C(gam + 1e-5) + z / C(gam - 1e-5)) / 2e-5
            out.append((ds**2).sum(1).mean())
        assert abs(out[0] / out[1] / point_vs_broad_ratio(0.03, 0.4, gam) - 1) < 0.03
    assert abs(point_vs_broad_ratio(0.01, 0.3, -40.0) - ((1 - 1e-4) / 0.91) ** 2) < 1e-9
    assert abs(point_vs_broad_ratio(0.01, 0.3, 40.0) / (0.3 / 0.01) ** 6 * (0.91 / (1 - 1e-4)) ** 2 - 1) < 1e-6
    assert np.all(np.diff(point_vs_broad_ratio(np.array([0.01, 0.05, 0.1, 0.2]), 0.3, 2.0)) < 0)


def test_prompt_gmm_score_against_autograd_of_the_mixture_density():
    r = np.random.default_rng(4)
    means = torch.tensor(r.standard_normal((5, 3)), dtype=DT)
    var = torch.tensor([0.01, 0.2, 0.3, 0.05, 0.5], dtype=DT)
    prompt = torch.tensor([0, 1, 1, 2, 2])
    m = PromptGMM(means, var, prompt)
    gam = 0.7
    a2 = 1 / (1 + math.exp(-gam))

    def logp(z, comps, w):
        C = a2 * var[comps] + 1 - a2
        lp = torch.stack([torch.distributions.MultivariateNormal(math.sqrt(a2) * means[k], C[i] * torch.eye(3, dtype=DT))
                          .log_prob(z) for i, k in enumerate(comps)])
        return torch.logsumexp(torch.log(torch.tensor(w, dtype=DT)) + lp, 0)

    z = torch.tensor(r.standard_normal((2, 3)), dtype=DT)
    cond = [torch.nn.functional.one_hot(torch.tensor([2, 2]), 3).double()]
    s = m.score(z, torch.full((2,), gam, dtype=DT), cond, torch.tensor([[1.0], [0.0]]))
    ref_c = torch.func.grad(lambda v: logp(v, [3, 4], [0.5, 0.5]))(z[0])
    ref_u = torch.func.grad(lambda v: logp(v, [0, 1, 2, 3, 4], [1 / 3, 1 / 6, 1 / 6, 1 / 6, 1 / 6]))(z[1])
    assert torch.allclose(s[0], ref_c, atol=1e-10) and torch.allclose(s[1], ref_u, atol=1e-10)
    eps = m(z, torch.full((2,), gam, dtype=DT), cond, torch.tensor([[1.0], [0.0]]))
    assert torch.allclose(eps, -math.sqrt(1 - a2) * s)


def test_hessian_metrics_against_full_autograd_hessians_and_counts():
    r = np.random.default_rng(5)
    m = PromptGMM(torch.tensor(r.standard_normal((4, 2)), dtype=DT), torch.tensor([0.02, 0.1, 0.3, 0.2], dtype=DT),
                  torch.tensor([0, 0, 1, 1]))
    gam = 0.3
    sig = math.sqrt(1 / (1 + math.exp(gam)))
    z = torch.tensor(r.standard_normal((3, 2)), dtype=DT)
    cond = [torch.nn.functional.one_hot(torch.tensor([0, 1, 0]), 2).double()]
    cnt = CallCounter(m)
    hm = hessian_metrics(cnt, z, gam, cond)
    assert cnt.counts() == (6, 6)                           # 2 evaluations and 2 backward passes per sample
    for b in range(3):
        def s_of(v, keep):
            return -m(v[None], torch.tensor([gam], dtype=DT), [cond[0][b:b + 1]], torch.tensor([[keep]]))[0] / sig
        sc, su = s_of(z[b], 1.0), s_of(z[b], 0.0)
        Hc = torch.autograd.functional.jacobian(lambda v: s_of(v, 1.0), z[b])
        Hu = torch.autograd.functional.jacobian(lambda v: s_of(v, 0.0), z[b])
        assert torch.allclose(hm["metric2"][b], ((Hc @ sc - Hu @ su) ** 2).sum(), rtol=1e-8)
        assert torch.allclose(hm["sail"][b], (((Hc - Hu) @ (sc - su)) ** 2).sum(), rtol=1e-8)
    with pytest.raises(ValueError, match="allowed"):
        hessian_metrics(m, z, gam, cond, which=("bogus",))


def test_dsm_costs_nothing_beyond_guided_sampling():
    torch.manual_seed(0)
    net = CallCounter(CondMLPDenoiser((4,), [(3,)], hidden=16, depth=2))
    c = [torch.eye(3)[[0, 1, 2, 0]]]
    _, rec = cfg_ddim_sample(net, 4, c, guidance=7.5, steps=6, seed=0, record=True)
    assert net.counts() == (2 * 7 * 4, 0)
    dsm_statistic(rec["eps_cond"], rec["eps_uncond"])
    assert net.counts() == (2 * 7 * 4, 0)


def test_auroc_tpr_against_sklearn_and_by_hand():
    from sklearn.metrics import roc_auc_score
    r = np.random.default_rng(0)
    pos, neg = r.normal(1, 1, 300), r.normal(0, 1, 400)
    auc, tpr = auroc_tpr(pos, neg)
    assert abs(auc - roc_auc_score(np.r_[np.ones(300), np.zeros(400)], np.r_[pos, neg])) < 1e-12
    assert abs(auc - np.mean(pos[:, None] > neg[None, :])) < 1e-12            # Mann–Whitney form
    thr = np.sort(neg)[-5]                   # strictly above it: 4 of 400 negatives, FPR = 1 %
    assert abs(tpr - np.mean(pos > thr)) < 1e-12
    assert auroc_tpr([2.0, 3.0], [0.0, 1.0]) == (1.0, 1.0)
