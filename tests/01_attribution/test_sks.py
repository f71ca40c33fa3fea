"""Tests of paper_suite.attribution.sks against references that share none of its code: brute-force loops,
scikit-learn's rbf_kernel, KernelRidge and LogisticRegression, exact expectations by enumeration, torch autograd,
scipy's spearmanr, and closed forms."""
import itertools
import math

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.kernel_ridge import KernelRidge as SkKernelRidge
from sklearn.linear_model import LogisticRegression
from sklearn.metrics.pairwise import rbf_kernel

from paper_suite.attribution.sks import (ModalData, breast_cancer_modalities, datamodel_features, gated_kernel,
                                         hutchinson_trace, influence_selection_losses, kernelsm_fit, lds,
                                         make_multimodal, modal_features, modality_attribution, modality_removals,
                                         removal_effects, removal_predictions, removal_selections, select_samples,
                                         select_units, selection_losses, sks_fit, structured_kernel,
                                         training_loss_hvp)
from paper_suite.tda import sample_selections


@pytest.fixture(scope="module")
def sel():
    return sample_selections(30, 6, 3, seed=1)


def kernel_loop(z1, m1, z2, m2, gz, gm):
    out = np.empty((len(z1), len(z2)))
    for a in range(len(z1)):
        for b in range(len(z2)):
            dz = sum((int(z1[a, i]) - int(z2[b, i])) ** 2 for i in range(z1.shape[1]))
            dm = sum((int(z1[a, i]) * int(m1[a, i, k]) - int(z2[b, i]) * int(m2[b, i, k])) ** 2
                     for i in range(z1.shape[1]) for k in range(m1.shape[2]))
            out[a, b] = math.exp(-gz * dz - gm * dm)
    return out


def test_structured_kernel_brute_force_and_product_form(sel):
    z, m = sel
    K = structured_kernel(z, m, z[:7], m[:7], 0.2, 0.9)
    assert K.dtype == np.float64 and K.shape == (30, 7)
    np.testing.assert_allclose(K, kernel_loop(z, m, z[:7], m[:7], 0.2, 0.9), rtol=1e-12)
    u = (z[..., None] * m).reshape(30, -1).astype(float)
    np.testing.assert_allclose(K, rbf_kernel(z.astype(float), z[:7].astype(float), gamma=0.2)
                               * rbf_kernel(u, u[:7], gamma=0.9), rtol=1e-12)


def test_structured_kernel_hierarchy_and_psd(sel):
    z, m = sel
    m2 = m.copy()
    m2[z == 0] = 1 - m2[z == 0]                      # modality bits of absent samples do not matter
    np.testing.assert_array_equal(structured_kernel(z, m2, z, m, 0.3, 2.0), structured_kernel(z, m, z, m, 0.3, 2.0))
    m3 = m.copy()
    i = np.argwhere(z == 1)[0]
    m3[i[0], i[1], 0] ^= 1                           # ... but those of a present sample do
    assert not np.array_equal(structured_kernel(z, m3, z, m, 0.3, 2.0), structured_kernel(z, m, z, m, 0.3, 2.0))
    for gz, gm in [(0.01, 0.01), (0.3, 2.0), (2.0, 5.0)]:
        assert np.linalg.eigvalsh(structured_kernel(z, m, z, m, gz, gm)).min() > -1e-10


def test_gated_kernel_counterexample_closed_form():
    z, m = np.array([[1], [1], [0]]), np.array([[[0]], [[1]], [[0]]])
    a, b = math.exp(-2.0), math.exp(-0.1)
    lmin = np.linalg.eigvalsh(gated_kernel(z, m, z, m, 0.1, 2.0)).min()
    assert math.isclose(lmin, (2 + a - math.sqrt(a * a + 8 * b * b)) / 2, rel_tol=1e-10) and lmin < 0
    # the gated form and the structured one agree when every sample participates in both selections
    zz, mm = np.ones((4, 3), int), sample_selections(4, 3, 2, seed=2)[1]
    np.testing.assert_allclose(gated_kernel(zz, mm, zz, mm, 0.4, 0.6), structured_kernel(zz, mm, zz, mm, 0.4, 0.6))


def test_selection_validation(sel):
    z, m = sel
    with pytest.raises(ValueError, match="0/1"):
        structured_kernel(z * 2, m, z, m, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"\(a, N\)"):
        structured_kernel(z, m[:, :4], z, m, 1.0, 1.0)
    with pytest.raises(ValueError, match="rows"):
        sks_fit(z, m, np.ones(5), 1.0, 1.0, 0.1)


def test_sks_fit_matches_sklearn_kernel_ridge(sel):
    z, m = sel
    y = np.random.default_rng(3).normal(size=(30, 4))
    zq, mq = sample_selections(5, 6, 3, seed=4)
    K = kernel_loop(z, m, z, m, 0.2, 0.5)
    ref = SkKernelRidge(alpha=0.07, kernel="precomputed").fit(K, y - y.mean(0))
    pred = sks_fit(z, m, y, 0.2, 0.5, 0.07)(zq, mq)
    np.testing.assert_allclose(pred, ref.predict(kernel_loop(zq, mq, z, m, 0.2, 0.5)) + y.mean(0), rtol=1e-9)
    p1 = sks_fit(z, m, y[:, 2], 0.2, 0.5, 0.07)(zq, mq)
    assert p1.shape == (5,) and np.allclose(p1, pred[:, 2])


def exact_attribution(f, N, K, p_z, p_m):
    """Eq. (9) by enumerating every selection with its probability (tiny N, K)."""
    phi = np.zeros((N, K))
    for bits in itertools.product((0, 1), repeat=N + N * K):
        z = np.array(bits[:N])
        m = np.array(bits[N:]).reshape(N, K)
        pr = np.prod(np.where(z, p_z, 1 - p_z)) * np.prod(np.where(m, p_m, 1 - p_m))
        for i in range(N):
            for k in range(K):
                z1 = z.copy(); z1[i] = 1
                m1, m0 = m.copy(), m.copy()
                m1[i, k], m0[i, k] = 1, 0
                phi[i, k] += pr * (f(z1, m1) - f(z1, m0))
    return phi


def test_modality_attribution_against_enumeration():
    N, K = 2, 2
    f1 = lambda z, m: float(z[0] * m[0, 0] * m[0, 1] + 0.5 * z[1] * m[1, 0] * (1 - z[0] * m[0, 1]))
    predict = lambda Z, M: np.array([f1(zz, mm) for zz, mm in zip(Z, M)])
    ref = exact_attribution(f1, N, K, 0.5, 0.7)
    est = modality_attribution(predict, N, K, n_draws=6000, seed=5)
    np.testing.assert_allclose(est, ref, atol=0.03)
    with pytest.raises(ValueError, match=r"\(B,\)"):
        modality_attribution(lambda Z, M: np.zeros((len(Z), 2)), N, K, n_draws=1)


def test_modality_attribution_is_exact_for_a_linear_surrogate():
    beta = np.random.default_rng(6).normal(size=(5, 3))
    lin = lambda Z, M: (Z[..., None] * M * beta).sum((1, 2)) + Z.sum(1)
    np.testing.assert_allclose(modality_attribution(lin, 5, 3, n_draws=3, seed=7), beta, rtol=1e-12)


def test_lds_reexport_matches_scipy():
    r = np.random.default_rng(8)
    P, A = r.normal(size=(20, 4)), r.normal(size=(20, 4))
    assert math.isclose(lds(P, A), np.mean([stats.spearmanr(P[:, t], A[:, t]).statistic for t in range(4)]),
                        rel_tol=1e-12)


def test_modal_features_and_selection_losses_against_sklearn():
    r = np.random.default_rng(9)
    d = ModalData(r.normal(size=(80, 4)), np.array([0, 0, 1, 2]), (r.random(80) < 0.5).astype(float),
                  -np.ones(80, int), ("a", "b", "c"))
    m = (r.random((80, 3)) < 0.6).astype(float)
    Phi = modal_features(d.x, d.groups, m, interactions=True).numpy()
    xm = d.x * m[:, [0, 0, 1, 2]]
    pairs = [(0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]                  # features of different modalities
    np.testing.assert_allclose(Phi, np.c_[xm, np.stack([xm[:, a] * xm[:, b] for a, b in pairs], 1), m, np.ones(80)])
    z = (r.random(80) < 0.7).astype(float)
    F = selection_losses(d, z[None], m[None], d.x[:6], d.y[:6], l2=0.5, interactions=True)[0]
    w = LogisticRegression(C=2.0, fit_intercept=False, tol=1e-13, max_iter=100_000).fit(Phi, d.y, sample_weight=z).coef_[0]
    Pe = modal_features(d.x[:6], d.groups, np.ones((6, 3)), interactions=True).numpy()
    p = 1 / (1 + np.exp(-Pe @ w))
    np.testing.assert_allclose(F, -(d.y[:6] * np.log(p) + (1 - d.y[:6]) * np.log(1 - p)), rtol=1e-5)


def test_environments():
    e = make_multimodal(20_000, seed=1)
    s1 = e.sub == 1
    assert ((e.x[s1, 2] * e.x[s1, 3] > 0) == (e.y[s1] > 0.5)).mean() > 0.88
    assert abs(((e.x[s1, 2] > 0) == (e.y[s1] > 0.5)).mean() - 0.5) < 0.02
    assert ((e.x[~s1, 0] > 0) == (e.y[~s1] > 0.5)).mean() > 0.75
    tr, va, te = breast_cancer_modalities(200, 100, seed=0)
    assert (len(tr.y), len(va.y), len(te.y)) == (200, 100, 269) and tr.n_modalities == 3
    np.testing.assert_allclose(tr.x.mean(0), 0, atol=1e-12)


def test_influence_and_removal_predictions():
    d = make_multimodal(120, seed=2)
    val = make_multimodal(8, seed=3)
    zr, mr = removal_selections(120, 5)
    assert zr.shape == (720, 120) and (zr[:120] == 1 - np.eye(120)).all() and mr[120 + 7, 1, 2] == 0
    F = selection_losses(d, zr, mr, val.x, val.y, interactions=True)
    full = selection_losses(d, np.ones((1, 120)), np.ones((1, 120, 5)), val.x, val.y, interactions=True)[0]
    I = influence_selection_losses(d, np.r_[np.ones((1, 120)), zr], np.r_[np.ones((1, 120, 5)), mr], val.x, val.y,
                                   interactions=True)
    np.testing.assert_allclose(I[0], full)
    # first order against retraining; one sample of 120 (with product features) is not a small step
    assert np.corrcoef((I[1:] - I[0]).ravel(), (F - full).ravel())[0, 1] > 0.8
    np.testing.assert_allclose(removal_predictions(F - full, zr, mr), F - full)


def test_modality_removals_and_linear_effects():
    z, m = sample_selections(20, 4, 3, seed=10)
    zR, mR = modality_removals(z, m)
    assert zR.shape == (80, 4) and (mR[20 * 3:, :, 2] == 0).all() and (mR[20:40, :, 1] == m[:, :, 1]).all()
    beta = np.random.default_rng(11).normal(size=(4, 3))
    lin = lambda Z, M: (Z[..., None] * M * beta).sum((1, 2))
    np.testing.assert_allclose(removal_effects(lin(zR, mR), 3),
                               [-(z[:, :, None] * m * beta)[:, :, k].sum(1).mean() for k in range(3)])
    np.testing.assert_array_equal(datamodel_features(z, m)[:, :4], z)


def test_hutchinson_mean_and_variance():
    A = np.random.default_rng(12).normal(size=(6, 6))
    H = torch.as_tensor(A + A.T)
    est, se = hutchinson_trace(lambda V: V @ H, 6, n_probes=20_000, seed=1)
    var = 2 * (float((H ** 2).sum()) - float((torch.diagonal(H) ** 2).sum()))        # Eq. (14)
    assert abs(est - float(torch.trace(H))) < 4 * math.sqrt(var / 20_000)
    assert abs(se ** 2 * 20_000 / var - 1) < 0.05
    D = torch.diag(torch.arange(1.0, 7.0, dtype=torch.float64))
    est, se = hutchinson_trace(lambda V: V @ D, 6, n_probes=5)
    assert est == pytest.approx(21.0) and se == pytest.approx(0.0)             # diagonal: zero variance


def test_training_loss_hvp_against_autograd_hessian():
    d = make_multimodal(30, seed=4)
    X = modal_features(d.x, d.groups, np.ones((30, 5)), interactions=True)
    w = (np.random.default_rng(13).random(30) < 0.5).astype(float)
    th = torch.as_tensor(np.random.default_rng(14).normal(size=X.shape[1]) * 0.2)
    y = torch.as_tensor(d.y)
    loss = lambda t: (torch.as_tensor(w) * (torch.nn.functional.softplus(X @ t) - y * (X @ t))).sum() / w.sum()
    H = torch.autograd.functional.hessian(loss, th)
    V = torch.as_tensor(np.random.default_rng(15).normal(size=(4, X.shape[1])))
    assert torch.allclose(training_loss_hvp(th, X, d.y, w)(V), V @ H)


def test_selection_helpers():
    u = np.array([[0.1, 0.9], [0.5, 0.5], [0.2, 0.0]])
    z, m = select_units(u, 3)
    np.testing.assert_array_equal(m, [[0, 1], [1, 1], [0, 0]])      # ties go to the lower index
    np.testing.assert_array_equal(z, [1, 1, 0])
    with pytest.raises(ValueError, match="budget"):
        select_units(u, 7)
    z, m = select_samples(np.array([0.3, 0.1, 0.7]), 5, 2)
    np.testing.assert_array_equal(z, [1, 0, 1])
    assert m.sum() == 4


def test_kernelsm_matches_sklearn():
    z, m = sample_selections(40, 5, 2, seed=16)
    y = np.random.default_rng(17).normal(size=40)
    predict, hp = kernelsm_fit(z, m, y)
    X = np.c_[z, m.reshape(40, -1)].astype(float)
    ref = SkKernelRidge(alpha=hp["lam"], kernel="rbf", gamma=hp["gamma"]).fit(X, y - y.mean())
    zq, mq = sample_selections(6, 5, 2, seed=18)
    np.testing.assert_allclose(predict(zq, mq), ref.predict(np.c_[zq, mq.reshape(6, -1)].astype(float)) + y.mean(),
                               rtol=1e-8)


def test_sks_tune_picks_the_brute_force_leave_one_out_minimum():
    from scipy.spatial.distance import pdist

    from paper_suite.attribution.sks import sks_tune
    z, m = sample_selections(25, 5, 2, seed=19)
    y = np.random.default_rng(20).normal(size=(25, 2)) + z[:, :1] * 2.0
    yc = y - y.mean(0)
    u = (z[..., None] * m).reshape(25, -1).astype(float)
    g_z, g_m = 1 / (2 * np.median(pdist(z.astype(float))) ** 2), 1 / (2 * np.median(pdist(u)) ** 2)
    grid = [(cz, cm, lam) for cz in (0.1, 1.0) for cm in (0.5, 2.0) for lam in (1e-3, 1e-1)]
    errs = []
    for cz, cm, lam in grid:
        K = kernel_loop(z, m, z, m, cz * g_z, cm * g_m)
        e = 0.0
        for j in range(25):
            keep = np.arange(25) != j
            fit = SkKernelRidge(alpha=lam, kernel="precomputed").fit(K[np.ix_(keep, keep)], yc[keep])
            e += ((fit.predict(K[j:j + 1, keep]) - yc[j]) ** 2).sum()
        errs.append(e)
    cz, cm, lam = grid[int(np.argmin(errs))]
    hp = sks_tune(z, m, y, scales_z=(0.1, 1.0), scales_m=(0.5, 2.0), lams=(1e-3, 1e-1))
    assert (hp["scale_z"], hp["scale_m"], hp["lam"]) == (cz, cm, lam)
    assert hp["gamma_z"] == pytest.approx(cz * g_z) and hp["loo_mse"] == pytest.approx(min(errs) / yc.size)
