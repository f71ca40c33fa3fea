"""paper_suite.attribution.early_exit against independent references: captum's InputXGradient, finite differences,
Euler's identity, brute-force loops over samples, scipy's entropy, scikit-learn's predict, and hand counts."""
import math

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from paper_suite.attribution.early_exit import (MultiExitCNN, ProxyMLP, exit_feature_step, exit_features, exit_macs,
                                               exit_policy, iees, iees_terms, module_macs, oracle_exits,
                                               patience_scores, pfam, proxy_early_exit, tradeoff_auc,
                                               tradeoff_curve, train_multi_exit)


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return MultiExitCNN((4, 6, 6, 8), pool_at=(2,)).double().eval()


def test_pfam_matches_captum_and_shapes(net):
    from captum.attr import InputXGradient
    x = torch.rand(5, 1, 8, 8, dtype=torch.float64)
    t = torch.tensor([0, 3, 9, 2, 2])
    A = pfam(net, x, t)
    assert A.shape == (5, 4, 1, 8, 8)
    for e in range(4):
        ref = InputXGradient(lambda v, e=e: net(v)[e]).attribute(x.clone(), target=t)
        assert torch.allclose(A[:, e], ref, atol=1e-12)


def test_pfam_finite_differences(net):
    x = torch.rand(1, 1, 8, 8, dtype=torch.float64)
    A = pfam(net, x, torch.tensor([4]))
    i = (0, 0, 3, 5)
    h = 1e-6
    xp, xm = x.clone(), x.clone()
    xp[i] += h
    xm[i] -= h
    with torch.no_grad():
        for e in range(4):
            g = (net(xp)[e][0, 4] - net(xm)[e][0, 4]) / (2 * h)
            assert abs(float(x[i] * g) - float(A[0, e][i[1:]])) < 1e-6


def test_pfam_completeness_bias_free():
    torch.manual_seed(1)
    m = MultiExitCNN((4, 6, 6, 8), bias=False, pool_at=(2, 3)).double()
    x = torch.rand(6, 1, 8, 8, dtype=torch.float64)
    t = torch.randint(0, 10, (6,))
    A = pfam(m, x, t)
    with torch.no_grad():
        z = torch.stack([o.gather(1, t.view(-1, 1)).squeeze(1) for o in m(x)], 1)
    assert torch.allclose(A.flatten(2).sum(-1), z, rtol=1e-10, atol=1e-12)
    with torch.no_grad():   # homogeneity itself: z(2x) = 2 z(x)
        assert all(torch.allclose(a, 2 * b) for a, b in zip(m(2 * x), m(x)))


def test_pfam_rejects_single_output():
    lin = torch.nn.Linear(3, 2)
    with pytest.raises(TypeError, match="list or tuple"):
        pfam(lin, torch.rand(2, 3), torch.tensor([0, 1]))


def _iees_loop(probs, maps, w, top_frac):
    B, E = probs.shape[:2]
    out = np.zeros((B, E))
    for b in range(B):
        for e in range(E):
            a = maps[b, e].ravel()
            k = math.ceil(top_frac * a.size)
            tot = np.abs(a).sum()
            S = sorted(np.abs(a), reverse=True)[:k]
            S = sum(S) / tot if tot > 0 else 0.0
            C = 0.0
            if e > 0:
                p_ = maps[b, e - 1].ravel()
                n = np.linalg.norm(a) * np.linalg.norm(p_)
                C = float(a @ p_ / n) if n > 0 else 0.0
            out[b, e] = w[0] * probs[b, e].max() + w[1] * S + w[2] * C
    return out


def test_iees_against_loop_and_tensors():
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(10), size=(7, 4))
    maps = rng.normal(size=(7, 4, 1, 5, 5))
    maps[2, 1] = 0.0
    w = [0.7, -0.4, 1.3]
    ref = _iees_loop(probs, maps, w, 0.1)
    got = iees(probs, maps, w, top_frac=0.1)
    assert got.dtype == np.float64 and got.shape == (7, 4)
    assert np.allclose(got, ref)
    assert np.allclose(iees(torch.as_tensor(probs), torch.as_tensor(maps), torch.tensor(w)), ref)
    T = iees_terms(probs, maps)
    assert T[2, 1, 1] == 0 and T[2, 1, 2] == 0 and T[2, 2, 2] == 0 and (T[:, 0, 2] == 0).all()
    assert (T[:, :, 1] >= 0.1 - 1e-12).sum() == 7 * 4 - 1     # S_e >= top_frac for a non-zero map


def test_iees_bad_input():
    with pytest.raises(ValueError, match="three"):
        iees(np.ones((1, 2, 3)) / 3, np.ones((1, 2, 4)), [1, 2])
    with pytest.raises(ValueError, match="top_frac"):
        iees(np.ones((1, 2, 3)) / 3, np.ones((1, 2, 4)), [1, 2, 3], top_frac=0)
    with pytest.raises(ValueError, match="same B, E"):
        iees(np.ones((1, 2, 3)) / 3, np.ones((1, 3, 4)), [1, 2, 3])


def test_exit_policy_against_loop():
    rng = np.random.default_rng(2)
    s = rng.random((50, 4))
    c = rng.random((50, 4)) < 0.6
    m = np.array([1.0, 2.5, 4.0, 7.0])
    for tau in (-np.inf, 0.3, 0.8, 0.99, np.inf):
        ex, acc, macs = exit_policy(s, c, m, tau)
        ref = [next((e for e in range(4) if s[b, e] >= tau), 3) for b in range(50)]
        assert list(ex) == ref
        assert np.isclose(acc, np.mean([c[b, ref[b]] for b in range(50)]))
        assert np.isclose(macs, np.mean(m[ref]))
    assert exit_policy(s, c, m, -np.inf)[2] == 1.0 and exit_policy(s, c, m, np.inf)[2] == 7.0
    with pytest.raises(ValueError, match="cum_macs"):
        exit_policy(s, c, m[:3], 0.5)


def test_tradeoff_auc_step_function():
    # points (0.2, 0.5), (0.6, 0.8), (1.0, 0.7): best within budget is 0.5 on [0.2, 0.6), 0.8 after
    a = tradeoff_auc([0.2, 0.6, 1.0], [0.5, 0.8, 0.7], 0.2, 1.0, n=80001)
    assert abs(a - (0.5 * 0.4 + 0.8 * 0.4) / 0.8) < 1e-4
    with pytest.raises(ValueError, match="lowest budget"):
        tradeoff_auc([0.5, 1.0], [0.5, 0.8], 0.2, 1.0)
    cur = tradeoff_curve(np.array([[0.9, 0.1]]), np.array([[True, False]]), [1.0, 2.0], [0.5, 0.95])
    assert np.allclose(cur, [[0.5, 1.0, 1.0], [0.95, 0.0, 2.0]])


def test_patience_and_oracle():
    assert np.array_equal(patience_scores([[3, 3, 3, 1], [1, 2, 2, 2]]), [[1, 2, 3, 1], [1, 1, 2, 3]])
    assert list(oracle_exits([[0, 1, 1], [0, 0, 0], [1, 0, 0]])) == [1, 2, 0]


def test_exit_features_against_scipy():
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(10), size=(6, 4))
    f = exit_features(p)
    assert f.shape == (6, 4, 5 + 4)
    assert np.allclose(f[..., 0], p.max(-1))
    srt = np.sort(p, -1)
    assert np.allclose(f[..., 1], srt[..., -1] - srt[..., -2])
    assert np.allclose(f[..., 2], stats.entropy(p, axis=-1))
    pred = p.argmax(-1)
    assert np.array_equal(f[:, 1:, 3], (pred[:, 1:] == pred[:, :-1]).astype(float)) and (f[:, 0, 3] == 0).all()
    assert np.array_equal(f[..., 4], patience_scores(pred))
    assert np.array_equal(f[..., 5:], np.broadcast_to(np.eye(4), (6, 4, 4)))
    psi, pat = exit_feature_step(p[:, 0], None, None, 0, 4)
    assert np.allclose(psi, f[:, 0]) and (pat == 1).all()


def test_proxy_mlp_equals_sklearn_predict():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 9))
    y = np.sin(X[:, 0]) + X[:, 1] ** 2
    pipe = make_pipeline(StandardScaler(), MLPRegressor(hidden_layer_sizes=(8,), max_iter=300, random_state=0)).fit(X, y)
    px = ProxyMLP(pipe)
    assert np.allclose(px(X), pipe.predict(X), atol=1e-10)
    assert px.macs == 9 + 9 * 8 + 8


def test_macs_by_hand_and_full_depth():
    m = MultiExitCNN((8, 16, 16, 32), pool_at=(2, 3))
    cum, full = exit_macs(m, (1, 8, 8))
    stage = np.array([64 * 8 * 9, 64 * 16 * 8 * 9, 16 * 16 * 16 * 9, 4 * 32 * 16 * 9])
    head = np.array([8, 16, 16, 32]) * 4 * 10
    assert np.array_equal(cum, np.cumsum(stage + head)) and full == stage.sum() + head[-1]
    assert module_macs(torch.nn.Linear(7, 3), torch.zeros(2, 7)) == 21
    x = torch.rand(3, 1, 8, 8)
    with torch.no_grad():
        assert torch.equal(m.full_depth(x), m(x)[-1])


def test_proxy_early_exit_matches_batched_policy():
    torch.manual_seed(5)
    m = MultiExitCNN((4, 6, 6, 8)).eval()
    X = torch.rand(12, 1, 8, 8)
    rng = np.random.default_rng(5)
    pipe = make_pipeline(StandardScaler(), MLPRegressor(hidden_layer_sizes=(4,), max_iter=200, random_state=0)).fit(
        rng.normal(size=(40, 9)), rng.normal(size=40))
    px = ProxyMLP(pipe)
    with torch.no_grad():
        probs = torch.stack([z.softmax(-1) for z in m(X)], 1).numpy()
    s = px(exit_features(probs))
    tau = float(np.median(s[:, :-1]))
    ex, _, _ = exit_policy(s, np.ones_like(s, bool), np.arange(1, 5), tau)
    for i in range(12):
        pred, e = proxy_early_exit(m, px, X[i:i + 1], tau)
        assert e == ex[i] and pred == int(probs[i, e].argmax())


def test_training_lowers_the_exit_losses():
    torch.manual_seed(6)
    X = torch.rand(64, 1, 8, 8)
    y = (X.mean((1, 2, 3)) > X.mean()).long()
    m = MultiExitCNN((4, 4, 4, 4), n_classes=2)
    loss = lambda: float(sum(torch.nn.functional.cross_entropy(z, y) for z in m(X)))
    with torch.no_grad():
        before = loss()
    train_multi_exit(m, X, y, epochs=15, lr=1e-2, batch=16, seed=0)
    with torch.no_grad():
        assert loss() < before
