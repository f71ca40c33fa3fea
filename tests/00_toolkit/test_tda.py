"""Tests of paper_suite.tda against references that share none of its code: scikit-learn's LogisticRegression and
Ridge, scipy's spearmanr, torch autograd, finite differences of retraining, and TRAK's formula written out by hand."""
import math

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.linear_model import LogisticRegression, Ridge

from paper_suite.tda import (additive_predictions, influence_matrix, influence_of_change, lds, linear_datamodel,
                             logistic_fit, logistic_grads, logistic_hessian, logistic_losses, sample_selections,
                             sample_subsets, selection_units, spearman_columns, subset_losses, trak_scores)


@pytest.fixture(scope="module")
def data():
    r = np.random.default_rng(0)
    X = np.c_[r.normal(size=(150, 4)), np.ones(150)]
    y = (X[:, 0] - 0.7 * X[:, 2] + 0.8 * r.normal(size=150) > 0).astype(float)
    return X, y, X[:9], y[:9]


def sk_fit(X, y, w, l2):
    return LogisticRegression(C=1 / l2, fit_intercept=False, tol=1e-13, max_iter=100_000).fit(X, y, sample_weight=w).coef_[0]


def test_subsets_rates_and_fixed_size():
    S = sample_subsets(5000, 40, 0.3, seed=1)
    assert S.dtype == bool and abs(S.mean() - 0.3) < 0.01
    F = sample_subsets(30, 40, 0.3, seed=1, fixed_size=True)
    assert (F.sum(1) == 12).all() and len({tuple(r) for r in F}) == 30
    with pytest.raises(ValueError, match="probability"):
        sample_subsets(3, 4, 1.5)


def test_selections_and_units():
    z, m = sample_selections(4000, 30, 4, p_z=0.4, p_m=0.8, seed=2)
    assert z.shape == (4000, 30) and m.shape == (4000, 30, 4)
    assert abs(z.mean() - 0.4) < 0.01 and abs(m.mean() - 0.8) < 0.01
    u = selection_units(z, m)
    assert (u[z == 0] == 0).all() and np.array_equal(u[z == 1], m[z == 1])
    with pytest.raises(ValueError, match="modality axis"):
        selection_units(z, m[:, :5])
    with pytest.raises(ValueError, match="p_m"):
        sample_selections(2, 3, 2, p_m=-0.1)


@pytest.mark.parametrize("l2", [0.1, 1.0, 10.0])
def test_logistic_fit_matches_sklearn(data, l2):
    X, y, _, _ = data
    w = np.random.default_rng(3).random(150) * 2
    np.testing.assert_allclose(logistic_fit(X, y, w, l2=l2).numpy(), sk_fit(X, y, w, l2), atol=1e-6)


def test_logistic_fit_separable_data_converges(data):
    X, _, _, _ = data
    y = (X[:, 0] > 0).astype(float)                         # separable: a plain Newton step from 0 overshoots
    np.testing.assert_allclose(logistic_fit(X, y, l2=1e-3).numpy(), sk_fit(X, y, None, 1e-3), rtol=1e-4)


def test_batched_per_model_features_match_single_fits(data):
    X, y, _, _ = data
    Xb = np.stack([X, X * np.r_[0, 1, 1, 1, 1], X * np.r_[1, 1, 0, 0, 1]])
    W = (np.random.default_rng(4).random((3, 150)) < 0.6).astype(float)
    th = logistic_fit(Xb, y, W, l2=0.5)
    for b in range(3):
        np.testing.assert_allclose(th[b].numpy(), sk_fit(Xb[b], y, W[b], 0.5), atol=1e-6)
    with pytest.raises(ValueError, match="l2"):
        logistic_fit(X, y, l2=0.0)


def test_losses_grads_hessian_against_autograd(data):
    X, y, _, _ = data
    w = np.random.default_rng(5).random(150)
    th = torch.as_tensor(np.random.default_rng(6).normal(size=5) * 0.3)
    f = torch.as_tensor(X) @ th
    p = torch.sigmoid(f)
    ll = -(torch.as_tensor(y) * torch.log(p) + (1 - torch.as_tensor(y)) * torch.log(1 - p))
    assert torch.allclose(logistic_losses(th, X, y), ll)
    g = torch.autograd.functional.jacobian(lambda t: logistic_losses(t, X, y), th)
    assert torch.allclose(logistic_grads(th, X, y), g)
    H = torch.autograd.functional.hessian(lambda t: (torch.as_tensor(w) * logistic_losses(t, X, y)).sum()
                                          + 0.5 * 0.3 * (t * t).sum(), th)
    assert torch.allclose(logistic_hessian(th, X, w, l2=0.3), H)


def test_subset_losses_match_sklearn_refits(data):
    X, y, Xe, ye = data
    M = sample_subsets(4, 150, 0.5, seed=7)
    F = subset_losses(X, y, M, Xe, ye, l2=0.8, chunk=3)
    for j in range(4):
        p = 1 / (1 + np.exp(-Xe @ sk_fit(X[M[j]], y[M[j]], None, 0.8)))
        np.testing.assert_allclose(F[j], -(ye * np.log(p) + (1 - ye) * np.log(1 - p)), rtol=1e-5)


def test_influence_is_the_derivative_of_retraining(data):
    X, y, Xe, ye = data
    th = logistic_fit(X, y, l2=0.8)
    I = influence_matrix(th, X, y, Xe, ye, l2=0.8)
    eps = 1e-4
    for i in (3, 77):
        wp, wm = np.ones(150), np.ones(150)
        wp[i] += eps
        wm[i] -= eps
        lp = logistic_losses(logistic_fit(X, y, wp, l2=0.8), Xe, ye).numpy()
        lm = logistic_losses(logistic_fit(X, y, wm, l2=0.8), Xe, ye).numpy()
        np.testing.assert_allclose(I[i], (lp - lm) / (2 * eps), rtol=1e-4, atol=1e-9)


def test_influence_of_a_replaced_point(data):
    """Eq. (9): move weight eps from point i to a replacement x' (a zeroed feature); first order in eps."""
    X, y, Xe, ye = data
    th = logistic_fit(X, y, l2=0.8)
    H = logistic_hessian(th, X, None, 0.8)
    xr = X[5] * np.r_[1, 0, 1, 1, 1]
    dg = logistic_grads(th, xr[None], y[5:6])[0] - logistic_grads(th, X[5:6], y[5:6])[0]
    pred = influence_of_change(th, H, dg[None], Xe, ye)[0]
    eps = 1e-4
    X2, y2 = np.r_[X, xr[None]], np.r_[y, y[5]]
    w = np.r_[np.ones(150), eps]
    w[5] -= eps
    fd = (logistic_losses(logistic_fit(X2, y2, w, l2=0.8), Xe, ye) - logistic_losses(th, Xe, ye)).numpy() / eps
    np.testing.assert_allclose(pred, fd, rtol=1e-3, atol=1e-8)


def test_linear_datamodel_recovers_additive_map():
    Phi = sample_subsets(400, 15, 0.5, seed=8).astype(float)
    beta = np.linspace(-1, 1, 15)
    Y = np.c_[Phi @ beta + 2.0, Phi @ (2 * beta)]
    dm = linear_datamodel(Phi, Y)
    np.testing.assert_allclose(dm.coef_, np.stack([beta, 2 * beta]), atol=0.05)
    np.testing.assert_allclose(Ridge(alpha=dm.alpha_).fit(Phi, Y).coef_, dm.coef_, atol=1e-8)


def _trak_by_hand(thetas, X, y, Xe, ye):
    s, se = 2 * y - 1, 2 * ye - 1
    out, Q = 0, 0
    for th in thetas:
        Phi, Phie = s[:, None] * X, se[:, None] * Xe                    # gradients of the margin +-theta^T x
        out = out + Phie @ np.linalg.solve(Phi.T @ Phi, Phi.T) / len(thetas)
        Q = Q + (1 - 1 / (1 + np.exp(-s * (X @ th)))) / len(thetas)
    return out.T * Q[:, None]


def test_trak_scores_follow_the_formula(data):
    X, y, Xe, ye = data
    M = sample_subsets(3, 150, 0.5, seed=9).astype(float)
    th = logistic_fit(X, y, M, l2=0.8).numpy()
    one = trak_scores(X, y, Xe, ye, th[:1])
    ref = _trak_by_hand(th[:1], X, y, Xe, ye)
    c = (one.ravel() @ ref.ravel()) / (ref.ravel() @ ref.ravel())
    assert c > 0
    np.testing.assert_allclose(one, c * ref, rtol=1e-3, atol=1e-5 * np.abs(one).max())
    ens = trak_scores(X, y, Xe, ye, th)
    assert ens.shape == (150, 9)
    assert np.corrcoef(ens.ravel(), _trak_by_hand(th, X, y, Xe, ye).ravel())[0, 1] > 0.999


def test_spearman_and_lds_match_scipy():
    r = np.random.default_rng(10)
    P = r.integers(0, 4, size=(25, 7)).astype(float)                    # ties
    A = P + r.normal(size=(25, 7))
    A[:, 1] = 3.0                                                      # constant outcome
    P[:, 4] = -1.0                                                     # constant prediction
    rho = spearman_columns(P, A)
    assert np.isnan(rho[1]) and np.isnan(rho[4])
    for t in (0, 2, 3, 5, 6):
        assert math.isclose(rho[t], stats.spearmanr(P[:, t], A[:, t]).statistic, rel_tol=1e-12)
    ref = np.mean([stats.spearmanr(P[:, t], A[:, t]).statistic for t in (0, 2, 3, 5, 6)])
    assert math.isclose(lds(P, A), ref, rel_tol=1e-12)
    assert math.isclose(lds(P ** 3 + 5, A), lds(P, A), rel_tol=1e-12)         # ranks only
    assert math.isclose(lds(P[:, 0], A[:, 0]), rho[0])                         # 1-D input: one column
    assert np.isnan(lds(np.ones((4, 2)), A[:4, :2]))
    with pytest.raises(ValueError, match="same"):
        lds(P, A[:, :3])


def test_additive_predictions():
    W = sample_subsets(6, 5, 0.5, seed=11)
    S = np.random.default_rng(12).normal(size=(5, 3))
    np.testing.assert_allclose(additive_predictions(S, W), np.array([[S[w, t].sum() for t in range(3)] for w in W]))


def test_per_example_grads_against_a_loop_and_the_closed_form(data):
    from paper_suite.tda import per_example_grads
    X, y, _, _ = data
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2)).double()
    pars = {k: v.detach() for k, v in net.named_parameters()}
    one = lambda p, x, t: torch.nn.functional.cross_entropy(torch.func.functional_call(net, p, (x[None],)), t[None])
    xb, tb = torch.as_tensor(X[:8]), torch.as_tensor(y[:8]).long()
    g = per_example_grads(one, pars, xb, tb)
    assert set(g) == set(pars) and g["0.weight"].shape == (8, 3, 5)
    for i in range(8):
        ref = torch.autograd.grad(torch.nn.functional.cross_entropy(net(xb[i:i + 1]), tb[i:i + 1]), list(net.parameters()))
        for k, r in zip(pars, ref):
            assert torch.allclose(g[k][i], r)
    th = torch.as_tensor(np.random.default_rng(9).normal(size=5))
    lg = per_example_grads(lambda p, x, t: logistic_losses(p["t"], x[None], t[None])[0], {"t": th},
                           torch.as_tensor(X), torch.as_tensor(y))["t"]
    assert torch.allclose(lg, logistic_grads(th, X, y))
