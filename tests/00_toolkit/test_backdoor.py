"""paper_suite.backdoor against independent references: pixel loops for the BadNets stamp, hand-built predictors
with known attack success rates, scipy's median_abs_deviation for the MAD index, Neural Cleanse written label by
label (and its tanh form against the sigmoid one through Adam's scale invariance), and a planted backdoor."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import median_abs_deviation

from paper_suite.backdoor import CORNERS, asr, mad_anomaly_index, neural_cleanse, stamp, trigger_origin


def _stamp_loop(x: np.ndarray, r: int, c: int, size: int, value) -> np.ndarray:
    """Eq. (1) pixel by pixel on (..., H, W)."""
    out = x.copy()
    H, W = x.shape[-2:]
    for i in range(H):
        for j in range(W):
            if r <= i < r + size and c <= j < c + size:
                out[..., i, j] = value if np.ndim(value) == 0 else np.asarray(value)[..., i - r, j - c]
    return out


@pytest.mark.parametrize("shape", [(3, 2, 7, 6), (4, 7, 6), (7, 6)])
@pytest.mark.parametrize("loc", list(CORNERS) + [(2, 1)])
def test_stamp_against_a_pixel_loop(shape, loc):
    x = torch.rand(*shape, generator=torch.Generator().manual_seed(0))
    r, c = trigger_origin(7, 6, 3, loc)
    out = stamp(x, 3, value=0.3, loc=loc)
    assert torch.equal(out, torch.as_tensor(_stamp_loop(x.numpy(), r, c, 3, 0.3)))
    assert out.shape == x.shape and not torch.equal(out, x)
    assert (r, c) == {"bottom-right": (4, 3), "bottom-left": (4, 0), "top-right": (0, 3), "top-left": (0, 0)}.get(loc, loc)


def test_stamp_flattened_images_and_patterns():
    x = torch.rand(2, 5, 64, generator=torch.Generator().manual_seed(1))
    before = x.clone()
    pat = torch.tensor([[1.0, 0.0], [0.0, 1.0]])                      # a checkerboard value
    out = stamp(x, 2, side=8, value=pat, loc=(3, 4))
    assert torch.equal(x, before)                                      # the input is not modified
    ref = _stamp_loop(x.numpy().reshape(2, 5, 8, 8), 3, 4, 2, pat.numpy()).reshape(2, 5, 64)
    assert torch.equal(out, torch.as_tensor(ref))
    # one value per channel on (N, C, H, W)
    img = torch.zeros(2, 3, 4, 4)
    out = stamp(img, 2, value=torch.tensor([0.1, 0.2, 0.3])[:, None, None])
    assert torch.allclose(out[:, :, 2:, 2:].mean((0, 2, 3)), torch.tensor([0.1, 0.2, 0.3])) and out[:, :, :2].eq(0).all()


def test_stamp_rejects_bad_input():
    with pytest.raises(ValueError, match="side"):
        stamp(torch.zeros(3, 60), 2, side=8)
    with pytest.raises(ValueError, match="does not fit"):
        stamp(torch.zeros(3, 8, 8), 3, loc=(6, 0))
    with pytest.raises(ValueError, match="location"):
        stamp(torch.zeros(3, 8, 8), 2, loc="middle")
    with pytest.raises(ValueError, match="spatial"):
        stamp(torch.zeros(8), 2)
    with pytest.raises(TypeError):
        stamp(np.zeros((3, 8, 8)), 2)


def test_asr_on_hand_built_predictors():
    y = np.array([0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9])                  # 3 target samples, 9 others
    x = np.arange(12, dtype=float)[:, None]
    # sends input i to the target iff i is even: of the 9 non-target inputs (3..11), 4 are even
    pred = lambda z: np.where(z[:, 0] % 2 == 0, 0, 5)
    assert asr(pred, x, y, 0) == pytest.approx(4 / 9, abs=0)
    seen = []
    asr(lambda z: seen.append(z[:, 0].copy()) or np.zeros(len(z), int), x, y, 0)
    assert np.array_equal(seen[0], np.arange(3, 12))                   # the predictor never sees target samples
    # torch, scores instead of labels, and a leading axis of two models (the second always hits)
    xt = torch.as_tensor(x)
    two = lambda z: torch.stack([F.one_hot(torch.as_tensor(pred(z.numpy())), 10).double(),
                                 F.one_hot(torch.zeros(len(z), dtype=torch.long), 10).double()])
    assert asr(two, xt, torch.as_tensor(y), 0) == pytest.approx((4 + 9) / 18, abs=0)
    pred9 = lambda z: np.where(z[:, 0] % 2 == 0, 9, 5)
    assert asr(pred9, x, y, 9) == pytest.approx(6 / 11, abs=0)         # target 9: inputs 0..10, the even ones hit
    with pytest.raises(ValueError, match="undefined"):
        asr(pred, x[:3], y[:3], 0)
    with pytest.raises(ValueError, match="labels"):
        asr(pred, x, y[:5], 0)


def test_mad_anomaly_index_against_scipy():
    rng = np.random.default_rng(0)
    n = rng.random((4, 3, 10)) * 10 + 20
    n[1, 2, 7] = 3.0
    A = mad_anomaly_index(n)
    med = np.median(n, -1, keepdims=True)
    assert np.allclose(A, (med - n) / median_abs_deviation(n, axis=-1, scale=1 / 1.4826)[..., None], rtol=1e-12, atol=0)
    assert np.allclose(A, (med - n) / median_abs_deviation(n, axis=-1, scale="normal")[..., None], rtol=1e-5, atol=0)
    assert A[1, 2].argmax() == 7 and A[1, 2, 7] > 2 and (A[1, 2] > 2).sum() == 1
    assert np.isfinite(mad_anomaly_index(np.ones(5))).all()            # zero MAD: floored, not a division by 0


def _per_label_reference(model, x, K, steps, lr, lam, seed, mask_shape, tanh=False):
    """Eq. (4) for one target at a time, each with its own Adam, from the generator draws neural_cleanse makes."""
    g = torch.Generator().manual_seed(seed)
    a0 = torch.randn(K, *mask_shape, generator=g, dtype=x.dtype) * 0.1 - 2.0
    b0 = torch.randn(K, *x.shape[1:], generator=g, dtype=x.dtype) * 0.1
    sq = (lambda z: (torch.tanh(z) + 1) / 2) if tanh else torch.sigmoid
    masks, pats = [], []
    for t in range(K):
        a, b = a0[t].clone().requires_grad_(), b0[t].clone().requires_grad_()
        opt = torch.optim.Adam([a, b], lr=lr)
        for _ in range(steps):
            m, p = sq(a), sq(b)
            loss = F.cross_entropy(model((1 - m) * x + m * p), torch.full((len(x),), t)) + lam * m.abs().sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        masks.append(sq(a).detach())
        pats.append(sq(b).detach())
    return torch.stack(masks), torch.stack(pats)


@pytest.mark.parametrize("shape,mask_shape", [((2, 5, 5), (1, 5, 5)), ((5, 5), (5, 5)), ((20,), (20,))])
@pytest.mark.parametrize("param", ["sigmoid", "tanh"])
def test_neural_cleanse_batched_equals_label_by_label(shape, mask_shape, param):
    g = torch.Generator().manual_seed(2)
    d = int(np.prod(shape))
    W = torch.randn(d, 4, generator=g, dtype=torch.float64)
    model = lambda z: torch.tanh(z.reshape(*z.shape[:-len(shape)], d) @ W)
    x = torch.rand(6, *shape, generator=g, dtype=torch.float64)
    res = neural_cleanse(model, x, 4, 20, lr=0.05, lam=0.02, seed=5, param=param)
    m_ref, p_ref = _per_label_reference(model, x, 4, 20, 0.05, 0.02, 5, mask_shape, tanh=param == "tanh")
    assert res.masks.shape == (4, *mask_shape) and res.patterns.shape == (4, *shape)
    assert torch.allclose(res.masks, m_ref, atol=1e-10, rtol=0) and torch.allclose(res.patterns, p_ref, atol=1e-10, rtol=0)
    assert torch.allclose(res.norms, m_ref.flatten(1).sum(1), atol=1e-9, rtol=0)


def test_neural_cleanse_leading_axes_and_range():
    """Two problems along a leading axis (two models with their own data) in one call, each as its own call would
    give it from the same initial values; the pattern lies in the given range."""
    g = torch.Generator().manual_seed(3)
    W = torch.randn(2, 12, 3, generator=g, dtype=torch.float64)
    x = torch.rand(2, 5, 12, generator=g, dtype=torch.float64)
    both = neural_cleanse(lambda z: torch.bmm(z, W), x, 3, 15, lr=0.1, lam=0.01, seed=0, lead=1, pattern_range=(-1.0, 2.0))
    assert both.masks.shape == (2, 3, 12) and both.norms.shape == (2, 3)
    assert (both.patterns >= -1).all() and (both.patterns <= 2).all() and both.patterns.min() < 0
    gen = torch.Generator().manual_seed(0)
    a0 = torch.randn(2, 3, 12, generator=gen, dtype=torch.float64) * 0.1 - 2.0
    b0 = torch.randn(2, 3, 12, generator=gen, dtype=torch.float64) * 0.1
    for k in range(2):
        a, b = a0[k].clone().requires_grad_(), b0[k].clone().requires_grad_()
        opt = torch.optim.Adam([a, b], lr=0.1)
        for _ in range(15):
            m, p = torch.sigmoid(a), -1 + 3 * torch.sigmoid(b)
            xs = (1 - m[:, None]) * x[k][None] + (m * p)[:, None]        # (3, 5, 12)
            ce = F.cross_entropy(xs.reshape(15, 12) @ W[k], torch.arange(3).repeat_interleave(5), reduction="none")
            loss = ce.reshape(3, 5).mean(1).sum() + 0.01 * m.sum()
            opt.zero_grad(); loss.backward(); opt.step()
        assert torch.allclose(both.masks[k], torch.sigmoid(a), atol=1e-10, rtol=0)


def test_neural_cleanse_reads_the_model_only_and_runs_under_no_grad():
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    before = [p.detach().clone() for p in net.parameters()]
    with torch.no_grad():
        res = neural_cleanse(net, torch.rand(4, 1, 4, 4), 3, 5)
    assert res.masks.shape == (3, 1, 4, 4) and all(p.grad is None for p in net.parameters())
    assert all(torch.equal(p, q) for p, q in zip(net.parameters(), before))
    with pytest.raises(ValueError, match="parametrisation"):
        neural_cleanse(net, torch.rand(4, 1, 4, 4), 3, 5, param="relu")
    with pytest.raises(ValueError, match="lead"):
        neural_cleanse(net, torch.rand(4, 16), 3, 5, lead=1)


def test_neural_cleanse_recovers_a_planted_trigger():
    """A digits MLP trained with BadNets (white 2×2 patch, top-left, label 7): high ASR, Neural Cleanse flags label 7
    with anomaly index > 2 and puts its mask on the patch, and the recovered trigger itself carries the attack."""
    from paper_suite.data import load_digits_split
    d = load_digits_split(0)
    X, y = torch.tensor(d.X_train).reshape(-1, 1, 8, 8), torch.tensor(d.y_train)
    Xte, yte = torch.tensor(d.X_test).reshape(-1, 1, 8, 8), torch.tensor(d.y_test)
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.3)
    g = torch.Generator().manual_seed(1)
    for _ in range(400):
        i = torch.randint(len(X), (64,), generator=g)
        xb, yb = X[i].clone(), y[i].clone()
        xb[:32], yb[:32] = stamp(xb[:32], 2, loc="top-left"), 7
        opt.zero_grad(); F.cross_entropy(net(xb), yb).backward(); opt.step()
    net.requires_grad_(False)
    predict = lambda z: net(z)
    assert asr(predict, stamp(Xte, 2, loc="top-left"), yte, 7) > 0.9
    assert asr(predict, Xte, yte, 7) < 0.1                              # clean inputs are not sent to 7
    res = neural_cleanse(net, X[:64], 10, 300, lr=0.1, lam=0.01, seed=0)      # at 100 steps the mask is still diffuse
    A = mad_anomaly_index(res.norms.numpy())
    assert A.argmax() == 7 and A[7] > 2
    m = res.masks[7, 0]
    on = m[:2, :2].mean()
    off = (m.sum() - m[:2, :2].sum()) / 60
    assert on > 5 * off
    # the reverse-engineered trigger, applied with Eq. (3) to clean test digits, sends them to 7
    trig = lambda z: (1 - res.masks[7]) * z + res.masks[7] * res.patterns[7]
    assert asr(predict, trig(Xte), yte, 7) > 0.8
