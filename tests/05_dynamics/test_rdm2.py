"""paper_suite.dynamics.rdm2 against scipy, closed forms, brute force and properties."""
import math

import numpy as np
import pytest
import scipy.linalg
import torch
import torch.nn as nn

from paper_suite.dynamics.rdm2 import (QuadMLP, count_passes, detrend_projector, linear_teacher, modular_addition,
                                       participation_ratio, rdm2_gaussian, rdm2_spectra, rdm2_window, saxe_midpoint,
                                       saxe_strength, spectral_heat_capacity, top_eigenvectors, train_dln,
                                       two_level_heat_capacity, warning_time)


def _cov_detrended(Lw):
    """Brute force: detrend every column by its own least-squares line (numpy.polyfit), then np.cov."""
    s = np.arange(Lw.shape[0], dtype=float)
    R = np.stack([Lw[:, i] - np.polyval(np.polyfit(s, Lw[:, i], 1), s) for i in range(Lw.shape[1])], 1)
    return np.cov(R, rowvar=False, ddof=1)


def test_window_matches_polyfit_detrend_and_np_cov():
    L = np.random.default_rng(0).standard_normal((15, 9)).cumsum(0)
    assert np.allclose(rdm2_window(L), _cov_detrended(L), atol=1e-10)


def test_projector_is_symmetric_idempotent_and_kills_lines():
    M = detrend_projector(12)
    assert np.allclose(M, M.T) and np.allclose(M @ M, M) and np.isclose(np.trace(M), 10)
    assert np.allclose(M @ (2.0 + 0.3 * np.arange(12)), 0)


def test_batched_spectra_equal_scipy_eigh_of_every_window():
    L = np.random.default_rng(1).standard_normal((25, 30)).cumsum(0)
    W = 8
    lam = rdm2_spectra(L, W)
    assert lam.shape == (25 - W + 1, W)
    for t in (0, 7, 17):
        ref = scipy.linalg.eigh(_cov_detrended(L[t:t + W]), eigvals_only=True)[::-1][:W]
        ref = np.where(ref > 1e-10 * ref[0], ref, 0)
        assert np.allclose(lam[t], ref, atol=1e-9)


def test_top_eigenvector_matches_eigh():
    L = np.random.default_rng(2).standard_normal((20, 12)).cumsum(0)
    val, vec = top_eigenvectors(L, k=2)
    w, V = np.linalg.eigh(_cov_detrended(L))
    assert np.allclose(val, w[::-1][:2]) and abs(vec[0] @ V[:, -1]) == pytest.approx(1, abs=1e-9)


def test_participation_ratio_and_heat_capacity_closed_forms():
    assert participation_ratio(np.ones(5)) == pytest.approx(5)
    assert participation_ratio(np.array([[3.0, 1.0], [1.0, 0.0]])) == pytest.approx([1.6, 1.0])
    assert spectral_heat_capacity(np.ones(6)) == pytest.approx(0, abs=1e-12)
    assert spectral_heat_capacity(np.array([1.0, 0, 0])) == pytest.approx(0, abs=1e-12)
    # two levels with weights q, 1-q: Var of log p = q(1-q) log²(q/(1-q))
    q = 0.3
    assert spectral_heat_capacity(np.array([q, 1 - q])) == pytest.approx(q * (1 - q) * math.log(q / (1 - q)) ** 2)
    # the lemma, Eq. (8), against the general formula
    for d in (0.01, 0.2, 0.7):
        spec = np.r_[1 - d, np.full(9, d / 9)]
        assert spectral_heat_capacity(spec) == pytest.approx(two_level_heat_capacity(d, 10))


def test_heat_capacity_is_second_derivative_of_log_partition_function():
    p = np.random.default_rng(3).dirichlet(np.ones(8))
    for b in (0.5, 2.0):
        h = 1e-4
        logZ = lambda x: math.log((p ** x).sum())
        num = b * b * (logZ(b + h) - 2 * logZ(b) + logZ(b - h)) / h ** 2
        assert spectral_heat_capacity(p, b) == pytest.approx(num, abs=1e-5)


def test_observables_are_scale_invariant():
    lam = np.random.default_rng(4).exponential(size=10)
    assert participation_ratio(7 * lam) == pytest.approx(participation_ratio(lam))
    assert spectral_heat_capacity(7 * lam) == pytest.approx(spectral_heat_capacity(lam))


def test_gaussian_2rdm_of_a_linear_loss_is_sigma2_GGt():
    g = torch.Generator().manual_seed(0)
    G = torch.randn(6, 4, generator=g, dtype=torch.float64)
    loss = lambda p: G @ p["w"] + 1.0
    C = rdm2_gaussian(loss, {"w": torch.zeros(4, dtype=torch.float64)}, sigma=0.1, n_samples=20000, seed=1)
    ref = 0.01 * (G @ G.T).numpy()
    assert np.abs(C - ref).max() < 0.05 * np.abs(ref).max()


def test_gaussian_2rdm_is_reproducible_and_uses_no_backward():
    m = nn.Linear(3, 5)
    x = torch.randn(7, 3)
    fn = lambda q: torch.func.functional_call(m, q, (x,)).pow(2).sum(1)
    params = {k: v.detach() for k, v in m.named_parameters()}
    with count_passes(m) as n:
        a = rdm2_gaussian(fn, params, sigma=0.1, n_samples=10, seed=3)
    b = rdm2_gaussian(fn, params, sigma=0.1, n_samples=10, seed=3)
    assert np.array_equal(a, b) and a.shape == (7, 7) and n == {"forward": 10, "backward": 0}


def test_count_passes_counts_backward():
    m = nn.Linear(2, 1)
    with count_passes(m) as n:
        m(torch.ones(4, 2)).sum().backward()
        m(torch.ones(4, 2))
    assert n == {"forward": 2, "backward": 2}


def test_warning_time_rule():
    t = np.arange(100.0)
    assert warning_time(0.5 * t, t, 0, 100) is None                           # steady ramp: no warning
    h = np.r_[np.zeros(60), np.ones(40)] + 0.01 * np.cos(t)
    assert warning_time(h, t, 0, 100) == 60.0 and warning_time(h, t, 0, 59) is None


def test_saxe_closed_form_solves_the_ode():
    s, a0, tau = 2.0, 1e-3, 40.0
    t = np.linspace(0, 200, 2001)
    a = saxe_strength(t, s, a0, tau)
    da = np.gradient(a, t)
    assert np.allclose(tau * da[5:-5], 2 * a[5:-5] * (s - a[5:-5]), atol=2e-3)
    assert a[0] == pytest.approx(a0) and saxe_strength(saxe_midpoint(s, a0, tau), s, a0, tau) == pytest.approx(s / 2)


def test_dln_training_follows_closed_form():
    r = train_dln(d=8, svals=(2.0,), a0=1e-3, lr=0.01, batch=256, steps=600, every=5, n_probe=16, seed=0)
    pred = saxe_strength(r["t"], 2.0, 1e-3, 100.0)
    assert np.abs(r["a"][:, 0] - pred).max() < 0.15
    U, s, V = linear_teacher(8, (2.0,), 0)
    assert np.allclose(U.T @ U, np.eye(8)) and s[0] == 2.0 and s[1:].sum() == 0


def test_modular_addition_and_model():
    X, y, tr, te = modular_addition(7, 0.5, 1)
    a, b = X[:, :7].argmax(1), X[:, 7:].argmax(1)
    assert torch.equal(y, (a + b) % 7) and len(tr) + len(te) == 49
    assert QuadMLP(7, 16)(X).shape == (49, 7)


def test_rise_midpoint():
    from paper_suite.dynamics.rdm2 import rise_midpoint
    t = np.arange(0.0, 100.0, 10.0)
    s = np.r_[np.full(4, 0.1), 0.3, 0.6, np.full(4, 0.9)]
    assert rise_midpoint(t, s) == 50.0 and rise_midpoint(t, s, frac=0.2) == 40.0
    assert rise_midpoint(t, np.linspace(1, 0, 10)) is None          # no rise above the first value


def test_induction_run_probe_losses_are_consistent_and_reproducible():
    from paper_suite.dynamics.rdm2 import train_induction
    kw = dict(vocab=16, length=12, seg=4, d_model=8, n_head=2, lr=1e-2, batch=4, steps=30, every=10, probe_seqs=3)
    a, b = train_induction(seed=1, **kw), train_induction(seed=1, **kw)
    assert np.array_equal(a["L"], b["L"]) and np.array_equal(a["ind"], b["ind"])
    assert a["L"].shape == (4, 36) and list(a["t"]) == [0, 10, 20, 30] and a["mask"].sum() == 3 * 3
    assert np.allclose(a["L"][:, a["mask"]].mean(1), a["rep_loss"], atol=1e-6)
    assert np.allclose(a["L"][:, ~a["mask"]].mean(1), a["other_loss"], atol=1e-6)
    assert not np.array_equal(a["L"][-1], a["L"][0])                 # it trained
    c = train_induction(seed=2, **kw)
    assert not np.array_equal(a["L"][0], c["L"][0])                  # another seed, another model and probe


def test_warning_leads_and_event_window():
    from paper_suite.dynamics.rdm2 import warning_leads, window_ending_at
    t = np.arange(300.0)
    sig = {"jump": np.where(t < 200, 0.0, 1.0) + 1e-3 * np.sin(t), "ramp": 0.01 * t}
    leads = warning_leads(sig, t, 150, 250, plateau=100.0)
    assert leads["lead jump"] == pytest.approx(0.5) and np.isnan(leads["lead ramp"])
    assert np.isnan(warning_leads(sig, t, 210, 250, plateau=100.0)["lead jump"])    # the jump is outside (lo, hi]
    L = np.arange(40.0).reshape(20, 2)
    w = window_ending_at(L, np.arange(0, 200, 10), 95, 4)
    assert np.array_equal(w[:, 0], L[7:11, 0])                                     # ends at t = 100, the first ≥ 95


def test_normalised_cov_error_closed_forms():
    from paper_suite.dynamics.rdm2 import normalised_cov_error
    assert normalised_cov_error(np.r_[3.0, 0, 0, 0], 50) == pytest.approx(0, abs=1e-12)      # rank one: exact direction
    m, S = 12, 41
    assert normalised_cov_error(np.full(m, 2.5), S) == pytest.approx(math.sqrt((m + 1 - 2 / m) / (S - 1)))
    lam = np.random.default_rng(0).exponential(size=(3, 9))
    assert normalised_cov_error(lam, 20).shape == (3,)                                       # batched over rows
    assert normalised_cov_error(5 * lam, 20) == pytest.approx(normalised_cov_error(lam, 20))  # scale-free


@pytest.mark.parametrize("spec", [np.r_[1.0, 0.3, 0.1, np.zeros(17)], 0.8 ** np.arange(20)])
def test_normalised_cov_error_matches_monte_carlo_with_np_cov(spec):
    """Eq. (13) against the RMS error of np.cov of Gaussian draws from a known C (numpy only)."""
    from paper_suite.dynamics.rdm2 import normalised_cov_error
    g = np.random.default_rng(7)
    n, S = len(spec), 60
    Q, _ = np.linalg.qr(g.standard_normal((n, n)))
    C = Q @ np.diag(spec) @ Q.T
    rho = C / np.trace(C)
    err = []
    for _ in range(2000):
        Ch = np.cov(g.multivariate_normal(np.zeros(n), C, size=S), rowvar=False)
        err.append(np.linalg.norm(Ch / np.trace(Ch) - rho) / np.linalg.norm(rho))
    assert math.sqrt(np.mean(np.square(err))) == pytest.approx(normalised_cov_error(spec, S), rel=0.05)
