"""paper_suite.applications.fits against references that share no code with it: scipy.signal (freqz, group_delay,
lfilter), numpy's polynomial roots, snnTorch's Leaky neuron, finite differences (gradcheck) and brute-force spectra."""
import math

import numpy as np
import pytest
import torch
from scipy import signal

from paper_suite.applications.fits import (NEURONS, WaveSNN, accuracy, allpass_group_delay, allpass_impulse,
                                           causal_conv, fits_response, formant_templates, formants, fs_coefficients,
                                           lif_impulse, order_task, resonator_impulse, tones, train_snn,
                                           ts_coefficient)

GRID = 2**18


@pytest.mark.parametrize("w0", [0.03, 0.5, 1.2, 2.0, 2.9])
@pytest.mark.parametrize("r", [0.2, 0.7, 0.99])
def test_resonator_peaks_at_target_with_unit_gain(w0, r):
    a1, a2, g = (float(v) for v in fs_coefficients(w0, r))
    w, H = signal.freqz([g], [1.0, -a1, -a2], worN=GRID)
    _, H0 = signal.freqz([g], [1.0, -a1, -a2], worN=[w0])
    assert abs(w[np.abs(H).argmax()] - w0) <= math.pi / GRID
    assert abs(abs(H0[0]) - 1) < 1e-10                  # unit gain at omega*, Eq. (7)
    assert np.abs(H).max() <= abs(H0[0]) + 1e-12        # and no grid frequency does better: omega* is the maximiser
    # the poles are r e^{+-i theta} with cos(theta) = 2 r cos(w0) / (1 + r^2), Eq. (6)
    poles = np.roots([1.0, -a1, -a2])
    np.testing.assert_allclose(np.abs(poles), r, rtol=1e-10)
    np.testing.assert_allclose(np.cos(np.abs(np.angle(poles))), 2 * r * math.cos(w0) / (1 + r * r), atol=1e-10)


def test_fs_coefficients_elementwise_and_validated():
    w = torch.tensor([[0.3, 1.0], [2.0, 3.0]], dtype=torch.float64)
    r = torch.tensor([[0.5, 0.9], [0.8, 0.6]], dtype=torch.float64)
    a1, a2, g = fs_coefficients(w, r)
    assert a1.shape == a2.shape == g.shape == (2, 2)
    for i in range(2):
        for j in range(2):
            b1, b2, h = fs_coefficients(float(w[i, j]), float(r[i, j]))
            assert torch.allclose(torch.stack([a1[i, j], a2[i, j], g[i, j]]), torch.stack([b1, b2, h]))
    with pytest.raises(ValueError, match="omega_star"):
        fs_coefficients(0.0, 0.5)
    with pytest.raises(ValueError, match="omega_star"):
        fs_coefficients(math.pi, 0.5)
    with pytest.raises(ValueError, match=r"\br\b"):
        fs_coefficients(1.0, 1.0)


@pytest.mark.parametrize("w0", [0.1, 0.8, 1.5707963, 2.3, 3.0])
@pytest.mark.parametrize("a", [-0.95, -0.4, 0.0, 0.3, 0.9])
def test_allpass_unit_magnitude_and_group_delay(w0, a):
    w, A = signal.freqz([-a, 1.0], [1.0, -a], worN=512)
    np.testing.assert_allclose(np.abs(A), 1.0, atol=1e-12)
    _, gd = signal.group_delay(([-a, 1.0], [1.0, -a]), w=[w0])
    assert abs(float(allpass_group_delay(a, w0)) - gd[0]) < 1e-8


@pytest.mark.parametrize("w0", [0.05, 0.6, 1.5707963, 2.2, 3.05])
@pytest.mark.parametrize("frac", [0.02, 0.4, 0.8, 0.995])
def test_ts_coefficient_inverts_group_delay_with_smaller_root(w0, frac):
    d = frac / math.sin(w0)
    a = float(ts_coefficient(d, w0))
    _, gd = signal.group_delay(([-a, 1.0], [1.0, -a]), w=[w0])
    assert abs(gd[0] - d) < 1e-7 * max(1.0, d)
    roots = np.roots([1 + d, -2 * math.cos(w0) * d, d - 1])         # Eq. (10) solved by numpy
    roots = roots[np.abs(roots.imag) < 1e-9].real
    assert abs(abs(a) - np.abs(roots).min()) < 1e-7 and abs(a) < 1


def test_ts_coefficient_unit_delay_is_zero_and_bounds_enforced():
    assert abs(float(ts_coefficient(1.0, 0.4))) < 1e-12
    with pytest.raises(ValueError, match="1/sin"):
        ts_coefficient(1.01 / math.sin(1.0), 1.0)
    with pytest.raises(ValueError, match="1/sin"):
        ts_coefficient(0.0, 1.0)
    with pytest.raises(ValueError, match="1/sin"):
        ts_coefficient(torch.tensor([0.5, 5.0]), torch.tensor([1.0, 1.0]))


def test_impulse_responses_match_lfilter():
    imp = np.r_[1.0, np.zeros(79)]
    w0, r, a = torch.tensor([0.3, 2.5], dtype=torch.float64), torch.tensor([0.9, 0.6], dtype=torch.float64), \
        torch.tensor([0.7, -0.5], dtype=torch.float64)
    a1, a2, g = fs_coefficients(w0, r)
    hr, ha = resonator_impulse(w0, r, 80), allpass_impulse(a, 80)
    for n in range(2):
        np.testing.assert_allclose(hr[:, n], signal.lfilter([g[n].item()], [1, -a1[n].item(), -a2[n].item()], imp),
                                   atol=1e-13)
        np.testing.assert_allclose(ha[:, n], signal.lfilter([-a[n].item(), 1], [1, -a[n].item()], imp), atol=1e-13)


def test_fits_response_equals_lfilter_cascade():
    g = torch.Generator().manual_seed(0)
    N = 7
    w = 0.02 + 3.1 * torch.rand(N, dtype=torch.float64, generator=g)
    r = 0.02 + 0.97 * torch.rand(N, dtype=torch.float64, generator=g)
    a = 1.96 * torch.rand(N, dtype=torch.float64, generator=g) - 0.98
    I = torch.randn(4, 257, N, dtype=torch.float64, generator=g)
    v = fits_response(I, w, r, a)
    a1, a2, gn = fs_coefficients(w, r)
    for n in range(N):
        y = signal.lfilter([gn[n].item()], [1, -a1[n].item(), -a2[n].item()], I[..., n].numpy(), axis=1)
        y = signal.lfilter([-a[n].item(), 1], [1, -a[n].item()], y, axis=1)
        assert np.abs(v[..., n].numpy() - y).max() <= 1e-12 * max(1.0, np.abs(y).max())


def test_fits_response_is_differentiable_everywhere():
    g = torch.Generator().manual_seed(1)
    args = (torch.randn(2, 30, 3, dtype=torch.float64, generator=g).requires_grad_(),
            torch.tensor([0.4, 1.3, 2.6], dtype=torch.float64).requires_grad_(),
            torch.tensor([0.5, 0.9, 0.7], dtype=torch.float64).requires_grad_(),
            torch.tensor([-0.6, 0.1, 0.8], dtype=torch.float64).requires_grad_())
    assert torch.autograd.gradcheck(fits_response, args)


def test_fits_response_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"\(B, T, N\)"):
        fits_response(torch.zeros(5, 3), torch.ones(3), 0.5 * torch.ones(3), torch.zeros(3))
    with pytest.raises(ValueError, match="omega_star must have shape"):
        fits_response(torch.zeros(1, 5, 3), torch.ones(2), 0.5 * torch.ones(3), torch.zeros(3))
    with pytest.raises(ValueError, match=r"\ba\b"):
        fits_response(torch.zeros(1, 5, 3), torch.ones(3), 0.5 * torch.ones(3), torch.ones(3))


def test_causal_conv_is_causal_and_exact():
    g = torch.Generator().manual_seed(2)
    x, h = torch.randn(2, 50, 3, dtype=torch.float64, generator=g), torch.randn(50, 3, dtype=torch.float64, generator=g)
    y = causal_conv(x, h)
    ref = np.stack([[np.convolve(x[b, :, n].numpy(), h[:, n].numpy())[:50] for n in range(3)] for b in range(2)], 0)
    np.testing.assert_allclose(y.numpy(), ref.transpose(0, 2, 1), atol=1e-12)


def test_lif_matches_snntorch_leaky_and_is_low_pass():
    snntorch = pytest.importorskip("snntorch")
    beta = torch.tensor([0.3, 0.8, 0.97], dtype=torch.float64)
    x = torch.randn(40, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    leaky = snntorch.Leaky(beta=beta, threshold=1e9, reset_mechanism="none")
    mem, ref = leaky.init_leaky(), []
    for t in range(40):
        _, mem = leaky(x[t], mem)
        ref.append(mem)
    ours = causal_conv(x[None], lif_impulse(beta, 40))[0]
    torch.testing.assert_close(ours, torch.stack(ref))
    for lam in (0.3, 0.8, 0.97):
        w, H = signal.freqz([1.0], [1.0, -lam], worN=1024)
        assert np.all(np.diff(np.abs(H)) < 0)            # strictly decreasing on [0, pi): peak at omega = 0


def test_network_membrane_is_fits_response_and_rejects_unknown_neurons():
    m = WaveSNN("FiTS", 5, 3, 1000.0, seed=4).double()
    x = torch.randn(2, 60, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        out, u, s, mo = m(x, return_all=True)
        ref = fits_response(x[:, :, None] * m.w_in + m.b_in, m.omega(), m.r(), m.a())
    torch.testing.assert_close(u, ref)
    assert out.shape == (2, 3) and set(s.unique().tolist()) <= {0.0, 1.0}
    torch.testing.assert_close(out, mo.max(1).values)
    with pytest.raises(ValueError, match="allowed: LIF"):
        WaveSNN("GRU", 5, 3, 1000.0)
    with pytest.raises(ValueError, match="f_range"):
        WaveSNN("FiTS", 5, 3, 1000.0, f_range=(20.0, 600.0))
    for n in NEURONS:
        h = WaveSNN(n, 4, 2, 1000.0).kernel(30)
        assert h.shape == (30, 4) and torch.isfinite(h).all()


def test_tasks_have_the_stated_structure():
    freqs = np.geomspace(40, 400, 8)
    X, y = tones(64, 400, 1000.0, freqs, noise=0.0, jitter=0.0, seed=0)
    peak = np.fft.rfftfreq(400, 1 / 1000)[np.abs(np.fft.rfft(X.numpy(), axis=1)).argmax(1)]
    assert np.all(np.abs(peak - freqs[y.numpy()]) <= 2.5)               # within one FFT bin (2.5 Hz)
    pairs = [(50.0, 120.0), (160.0, 400.0)]
    X, y = order_task(64, 400, 1000.0, pairs, noise=0.0, jitter=0.0, seed=1)
    assert set(y.tolist()) <= set(range(4))
    fr = np.fft.rfftfreq(150, 1 / 1000)
    for i in range(8):
        p, o = int(y[i]) // 2, int(y[i]) % 2
        first = fr[np.abs(np.fft.rfft(X[i, :150].numpy())).argmax()]
        assert abs(first - pairs[p][o]) <= 10                           # the first half holds the first tone
    T = formant_templates()
    assert T.shape == (10, 2, 3) and T.min() >= 60 and T.max() <= 450
    X, y = formants(20, 200, 1000.0, T, seed=2)
    assert X.shape == (20, 200) and X.dtype == torch.float32 and y.max() < 10


def test_fits_learns_tones_beyond_lif():
    torch.manual_seed(0)
    freqs = np.geomspace(40, 400, 4)
    Xtr, ytr = tones(256, 150, 1000.0, freqs, seed=10)
    Xte, yte = tones(256, 150, 1000.0, freqs, seed=11)
    accs = {}
    for n in ("FiTS", "LIF"):
        m = WaveSNN(n, 16, 4, 1000.0, seed=0)
        train_snn(m, Xtr, ytr, epochs=6, batch=64, lr=0.02, seed=0)
        accs[n] = accuracy(m, Xte, yte)
    assert accs["FiTS"] > 0.6 and accs["FiTS"] > accs["LIF"]
