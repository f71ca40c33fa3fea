"""Tests of paper_suite.society.fairtune against references that share no code with it: scipy's Bernoulli
distribution and numerical integration, brute-force maximisation over dense grids, finite differences,
scikit-learn's cosine similarity, scipy's softmax, explicit loops, and properties (properness, limited
liability, invariances)."""
import math

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import softmax
from sklearn.metrics.pairwise import cosine_similarity

from paper_suite.society.fairtune import (
    MECHANISMS, Market, best_report, best_response_dynamics, choice_probs, docstring_corpus, embedding_market,
    expected_payment, fairtune_payment, finetune_cost, foc_delta, ir_price, make_market, match_quality, misreport,
    misreport_slope, payment_variance, profit_curve, provider_payment, style_embeddings, truthful_band,
    verified_pass_prob, welfare)

rng = np.random.default_rng(2024)


def payment_loop(p, y, qh, k):
    return p * min(1.0, max(0.0, 1.0 - k * (y - qh) ** 2))


def bern_mean(q, f):
    """E f(Y) for Y ~ Bernoulli(q), summed over scipy's pmf."""
    return sum(stats.bernoulli(q).pmf(y) * f(y) for y in (0, 1))


# ---- payments -------------------------------------------------------------------------------------

def test_payment_matches_scalar_formula_and_broadcasts():
    y, qh = rng.integers(0, 2, (6, 1)), rng.random((1, 5))
    out = fairtune_payment(3.0, y, qh, 2.5)
    assert out.shape == (6, 5)
    ref = np.array([[payment_loop(3.0, y[i, 0], qh[0, j], 2.5) for j in range(5)] for i in range(6)])
    assert np.allclose(out, ref)
    assert (out >= 0).all() and (out <= 3.0).all()                       # limited liability


@pytest.mark.parametrize("kappa", [0.0, 0.4, 1.0, 1.7, 5.0])
def test_expected_payment_is_the_bernoulli_expectation(kappa):
    for q, qh in rng.random((12, 2)):
        ref = bern_mean(q, lambda y: payment_loop(2.0, y, qh, kappa))
        assert math.isclose(float(expected_payment(2.0, q, qh, kappa)), ref, rel_tol=1e-10, abs_tol=1e-12)


def test_clip_free_closed_form_and_properness_for_kappa_at_most_one():
    q, qh = rng.random(50), rng.random(50)
    for kappa in (0.3, 1.0):
        assert np.allclose(expected_payment(1.0, q, qh, kappa), 1 - kappa * (q * (1 - q) + (qh - q) ** 2))
        grid = np.linspace(0, 1, 20001)
        for qq in q[:10]:
            assert abs(grid[np.argmax(expected_payment(1.0, qq, grid, kappa))] - qq) <= 1e-4


@pytest.mark.parametrize("kappa", [0.5, 1.0, 1.3, 2.0, 2.5, 4.0, 9.0])
def test_best_report_is_the_brute_force_optimum(kappa):
    grid = np.linspace(0, 1, 100001)
    for q in np.r_[rng.random(15), 0.0, 0.5, 1.0]:
        ev = np.array([bern_mean(q, lambda y: payment_loop(1.0, y, g, kappa)) for g in (0.0, 1.0)])
        brute = max(float(expected_payment(1.0, q, grid, kappa).max()), ev.max())
        assert math.isclose(float(expected_payment(1.0, q, best_report(q, kappa), kappa)), brute, abs_tol=1e-9)


def test_truthful_band_matches_brute_force():
    grid = np.linspace(0, 1, 4001)
    for kappa in (1.2, 1.6, 2.0, 3.0):
        qs = np.linspace(0.01, 0.99, 99)
        truth_wins = np.array([expected_payment(1.0, q, q, kappa) >= expected_payment(1.0, q, grid, kappa).max() - 1e-12
                               for q in qs])
        band = truthful_band(kappa)
        expect = np.zeros_like(qs, bool) if band is None else (qs >= band[0] - 1e-12) & (qs <= band[1] + 1e-12)
        assert (truth_wins == expect).all(), kappa
    assert truthful_band(0.8) == (0.0, 1.0) and truthful_band(2.5) is None


def test_variance_matches_scipy_and_is_bounded():
    for q, qh in rng.random((10, 2)):
        for kappa in (0.5, 3.0, 20.0):
            m1 = bern_mean(q, lambda y: payment_loop(2.0, y, qh, kappa))
            m2 = bern_mean(q, lambda y: payment_loop(2.0, y, qh, kappa) ** 2)
            assert math.isclose(float(payment_variance(2.0, q, qh, kappa)), m2 - m1 ** 2, rel_tol=1e-9, abs_tol=1e-12)
            assert payment_variance(2.0, q, qh, kappa) <= 1.0 + 1e-12          # p^2 / 4
            unclipped = stats.bernoulli(q).var() * (2.0 * kappa * ((1 - qh) ** 2 - qh ** 2)) ** 2
            assert math.isclose(float(payment_variance(2.0, q, qh, kappa, clip=False)), unclipped, rel_tol=1e-9,
                                abs_tol=1e-12)


def test_bad_arguments_name_what_is_allowed():
    with pytest.raises(ValueError, match="kappa"):
        fairtune_payment(1.0, 1, 0.5, -1.0)
    with pytest.raises(ValueError, match="q_hat"):
        fairtune_payment(1.0, 1, 1.5, 1.0)
    with pytest.raises(ValueError, match="allowed: cheap_talk"):
        provider_payment("vickrey", 1.0, 0.5, 0.5)
    with pytest.raises(ValueError, match="kappa in"):
        ir_price([0.1], 2.0)
    with pytest.raises(ValueError, match="delta"):
        misreport(np.eye(3), np.ones(3), 1.5)


# ---- verification noise and price ----------------------------------------------------------------

@pytest.mark.parametrize("q,sigma", [(0.0, 0.1), (0.03, 0.2), (0.5, 0.05), (0.9, 0.2), (1.0, 0.3)])
def test_noisy_verifier_mean_by_quadrature(q, sigma):
    ref, _ = integrate.quad(lambda x: min(1.0, max(0.0, q + sigma * x)) * stats.norm.pdf(x), -12, 12, limit=200)
    assert math.isclose(float(verified_pass_prob(q, sigma)), ref, abs_tol=1e-8)
    assert float(verified_pass_prob(q, 0.0)) == q


def test_ir_price_guarantees_truthful_participation():
    cost = rng.uniform(0.02, 0.2, 7)
    for kappa in (0.25, 0.6, 1.0):
        p = ir_price(cost, kappa)
        q = np.linspace(0, 1, 1001)
        assert (expected_payment(p, q, q, kappa) >= cost.max() - 1e-12).all()
        assert math.isclose(float(expected_payment(p, 0.5, 0.5, kappa)), cost.max())    # the smallest such price


# ---- styles ----------------------------------------------------------------------------------------

def test_match_quality_against_sklearn_cosine():
    T, S = rng.standard_normal((9, 5)) * 3, rng.standard_normal((4, 5)) * 0.1
    ref = 1 / (1 + np.exp(-(6 * cosine_similarity(T, S) - 3)))
    assert np.allclose(match_quality(T, S, 6.0, -3.0), ref)


def test_misreport_moves_along_the_great_circle_toward_the_centre():
    S, m = rng.standard_normal((6, 4)), rng.standard_normal(4)
    S1 = S / np.linalg.norm(S, axis=1, keepdims=True)
    m1 = m / np.linalg.norm(m)
    assert np.allclose(misreport(S, m, 0.0), S1) and np.allclose(misreport(S, m, 1.0), np.tile(m1, (6, 1)))
    prev = S1 @ m1
    for d in np.linspace(0.1, 1, 10):
        R = misreport(S, m, np.full(6, d))
        assert np.allclose(np.linalg.norm(R, axis=1), 1)
        for j in range(6):                                # in span{s_j, m}: residual of least squares is zero
            coef, *_ = np.linalg.lstsq(np.stack([S1[j], m1], 1), R[j], rcond=None)
            assert np.allclose(np.stack([S1[j], m1], 1) @ coef, R[j])
        assert (R @ m1 >= prev - 1e-12).all()
        prev = R @ m1


def test_misreport_slope_by_finite_differences():
    T, S, m = rng.standard_normal((20, 6)), rng.standard_normal((3, 6)), rng.standard_normal(6)
    h = 1e-6
    fd = (match_quality(T, misreport(S, m, h), 4.0, -1.0) - match_quality(T, misreport(S, m, 0.0), 4.0, -1.0)) / h
    assert np.allclose(misreport_slope(T, S, m, 4.0, -1.0), fd, atol=1e-4)


# ---- the market -----------------------------------------------------------------------------------

def test_choice_probs_is_a_softmax_with_an_outside_option():
    U = rng.normal(size=(7, 4))
    ref = softmax(np.c_[np.zeros(7), U] / 0.3, axis=1)[:, 1:]
    assert np.allclose(choice_probs(U, 0.3), ref)
    assert np.allclose(choice_probs(U + 1e3, 0.3).sum(1), 1)                    # no overflow


def test_welfare_and_cost_by_loops():
    Pm, q, c = rng.random((5, 3)) / 3, rng.random((5, 3)), rng.random(3) / 10
    w = sum(Pm[i, j] * (0.9 * 2.0 * q[i, j] - c[j]) for i in range(5) for j in range(3))
    cost = sum(2.0 * (1 - 0.9 * sum(Pm[i, j] * q[i, j] for j in range(3))) for i in range(5))
    assert math.isclose(welfare(Pm, q, c, 0.9, 2.0), w) and math.isclose(finetune_cost(Pm, q, 0.9, 2.0), cost)


def brute_profit(mk, j, d, delta, mechanism, kappa, sigma):
    """Eq. (13) the long way: every provider's report, the full logit, column j."""
    dd = np.array(delta, float)
    dd[j] = d
    claims = match_quality(mk.targets, misreport(mk.styles, mk.centre, dd), mk.a, mk.b)
    Pm = softmax(np.c_[np.zeros(len(mk.targets)), (mk.gamma * mk.c0 * claims - mk.price) / mk.tau], axis=1)[:, 1:]
    qv = verified_pass_prob(mk.q[:, j], sigma)
    if mechanism == "fairtune":
        pay = np.array([bern_mean(v, lambda y: payment_loop(mk.price, y, h, kappa))
                        for v, h in zip(qv, claims[:, j])])
    elif mechanism == "pay_on_success":
        pay = mk.price * qv
    else:
        pay = np.full(len(qv), mk.price)
    return float((Pm[:, j] * (pay - mk.cost[j])).sum())


@pytest.mark.parametrize("mechanism,kappa", [("fairtune", 1.0), ("fairtune", 3.0), ("pay_on_success", 1.0),
                                             ("cheap_talk", 1.0)])
def test_profit_curve_against_the_long_way(mechanism, kappa):
    mk = make_market(5, 40, 4, seed=7)
    delta = rng.choice(np.linspace(0, 1, 11), 5)
    for j in (0, 4):
        ds = [0.0, 0.35, 1.0]
        got = profit_curve(mk, j, ds, delta, mechanism, kappa, 0.1)
        assert np.allclose(got, [brute_profit(mk, j, d, delta, mechanism, kappa, 0.1) for d in ds], rtol=1e-9)


def test_dynamics_end_in_best_responses_and_oracle_is_truthful():
    mk = make_market(6, 90, 5, seed=11)
    grid = np.linspace(0, 1, 21)
    for mech in ("fairtune", "pay_on_success"):
        r = best_response_dynamics(mk, mech, sigma=0.1, rounds=8, grid=grid, seed=3)
        for j in range(6):          # every final report is a best response on the grid (the run converged)
            gain = profit_curve(mk, j, grid, r.delta, mech, 1.0, 0.1).max() - \
                profit_curve(mk, j, r.delta[j], r.delta, mech, 1.0, 0.1)[0]
            assert math.isclose(gain, r.nash_gap[j], abs_tol=1e-9) and gain <= 1e-9
        assert r.delta_hist.shape == (9, 6) and (r.nash_gap >= -1e-12).all()
    o = best_response_dynamics(mk, "oracle", rounds=8)
    assert (o.delta_hist == 0).all() and np.allclose(o.misreport, 0)
    assert best_response_dynamics(mk, "no_reuse").welfare == 0.0
    with pytest.raises(ValueError, match="allowed"):
        best_response_dynamics(mk, "auction")


def test_cheap_talk_runs_to_the_centre_when_all_demand_is_there():
    """Every buyer wants exactly the centre and cheap talk pays p: claiming the centre maximises demand."""
    r = np.random.default_rng(0)
    m = np.eye(4)[0]
    S = np.array([[0.6, 0.8, 0, 0], [0.5, 0, 0.5, 0.7071], [0.3, 0, 0, 0.954]])
    mk = Market(S / np.linalg.norm(S, axis=1, keepdims=True), np.tile(m, (30, 1)) + 1e-9 * r.standard_normal((30, 4)),
                np.array([0.05, 0.05, 0.05]), 0.2, np.zeros(3, bool))
    res = best_response_dynamics(mk, "cheap_talk", sigma=0.0, rounds=3)
    assert np.allclose(res.delta, 1.0)


def test_fairtune_is_truthful_when_demand_does_not_react():
    """With very noisy buyers (huge tau) demand is flat in the claim, so only the proper-scoring term is left."""
    base = make_market(6, 120, 5, seed=5)
    mk = Market(base.styles, base.targets, base.cost, base.price, base.popular, tau=1e4)
    res = best_response_dynamics(mk, "fairtune", kappa=1.0, sigma=0.0, rounds=3, grid=np.linspace(0, 1, 41))
    assert np.allclose(res.delta, 0.0)


def test_foc_derivatives_match_finite_differences():
    mk = make_market(8, 160, 6, seed=2)
    h = 1e-3
    for j in range(8):
        f = foc_delta(mk, j, 0.7)
        c = profit_curve(mk, j, [0.0, h, 2 * h, 3 * h, 4 * h], np.zeros(8), "fairtune", 0.7, 0.0)
        slope = (-25 * c[0] + 48 * c[1] - 36 * c[2] + 16 * c[3] - 3 * c[4]) / (12 * h)
        curv = (35 * c[0] - 104 * c[1] + 114 * c[2] - 56 * c[3] + 11 * c[4]) / (12 * h * h)
        assert math.isclose(f["slope"], slope, rel_tol=1e-4, abs_tol=1e-6)
        assert math.isclose(f["curvature"], curv, rel_tol=1e-2, abs_tol=1e-3)
        assert f["newton"] != f["newton"] or math.isclose(f["newton"], -f["slope"] / f["curvature"])


def test_mechanism_names():
    assert MECHANISMS == ("cheap_talk", "pay_on_success", "reputation", "fairtune", "oracle", "no_reuse")


# ---- text styles ----------------------------------------------------------------------------------

def test_docstring_corpus_and_embedding_market():
    texts, lab = docstring_corpus(("json", "logging", "http"), max_docs=25, seed=1)
    assert len(texts) == len(lab) and set(lab.tolist()) == {0, 1, 2}
    assert np.bincount(lab)[1] == 25 and all(len(t.split()) >= 8 for t in texts)
    with pytest.raises(ValueError, match="no Python source"):
        docstring_corpus(("no_such_package_xyz",))
    texts, lab = docstring_corpus(("logging", "http", "urllib", "concurrent"), max_docs=30, seed=0)
    emb = style_embeddings(texts, 8, seed=0)
    assert emb.shape == (len(texts), 8) and np.allclose(np.linalg.norm(emb, axis=1), 1)
    mk = embedding_market(emb, lab, providers_per_domain=2, seed=0)
    n_k = np.bincount(lab)
    assert mk.styles.shape == (8, 8) and len(mk.targets) == int((n_k - n_k // 2).sum())
    # the calibration of Eq. (18): buyers pass on their own domain's checkpoints, fail on the others'
    buyer_dom = lab[np.argmax(mk.targets @ emb.T, axis=1)]              # each buyer is one of the documents
    own = buyer_dom[:, None] == np.repeat(np.arange(4), 2)[None, :]
    assert np.median(mk.q[own]) > 0.7 and np.median(mk.q[~own]) < 0.3
