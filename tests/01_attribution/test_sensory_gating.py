"""paper_suite.attribution.sensory_gating against references that share none of its code: torch's own BCE and
KL, brute-force linear scans, captum's IntegratedGradients, and properties of the synthetic ECG."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paper_suite.attribution.sensory_gating import (SS_METHODS, Classifier, Gate, calibrate, distillation_loss,
                                                    ema_update, fjepa_loss, gate_loss, gated, is_sufficient,
                                                    label_split, linear_scan_k, make_ecg, sufficient_masks,
                                                    train_teacher)


def test_fjepa_loss_is_two_minus_two_cos_and_stops_the_target_gradient():
    torch.manual_seed(0)
    p, t = torch.randn(7, 5, requires_grad=True), torch.randn(7, 5, requires_grad=True)
    loss = fjepa_loss(p, t)
    ref = np.mean([2 - 2 * np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b)
                   for a, b in zip(p.detach().numpy(), t.detach().numpy())])
    assert abs(loss.item() - ref) < 1e-5
    loss.backward()
    assert t.grad is None and p.grad.abs().sum() > 0
    assert fjepa_loss(2.0 * t.detach(), t.detach()).item() < 1e-6                    # scale-invariant
    assert abs(fjepa_loss(-t.detach(), t.detach()).item() - 4.0) < 1e-5             # antipodal: 2 - 2(-1)


def test_ema_update_is_a_convex_combination():
    a, b = Classifier(1, 2, 4), Classifier(1, 2, 4)
    before = [p.detach().clone() for p in a.parameters()]
    ema_update(a, b, m=0.75)
    for pa, p0, pb in zip(a.parameters(), before, b.parameters()):
        assert torch.allclose(pa, 0.75 * p0 + 0.25 * pb)


def _linear_model(seed=0, D=24, C=3):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(C, D, generator=g)
    return (lambda z: F.softmax(z.reshape(len(z), -1) @ W.T, -1)), W


def test_sufficient_masks_are_sufficient_with_k_minus_one_not():
    pp, W = _linear_model()
    torch.manual_seed(1)
    x = torch.randn(30, 1, 24)
    att = torch.randn(30, 1, 24)                                   # an arbitrary (non-monotone) order
    m, k = sufficient_masks(pp, x, torch.zeros(1), att, kappa=0.9, return_k=True)
    assert m.dtype == torch.bool and m.shape == x.shape and (m.reshape(30, -1).sum(1) == k).all()
    assert is_sufficient(pp, x, torch.zeros(1), m, kappa=0.9).all()
    # brute force: the mask of k - 1 top features is not sufficient (k - 1 = 0 counts as insufficient)
    order = att.reshape(30, -1).argsort(dim=1, descending=True)
    for b in range(30):
        if k[b] > 1:
            prev = torch.zeros(24, dtype=torch.bool)
            prev[order[b, :k[b] - 1]] = True
            assert not is_sufficient(pp, x[b:b + 1], torch.zeros(1), prev.view(1, 1, 24))[0]
        kept = torch.zeros(24, dtype=torch.bool)
        kept[order[b, :k[b]]] = True
        assert torch.equal(kept, m[b, 0])
    # the linear scan gives the global minimum: never above the binary search
    assert (linear_scan_k(pp, x, torch.zeros(1), att) <= k).all()


def test_binary_search_equals_linear_scan_when_sufficiency_is_monotone():
    # one feature class-0 evidence, sorted by that evidence, with kappa -> 0 and two classes: monotone in k
    W = torch.tensor([[1.0] * 10, [0.0] * 10])
    pp = lambda z: F.softmax(z.reshape(len(z), -1) @ W.T, -1)
    x = torch.rand(12, 1, 10) * 0.5 + torch.linspace(-0.4, 0.4, 12).view(-1, 1, 1)
    x = x[pp(x)[:, 0] > 0.5]
    m, k = sufficient_masks(pp, x, torch.zeros(1), x, kappa=0.0, return_k=True)
    assert torch.equal(k, linear_scan_k(pp, x, torch.zeros(1), x, kappa=0.0))


def test_gate_loss_matches_torch_weighted_bce():
    torch.manual_seed(2)
    s, m = torch.randn(3, 2, 40), torch.rand(3, 2, 40) < 0.3
    rho = m.float().mean()
    w = torch.where(m, (1 - rho) / rho, torch.ones(()))
    ref = F.binary_cross_entropy(torch.sigmoid(s).double(), m.double(), weight=w.double())
    assert abs(gate_loss(s, m).item() - ref.item()) < 1e-5
    assert Gate(2)(s).shape == s.shape


def test_distillation_loss_matches_scipy_kl():
    from scipy.special import softmax
    from scipy.stats import entropy
    torch.manual_seed(3)
    zs, zt = torch.randn(5, 4), torch.randn(5, 4)
    T = 3.0
    ref = T * T * np.mean([entropy(softmax(a / T), softmax(b / T)) for a, b in zip(zt.numpy(), zs.numpy())])
    assert abs(distillation_loss(zs, zt, T).item() - ref) < 1e-5
    zs = zs.requires_grad_(True)
    distillation_loss(zs, zt.requires_grad_(True), T).backward()
    assert zt.grad is None


def test_toolkit_ig_matches_captum_on_the_classifier():
    from captum.attr import IntegratedGradients
    from paper_suite.attrib import integrated_gradients
    torch.manual_seed(4)
    net = Classifier(1, 3, 8).eval()
    x = torch.randn(3, 1, 30)
    tgt = net(x).argmax(-1)
    ours = integrated_gradients(net, x, tgt, torch.zeros_like(x), steps=200)
    ref = IntegratedGradients(lambda z: F.log_softmax(net(z), -1)).attribute(x, baselines=0.0, target=tgt, n_steps=200)
    assert torch.allclose(ours, ref.float(), atol=2e-3)


def test_ecg_windows_and_classes():
    X, y, W = make_ecg(600, seed=1)
    assert X.shape == (600, 1, 128) and W.sum((1, 2)).tolist() == [34] * 600
    # the P wave only in class 0: the mean inside the P window (first window run) is higher for class 0
    p_mean = np.array([X[i, 0][W[i, 0]][:13].mean() for i in range(600)])
    assert p_mean[y == 0].mean() > p_mean[y == 2].mean() + 0.1
    assert np.array_equal(make_ecg(10, seed=1)[0], make_ecg(10, seed=1)[0])


def test_label_split_and_calibration_and_bad_method():
    import pandas as pd
    y = np.repeat([0, 1, 2], 20)
    li = label_split(y, 0.1, seed=0)
    assert len(li) == 6 and set(y[li]) == {0, 1, 2}
    sw = pd.DataFrame({"tau": [0.1, 0.5, 0.9], "keep": [0.8, 0.3, 0.05], "fidelity": [1.0, 0.98, 0.6]})
    assert calibrate(sw, gamma=0.5) == 0.5 and calibrate(sw, target_keep=0.1) == 0.9
    x = torch.ones(1, 1, 3)
    assert gated(x, torch.tensor([[[True, False, True]]])).tolist() == [[[1.0, 0.0, 1.0]]]
    with pytest.raises(ValueError, match="allowed: supervised"):
        train_teacher(x, torch.zeros(1, dtype=torch.long), x, 2, method="mixmatch")
    assert "fjepa" in SS_METHODS
