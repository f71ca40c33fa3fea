"""Unit tests for paper_suite.generative.fm_changenet against references that share none of its code: scipy's quad
for the cue integral, a hand-written Euler loop, scikit-learn's metrics, and brute-force shifts for the warp."""
import numpy as np
import pytest
import torch
from scipy.integrate import quad
from sklearn.metrics import f1_score, jaccard_score, precision_score, recall_score

from paper_suite.generative.fm_changenet import (FCNet, FMChangeNet, change_cue, change_metrics, fm_loss,
                                                 trajectory_consistency, warp)

DT = torch.float64


def _pair(seed=0, shape=(3, 4, 5, 6)):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=DT), torch.randn(*shape, generator=g, dtype=DT)


def test_cue_exact_field_and_quad():
    a, b = _pair()
    assert torch.allclose(change_cue(lambda z, t: b - a, a, b, 5), (b - a).norm(dim=1))
    # v(z, t) = t z: the cue is ∫ t ‖(1 − t)a + t b‖ dt per pixel
    c = change_cue(lambda z, t: t[:, None, None, None] * z, a, b, 200)
    for (i, y, x) in [(0, 0, 0), (2, 3, 5)]:
        ref = quad(lambda s: s * float(((1 - s) * a[i, :, y, x] + s * b[i, :, y, x]).norm()), 0, 1)[0]
        assert abs(float(c[i, y, x]) - ref) < 1e-4
    assert c.shape == (3, 5, 6)
    with pytest.raises(ValueError):
        change_cue(lambda z, t: z, a, b, 0)


def test_cue_midpoint_times():
    a, b = _pair()
    seen = []
    change_cue(lambda z, t: (seen.append(float(t[0])), z)[1], a, b, 4)
    assert np.allclose(seen, [0.125, 0.375, 0.625, 0.875])


def test_trajectory_consistency_hand_euler():
    a, b = _pair(1)
    assert float(trajectory_consistency(lambda z, t: b - a, a, b, 7).abs().max()) < 1e-12
    assert torch.allclose(trajectory_consistency(lambda z, t: torch.zeros_like(z), a, b), torch.ones(3, dtype=DT))
    f = lambda z, t: -z * t[:, None, None, None] + 1.0
    z = a.clone()
    for k in range(5):
        z = z + f(z, torch.full((3,), k / 5, dtype=DT)) / 5
    ref = torch.stack([(z[i] - b[i]).norm() / (b[i] - a[i]).norm() for i in range(3)])
    assert torch.allclose(trajectory_consistency(f, a, b, 5), ref)


def test_metrics_against_sklearn():
    rng = np.random.default_rng(3)
    p, t = rng.random((4, 7, 7)) < 0.4, rng.random((4, 7, 7)) < 0.25
    m = change_metrics(p, t)
    assert m["f1"] == pytest.approx(f1_score(t.ravel(), p.ravel()))
    assert m["iou"] == pytest.approx(jaccard_score(t.ravel(), p.ravel()))
    assert m["precision"] == pytest.approx(precision_score(t.ravel(), p.ravel()))
    assert m["recall"] == pytest.approx(recall_score(t.ravel(), p.ravel()))
    assert m["fpr"] == pytest.approx((p & ~t).sum() / (~t).sum())
    z = change_metrics(np.zeros((2, 3), bool), np.zeros((2, 3), bool))
    assert z == {"f1": 0.0, "iou": 0.0, "precision": 0.0, "recall": 0.0, "fpr": 0.0}
    with pytest.raises(ValueError):
        change_metrics(np.zeros(3, bool), np.zeros(4, bool))


def test_warp_integer_shift():
    f = torch.randn(2, 3, 8, 8, dtype=DT)
    d = torch.zeros(2, 2, 8, 8, dtype=DT); d[:, 1] = 2.0              # y + 2 pixels
    assert torch.allclose(warp(f, d)[:, :, :-2], f[:, :, 2:], atol=1e-10)
    assert torch.allclose(warp(f, torch.zeros_like(d)), f, atol=1e-10)


def test_models_shapes_loss_and_full_config_starts():
    x1, x2 = torch.rand(2, 3, 16, 16), torch.rand(2, 3, 16, 16)
    y = (torch.rand(2, 16, 16) < 0.1).float()
    for chans in [(4, 8), (4, 8, 16)]:                                   # small's two scales and full's three
        m = FMChangeNet(chans, 8, max_shift=4.0)
        out = m(x1, x2, n_cue=3, u=0.3)
        assert out["logits"].shape == (2, 16, 16) and len(out["cues"]) == len(chans)
        loss, terms = fm_loss(out, m, y, lam_flow=1.0, lam_traj=0.5, lam_tv=0.05, lam_delta=0.1, n_traj=2)
        loss.backward()
        assert set(terms) == {"seg", "flow", "traj", "tv", "delta"} and np.isfinite(float(loss))
        assert m.vel[0].inp.weight.grad is not None and m.delta[-1].weight.grad is not None
    for mode in ("ef", "conc", "diff"):
        assert FCNet((4, 8, 16), mode)(x1, x2)["logits"].shape == (2, 16, 16)
    with pytest.raises(ValueError):
        FCNet((4,), "sum")
