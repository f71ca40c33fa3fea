"""paper_suite.attrib against independent references: captum, closed forms, brute-force loops."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from paper_suite.attrib import (ARCHS, BASELINES, LogSoftmax, accuracy, auc, deletion_insertion_curves, gaussian_blur,
                                gaussian_perturbations, infidelity, input_gradients, integrated_gradients,
                                make_baseline, make_classifier, mas_scores, path_integrated_gradients,
                                saliency_order, straight_line_path, target_log_prob, train_classifier)


def _model(arch="cnn", seed=0):
    return make_classifier(arch, 8, 10, width=4, seed=seed).double().eval()


@pytest.mark.parametrize("arch", ["mlp", "cnn"])
@pytest.mark.parametrize("kind", BASELINES)
def test_ig_matches_captum(arch, kind):
    from captum.attr import IntegratedGradients
    m = _model(arch)
    x = torch.rand(3, 1, 8, 8, dtype=torch.float64)
    c = m(x).argmax(1)
    base = make_baseline(kind, x, mean=x.mean(0), sigma=1.0, seed=1)
    S = 16
    ours = integrated_gradients(m, x, c, base, steps=S)
    cap = IntegratedGradients(LogSoftmax(m)).attribute(x, baselines=base, target=c, n_steps=S + 1,
                                                        method="riemann_trapezoid")
    # captum's trapezoid weights are 1/n (halved at the ends): they sum to (n-1)/n = S/(S+1)
    assert torch.allclose(cap * (S + 1) / S, ours, atol=1e-10)


def test_ig_closed_form_single_direction():
    """F = g(w.x) with g(s) = s - softplus(s): IG from 0 is w_i x_i (g(w.x) - g(0)) / (w.x)."""
    w = torch.randn(16, dtype=torch.float64)
    m = nn.Sequential(nn.Flatten(), nn.Linear(16, 2, bias=False)).double()
    with torch.no_grad():
        m[1].weight.copy_(torch.stack([w, torch.zeros_like(w)]))
    x = torch.rand(4, 1, 4, 4, dtype=torch.float64)
    s = x.flatten(1) @ w
    g = lambda v: v - F.softplus(v)
    ref = (w * x.flatten(1)) * ((g(s) - g(torch.zeros_like(s))) / s).unsqueeze(1)
    A = integrated_gradients(m, x, torch.zeros(4, dtype=torch.long), torch.zeros_like(x), steps=400)
    assert torch.allclose(A.flatten(1), ref, atol=1e-5)


def test_path_completeness_on_random_polygon():
    m = _model("mlp")
    x = torch.rand(2, 1, 8, 8, dtype=torch.float64)
    c = m(x).argmax(1)
    corners = [torch.rand_like(x), torch.rand_like(x), x]
    pts = [corners[0]]
    for a, b in zip(corners[:-1], corners[1:]):
        pts += list(straight_line_path(b, a, 200)[1:])
    path = torch.stack(pts)
    A = path_integrated_gradients(m, path, c)
    dF = target_log_prob(m, x, c) - target_log_prob(m, corners[0], c)
    assert torch.allclose(A.flatten(1).sum(1), dF, rtol=1e-3, atol=2e-4)   # ReLU kinks: trapezoid error


def test_input_gradients_finite_differences():
    m = _model("cnn")
    x = torch.rand(1, 1, 8, 8, dtype=torch.float64)
    c = torch.tensor([3])
    g = input_gradients(m, x, c)
    e = torch.zeros_like(x); e[0, 0, 2, 5] = 1e-6
    fd = (target_log_prob(m, x + e, c) - target_log_prob(m, x - e, c)) / 2e-6
    assert torch.isclose(g[0, 0, 2, 5], fd[0], atol=1e-6)


def test_baselines():
    x = torch.rand(2, 1, 8, 8)
    assert torch.equal(make_baseline("black", x), torch.zeros_like(x))
    const = torch.full((1, 1, 8, 8), 0.3)
    assert torch.allclose(gaussian_blur(const, 2.0), const, atol=1e-6)
    u = make_baseline("uniform", x, seed=0)
    assert u.min() >= 0 and u.max() <= 1 and not torch.equal(u, make_baseline("uniform", x, seed=1))
    with pytest.raises(ValueError):
        make_baseline("mean", x)
    with pytest.raises(ValueError):
        make_baseline("nope", x)


def test_auc_is_trapezoid_on_unit_grid():
    r = np.random.default_rng(0).random((3, 17))
    assert np.allclose(auc(r), np.trapezoid(r, np.linspace(0, 1, 17), axis=1))


def _brute_curve(model, x, a, c, sub, mode, step):
    """One image, an explicit loop: move `step` pixels at a time in decreasing |A| (stable order)."""
    s = a.sum(0).abs().flatten().numpy()
    order = sorted(range(s.size), key=lambda i: (-s[i], i))
    cur = (x if mode == "del" else sub).clone().flatten(1)
    fin = (sub if mode == "del" else x).flatten(1)
    out = [F.softmax(model(cur.view(1, *x.shape)), -1)[0, c].item()]
    for k in range(0, s.size, step):
        for i in order[k:k + step]:
            cur[:, i] = fin[:, i]
        out.append(F.softmax(model(cur.view(1, *x.shape)), -1)[0, c].item())
    return np.array(out)


@pytest.mark.parametrize("mode,step", [("del", 1), ("ins", 3)])
def test_deletion_insertion_against_loop(mode, step):
    m = _model("mlp")
    x = torch.rand(2, 1, 8, 8, dtype=torch.float64)
    c = m(x).argmax(1)
    a = torch.randn_like(x)
    sub = gaussian_blur(x, 1.0)
    curves = deletion_insertion_curves(m, x, a, c, sub, mode, step)
    for b in range(2):
        assert np.allclose(curves[b].numpy(), _brute_curve(m, x[b], a[b], c[b].item(), sub[b], mode, step))


def _mas_reference(raw, sal_sorted_fracs, r_x, r_sub, mode):
    """Transcription of the MAS reference's single_run post-processing, in plain NumPy loops."""
    n1 = raw.size
    density = np.zeros(n1)
    density[0] = 1.0 if mode == "del" else 0.0
    for k in range(1, n1):
        density[k] = density[k - 1] + (sal_sorted_fracs[k - 1] if mode == "ins" else -sal_sorted_fracs[k - 1])
    resp = raw.copy()
    run = 1.0 if mode == "del" else 0.0
    for k in range(n1):
        v = np.clip((resp[k] - r_sub) / (r_x - r_sub), 0, 1)
        run = min(run, v) if mode == "del" else max(run, v)
        resp[k] = run
    pen = np.abs(density - resp)
    sc = (resp - pen if mode == "ins" else resp + pen).clip(0, 1)
    sc = (sc - sc.min()) / (sc.max() - sc.min())
    return (sc.sum() - sc[0] / 2 - sc[-1] / 2) / (n1 - 1)


@pytest.mark.parametrize("mode", ["ins", "del"])
def test_mas_against_reference_transcription(mode):
    m = _model("cnn", seed=2)
    x = torch.rand(3, 1, 8, 8, dtype=torch.float64)
    c = m(x).argmax(1)
    a = torch.randn_like(x)
    sub = gaussian_blur(x, 1.0) if mode == "ins" else torch.zeros_like(x)
    out = mas_scores(m, x, a, c, sub, mode, step=1)
    for b in range(3):
        s = a[b].sum(0).abs().flatten().numpy()
        fr = np.sort(s)[::-1] / s.sum()
        with torch.no_grad():
            r_x = F.softmax(m(x[b:b + 1]), -1)[0, c[b]].item()
            r_s = F.softmax(m(sub[b:b + 1]), -1)[0, c[b]].item()
        ref = _mas_reference(out["raw"][b].numpy(), fr, r_x, r_s, mode)
        assert np.isclose(out["mas"][b].item(), ref, atol=1e-10)


@pytest.mark.parametrize("normalize", [True, False])
def test_infidelity_matches_captum(normalize):
    from captum.metrics import infidelity as cap_infidelity
    m = _model("mlp", seed=1)
    x = torch.rand(1, 1, 8, 8, dtype=torch.float64)
    c = m(x).argmax(1)
    a = torch.randn_like(x)
    I = gaussian_perturbations((1, 8, 8), 50, 0.1, seed=4, dtype=torch.float64)

    def perturb(inputs):
        return I, inputs - I

    ref = cap_infidelity(LogSoftmax(m), perturb, x, a, target=c, n_perturb_samples=50, normalize=normalize)
    ours = infidelity(m, x, a, c, I, normalize=normalize, batch=7)   # chunked: 7 perturbations per forward
    assert torch.allclose(ours, ref.to(ours), rtol=1e-6)


def test_saliency_order_is_stable_and_descending():
    a = torch.tensor([[[[1.0, -3.0], [3.0, 0.0]]]])
    assert saliency_order(a).tolist() == [[1, 2, 0, 3]]


def test_classifiers_and_training_are_seeded():
    for arch in ARCHS:
        assert make_classifier(arch, 8, 10, width=4)(torch.rand(2, 1, 8, 8)).shape == (2, 10)
    X = torch.rand(40, 1, 8, 8)
    y = (X.mean((1, 2, 3)) > X.mean()).long()
    m1 = train_classifier(make_classifier("mlp", 8, 2, width=4, seed=0), X, y, epochs=3, seed=0)
    m2 = train_classifier(make_classifier("mlp", 8, 2, width=4, seed=0), X, y, epochs=3, seed=0)
    assert torch.equal(m1(X), m2(X)) and 0 <= accuracy(m1, X, y) <= 1
