"""paper_suite.attribution.quanda against references that share none of its code: torch autograd, scikit-learn's
LogisticRegression and roc_auc_score, scipy's spearmanr, exact leave-one-out retraining, dattri and captum."""
import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from paper_suite.attribution.quanda import (BENCHMARKS, METHODS, Head, build_head, detection_curve_auc, explain,
                                            fit_softmax, group_detection_auc, influence_matrix,
                                            linear_datamodeling_score, loss_grads, make_benchmark, margin_grads,
                                            randomisation_spearman, refit_softmax, representer_values,
                                            self_influence, sgd_checkpoints, softmax_hessian, softmax_losses,
                                            top1_agreement, tracin_scores, trak_scores)
from paper_suite.data import load_digits_split
from paper_suite.tda import sample_subsets

LAM = 0.05


@pytest.fixture(scope="module")
def data():
    d = load_digits_split(seed=2, test_size=0.5)
    X = np.c_[d.X_train[:150, ::4], np.ones(150)]          # 16 pixels + bias
    Xt = np.c_[d.X_test[:15, ::4], np.ones(15)]
    return X, d.y_train[:150], Xt, d.y_test[:15]


@pytest.fixture(scope="module")
def theta(data):
    X, y, _, _ = data
    return fit_softmax(X, y, LAM, 10)


def torch_objective(X, y, lam, w=None):
    X, y = torch.as_tensor(X), torch.as_tensor(y)
    w = torch.ones(len(X), dtype=torch.float64) if w is None else torch.as_tensor(w)
    return lambda t: (w * torch.nn.functional.cross_entropy(X @ t, y, reduction="none")).sum() / len(X) \
        + lam / 2 * (t ** 2).sum()


def test_fit_matches_sklearn(data, theta):
    X, y, _, _ = data
    sk = LogisticRegression(C=1 / (LAM * len(X)), fit_intercept=False, tol=1e-13, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(theta, sk.coef_.T, atol=2e-6)
    with pytest.raises(ValueError, match="lam"):
        fit_softmax(X, y, 0.0)


def test_grads_and_hessian_against_autograd(data):
    X, y, _, _ = data
    th = np.random.default_rng(0).normal(size=(17, 10)) * 0.3
    t = torch.tensor(th, requires_grad=True)
    for i in (0, 7):
        g = torch.autograd.grad(torch.nn.functional.cross_entropy(torch.as_tensor(X[i:i + 1]) @ t,
                                                                  torch.as_tensor(y[i:i + 1])), t)[0]
        np.testing.assert_allclose(loss_grads(th, X[i:i + 1], y[i:i + 1])[0], g.numpy().ravel(), atol=1e-12)
    w = np.random.default_rng(1).random(150) * 2
    H = torch.autograd.functional.hessian(torch_objective(X, y, LAM, w), torch.as_tensor(th)).reshape(170, 170)
    np.testing.assert_allclose(softmax_hessian(th, X, LAM, w), H.numpy(), atol=1e-12)
    np.testing.assert_allclose(softmax_losses(th, X, y), torch.nn.functional.cross_entropy(
        torch.as_tensor(X) @ torch.as_tensor(th), torch.as_tensor(y), reduction="none").numpy(), atol=1e-12)


def test_refit_is_the_weighted_minimiser(data, theta):
    X, y, _, _ = data
    W = np.ones((3, 150))
    W[0, :75] = 0
    W[1, 9] = 0
    W[2] = np.random.default_rng(2).random(150) * 2
    R = refit_softmax(theta, X, y, LAM, W)
    for b in range(3):
        sk = LogisticRegression(C=1 / (LAM * 150), fit_intercept=False, tol=1e-13, max_iter=100_000)
        np.testing.assert_allclose(R[b], sk.fit(X, y, sample_weight=W[b]).coef_.T, atol=2e-6)


def test_influence_matches_leave_one_out(data, theta):
    X, y, Xt, yt = data
    W = np.ones((20, 150))
    W[np.arange(20), np.arange(20)] = 0
    loo = np.stack([softmax_losses(t, Xt, yt) for t in refit_softmax(theta, X, y, LAM, W)]) - softmax_losses(theta, Xt, yt)
    I = influence_matrix(theta, X, y, Xt, yt, LAM)
    assert I.shape == (15, 150)
    r = [np.corrcoef(I[t, :20], loo[:, t])[0, 1] for t in range(15)]
    assert np.mean(r) > 0.95
    np.testing.assert_allclose(I[:, :20], loo.T, atol=0.2 * np.abs(loo).max())      # first order: same size too


def test_influence_by_brute_force_inverse(data, theta):
    X, y, Xt, yt = data
    H = torch.autograd.functional.hessian(torch_objective(X, y, LAM), torch.as_tensor(theta)).reshape(170, 170).numpy()
    ref = loss_grads(theta, Xt, yt) @ np.linalg.inv(H) @ loss_grads(theta, X, y).T / 150
    np.testing.assert_allclose(influence_matrix(theta, X, y, Xt, yt, LAM), ref, rtol=1e-8, atol=1e-14)


def test_tracin_loop_and_checkpoint_errors(data):
    X, y, Xt, yt = data
    cks, lrs = sgd_checkpoints(X, y, LAM, 10, epochs=4, lr=0.3, n_ckpt=2, seed=1)
    assert len(cks) == 2 and lrs == [0.3, 0.3]
    T = tracin_scores(cks, [0.3, 0.1], X, y, Xt, yt)
    for t, i in ((0, 0), (3, 77), (14, 149)):
        ref = sum(lr * np.dot(loss_grads(c, Xt[t:t + 1], yt[t:t + 1])[0], loss_grads(c, X[i:i + 1], y[i:i + 1])[0])
                  for c, lr in zip(cks, [0.3, 0.1]))
        assert np.isclose(T[t, i], ref)
    with pytest.raises(ValueError, match="learning rates"):
        tracin_scores(cks, [0.3], X, y, Xt, yt)


def test_tracin_against_captum_and_dattri(data, theta):
    pytest.importorskip("dattri")
    from captum.influence import TracInCP  # noqa: F401  (imported by the chapter's helper as well)
    X, y, Xt, yt = data
    cks, lrs = sgd_checkpoints(X, y, LAM, 10, epochs=3, lr=0.3, n_ckpt=3, seed=0)
    lin = torch.nn.Linear(17, 10, bias=False).double()
    from torch.utils.data import TensorDataset
    import tempfile, os
    tr = TensorDataset(torch.as_tensor(X), torch.as_tensor(y))
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for k, c in enumerate(cks):
            paths.append(os.path.join(tmp, f"{k}.pt"))
            torch.save({"w": torch.as_tensor(np.ascontiguousarray(c.T)), "lr": lrs[k]}, paths[-1])

        def load(model, p):
            ck = torch.load(p, weights_only=True)
            model.load_state_dict({"weight": ck["w"]})
            return ck["lr"]
        cap = TracInCP(lin, tr, paths, checkpoints_load_func=load, loss_fn=torch.nn.CrossEntropyLoss(reduction="sum"),
                       batch_size=50, sample_wise_grads_per_batch=True)
        ref = cap.influence((torch.as_tensor(Xt), torch.as_tensor(yt))).detach().numpy()
    np.testing.assert_allclose(tracin_scores(cks, lrs, X, y, Xt, yt), ref, rtol=1e-6, atol=1e-10)


def test_influence_against_dattri(data, theta):
    pytest.importorskip("dattri")
    from dattri.algorithm.influence_function import IFAttributorExplicit
    from dattri.task import AttributionTask
    from torch.utils.data import DataLoader, TensorDataset
    X, y, Xt, yt = data
    lin = torch.nn.Linear(17, 10, bias=False).double()

    def loss(params, batch):
        x, t = batch
        return torch.nn.functional.cross_entropy(torch.func.functional_call(lin, params, x).reshape(-1, 10), t.reshape(-1))
    task = AttributionTask(loss_func=loss, model=lin, checkpoints={"weight": torch.as_tensor(np.ascontiguousarray(theta.T))})
    a = IFAttributorExplicit(task=task, device="cpu", regularization=LAM)
    tr = DataLoader(TensorDataset(torch.as_tensor(X), torch.as_tensor(y)), batch_size=150)
    te = DataLoader(TensorDataset(torch.as_tensor(Xt), torch.as_tensor(yt)), batch_size=15)
    a.cache(tr)
    ref = a.attribute(tr, te).T.detach().numpy() / 150
    np.testing.assert_allclose(influence_matrix(theta, X, y, Xt, yt, LAM), ref, rtol=1e-6, atol=1e-8 * np.abs(ref).max())


def test_representer_theorem(data, theta):
    X, y, Xt, _ = data
    R = representer_values(theta, X, y, Xt, LAM)
    assert R.shape == (15, 150, 10)
    np.testing.assert_allclose(R.sum(1), Xt @ theta, atol=1e-8)
    th_bad = theta + 0.1
    assert np.abs(representer_values(th_bad, X, y, Xt, LAM).sum(1) - Xt @ th_bad).max() > 1e-2


def test_margin_grads_and_trak_formula(data, theta):
    X, y, Xt, yt = data
    t = torch.tensor(theta, requires_grad=True)
    for i in (2, 40):
        z = (torch.as_tensor(X[i:i + 1]) @ t)[0]
        others = torch.cat([z[:y[i]], z[y[i] + 1:]])
        g = torch.autograd.grad(z[y[i]] - torch.logsumexp(others, 0), t)[0]
        np.testing.assert_allclose(margin_grads(theta, X[i:i + 1], y[i:i + 1])[0], g.numpy().ravel(), atol=1e-12)
    tau = trak_scores([theta, theta], X, y, Xt, yt, ridge=1e-12)
    G = margin_grads(theta, X, y)
    q = 1 - np.exp(-softmax_losses(theta, X, y))
    ref = margin_grads(theta, Xt, yt) @ np.linalg.pinv(G.T @ G, rcond=1e-10) @ (G * q[:, None]).T
    np.testing.assert_allclose(tau, ref, atol=1e-6 * np.abs(ref).max())


def test_lds_against_scipy_and_dattri():
    r = np.random.default_rng(4)
    A, M, O = r.normal(size=(5, 40)), sample_subsets(30, 40, 0.5, seed=1, fixed_size=True), r.normal(size=(30, 5))
    ref = np.mean([stats.spearmanr(M @ A[t], O[:, t]).statistic for t in range(5)])
    assert np.isclose(linear_datamodeling_score(A, M, O), ref)
    with pytest.raises(ValueError, match="attributions"):
        linear_datamodeling_score(A, M, O.T)
    dattri = pytest.importorskip("dattri.metric")
    d = dattri.lds(torch.as_tensor(A.T), (torch.as_tensor(O), torch.as_tensor(np.stack([np.flatnonzero(m) for m in M]))))[0]
    assert np.isclose(float(d.mean()), ref)


def test_lds_of_a_perfect_and_a_reversed_attribution():
    r = np.random.default_rng(5)
    A, M = r.normal(size=(3, 25)), r.random((40, 25)) < 0.5
    O = (M @ A.T) ** 3                                  # a monotone function of the additive prediction
    assert np.isclose(linear_datamodeling_score(A, M, O), 1.0)
    assert np.isclose(linear_datamodeling_score(-A, M, O), -1.0)


def test_detection_curve_identity_and_chance():
    r = np.random.default_rng(6)
    s, f = r.normal(size=300), r.random(300) < 0.1
    F = f.sum()
    assert np.isclose(detection_curve_auc(s, f), ((300 - F) * roc_auc_score(f, s) + (F + 1) / 2) / 300)
    assert detection_curve_auc(f.astype(float), f) > 0.94      # perfect ranking: 1 - (F - 1) / (2 n)
    chance = [detection_curve_auc(r.normal(size=300), f) for _ in range(200)]
    assert abs(np.mean(chance) - 0.5) < 0.02
    with pytest.raises(ValueError, match="flagged"):
        detection_curve_auc(s, np.zeros(300, bool))


def test_top1_group_and_randomisation_metrics():
    A = np.array([[0.1, 0.9, 0.0], [0.7, 0.2, 0.1]])
    assert top1_agreement(A, np.array([0, 1, 1]), np.array([1, 1])) == 0.5
    assert group_detection_auc(A, np.array([False, True, False])) == pytest.approx((1.0 + 0.5) / 2)   # beats 1 of 2, then 2 of 2
    r = np.random.default_rng(7)
    B = r.normal(size=(4, 50))
    assert randomisation_spearman(B, 2 * B + 1) == pytest.approx(1.0)
    assert randomisation_spearman(B, -B) == pytest.approx(-1.0)


def test_benchmarks_plant_what_they_say():
    d = load_digits_split(seed=0, test_size=0.3)
    b = {k: make_benchmark(k, d.X_train, d.y_train, d.X_test, d.y_test, 40, seed=3) for k in BENCHMARKS}
    g = b["mislabeling"].group
    assert 0.07 < g.mean() < 0.13 and (b["mislabeling"].y_train[g] != d.y_train[g]).all()
    assert (d.y_train[b["shortcut"].group] == 3).all() and (b["shortcut"].X_train[b["shortcut"].group][:, 0] == 1).all()
    assert (b["subclass"].y_train == d.y_train // 2).all() and b["subclass"].n_classes == 5
    assert b["mixed"].group.sum() == 60 and len(b["mixed"].X_train) == len(d.X_train) + 60
    with pytest.raises(ValueError, match="allowed"):
        make_benchmark("imagenet", d.X_train, d.y_train, d.X_test, d.y_test, 5)


def test_explain_interface_shapes_and_self_influence(data):
    X, y, Xt, yt = data
    F, Ft = X[:, :-1], Xt[:, :-1]
    h = build_head(F, y, 10, LAM, epochs=3, lr=0.3, n_ckpt=2, n_ensemble=2, seed=0)
    for m in METHODS:
        A = explain(m, h, Xt, Ft, yt)
        assert A.shape == (15, 150) and np.isfinite(A).all()
        s = self_influence(m, h)
        assert s.shape == (150,)
        if m not in ("Random",):
            full = explain(m, h, h.X, h.Z, h.y)
            np.testing.assert_allclose(s, np.diag(full), rtol=1e-6, atol=1e-12)
    with pytest.raises(ValueError, match="allowed"):
        explain("LiSSA", h, Xt, Ft, yt)
