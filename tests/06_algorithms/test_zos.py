"""Unit tests for paper_suite.algorithms.zos against references that share none of its code: the published TNTP
Sioux Falls equilibrium, closed forms on two-route networks, SciPy's SLSQP on the path formulation, brute-force
path enumeration, and central finite differences."""
import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from paper_suite.algorithms.zos import (beckmann, diff_stackelberg, frank_wolfe, frank_wolfe_sampled,
                                        line_search, marginal_cost, marginal_cost_tolls, path_strata,
                                        sample_candidates, system_optimum, total_travel_time,
                                        unrolled_social_cost, zo_gradient, zos)
from paper_suite.traffic import Network, enumerate_paths, grid_network, link_time, load_sioux_falls

# TNTP SiouxFalls_flow.tntp: (from, to, volume, cost) of the best-known user equilibrium
TNTP_FLOWS = [
    (1, 2, 4494.6576464564205, 6.00081623735432), (1, 3, 8119.079948047809, 4.008690750207941), (2, 1, 4519.079948047809, 6.000834122995382),
    (2, 6, 5967.336396171377, 6.573598255386801), (3, 1, 8094.6576464564205, 4.008586653499848), (3, 4, 14006.371019862527, 4.2694018322732905),
    (3, 12, 10022.319615163622, 4.0201791556206405), (4, 3, 14030.560917400857, 4.271267755875735), (4, 5, 18006.371019862527, 2.3153741062577953),
    (4, 11, 5200.0, 7.1333004801798925), (5, 4, 18030.560917400857, 2.3170722283501695), (5, 6, 8798.26771410631, 9.99822520770989),
    (5, 9, 15780.782055471172, 9.651310705325999), (6, 2, 5991.758697762765, 6.599517667370174), (6, 5, 8806.498666814754, 10.020702556347622),
    (6, 8, 12492.925360562731, 14.690955002063726), (7, 8, 12101.529122313244, 5.55216038110299), (7, 18, 15794.010606975833, 2.0622256872131777),
    (8, 6, 12525.578614862563, 14.824159517828813), (8, 7, 12040.918272853545, 5.501412962563085), (8, 9, 6882.664912661778, 15.174707514675859),
    (8, 16, 8388.71306300359, 10.729473525552692), (9, 5, 15796.74100030106, 9.670154559500556), (9, 8, 6836.705975294404, 15.03786950444767),
    (9, 10, 21744.07608017677, 5.682533051602025), (10, 9, 21814.07608763928, 5.717243386296829), (10, 11, 17726.62503296105, 12.405689451182845),
    (10, 15, 23125.797290102622, 13.72237028250547), (10, 16, 11047.093881273468, 20.084809978398383), (10, 17, 8100.0, 16.308017150740422),
    (11, 4, 5300.0, 7.223024555194135), (11, 10, 17604.223533231314, 12.203254534036494), (11, 12, 8365.285653859217, 13.590227634461069),
    (11, 14, 9776.119532747252, 13.691285688495954), (12, 3, 9973.707416033903, 4.019790487445956), (12, 11, 8404.934623946574, 13.735155648868583),
    (12, 13, 12287.605269022839, 3.022796543682372), (13, 12, 12378.642039980477, 3.023479671561587), (13, 24, 11121.357960019523, 17.661007722734873),
    (14, 11, 9814.06906293016, 13.842645045035516), (14, 15, 9036.334134027638, 12.23433912804607), (14, 23, 8400.436830274855, 9.079344311718367),
    (15, 10, 23192.283359357847, 13.811560451025963), (15, 14, 9079.820316587473, 12.374604857173303), (15, 19, 19083.289764747366, 4.326212079332105),
    (15, 22, 18409.93502651531, 9.08814367305963), (16, 8, 8406.714405211096, 10.778811570380915), (16, 10, 11073.00931921049, 20.236275698759833),
    (16, 17, 11695.002916533696, 9.501458490999475), (16, 18, 15278.325241515115, 3.1634648042599296), (17, 10, 8100.0, 16.308017150740422),
    (17, 16, 11683.838282439508, 9.472854415655231), (17, 19, 9953.02143205102, 7.436626799094368), (18, 7, 15854.621456435532, 2.0631863850180094),
    (18, 16, 15333.406655753832, 3.1658348757764214), (18, 20, 18976.79611920187, 4.2593710873324016), (19, 15, 19116.724279078175, 4.335530792063869),
    (19, 17, 9941.856797956832, 7.412274035329561), (19, 20, 8688.367040494595, 9.459063508153196), (20, 18, 18992.488382900287, 4.260230067055197),
    (20, 19, 8710.636920731216, 9.515249398501574), (20, 21, 6302.022874186994, 8.1656608127813), (20, 22, 7000.0, 7.713130000305228),
    (21, 20, 6239.985018122032, 8.081635689665607), (21, 22, 8619.539698101762, 4.213505826088517), (21, 24, 10309.410803922008, 11.924059828422909),
    (22, 15, 18386.47276399956, 9.057167182746475), (22, 20, 7000.0, 7.713130000305228), (22, 21, 8607.387929735014, 4.201049855811011),
    (22, 23, 9661.824231365848, 12.36580549583202), (23, 14, 8394.90017789793, 9.065966544087727), (23, 22, 9626.21020048335, 12.243138489387317),
    (23, 24, 7902.983927055153, 3.7593041884018925), (24, 13, 11112.394730977161, 17.617020723058587), (24, 21, 10259.524716223794, 11.752579405401582),
    (24, 23, 7861.833243795729, 3.722946742102766),
]


def two_routes(demand=1.5):
    """Route 1: t = 1 + x^4 (one link); route 2: two links of nearly constant cost 1 each."""
    return Network(3, [0, 0, 2], [1, 2, 1], t0=[1.0, 1.0, 1.0], cap=[1.0, 1e6, 1e6], alpha=[1.0, 0.15, 0.15],
                   beta=4, demand=np.array([[0, demand, 0], [0, 0, 0], [0, 0, 0.0]]))


def slsqp_equilibrium(net, paths, so=False):
    """Independent reference: minimise Beckmann (or total travel time) over all path flows with SciPy."""
    A = paths.incidence.toarray()
    od, dem = paths.od, paths.demand
    def obj(f):
        x = A.T @ f
        t = net.t0 * (1 + net.alpha * (x / net.cap) ** net.beta)
        if so:
            return x @ t
        return np.sum(net.t0 * (x + net.alpha * net.cap / (net.beta + 1) * (x / net.cap) ** (net.beta + 1)))
    f0 = np.concatenate([np.full((od == w).sum(), dem[w] / (od == w).sum()) for w in range(len(dem))])
    r = minimize(obj, f0, method="SLSQP", bounds=[(0, None)] * len(f0),
                 constraints=[{"type": "eq", "fun": lambda f, w=w: f[od == w].sum() - dem[w]} for w in range(len(dem))],
                 options={"ftol": 1e-14, "maxiter": 1000})
    return A.T @ r.x


def test_total_travel_time_excludes_tolls():
    net = two_routes()
    x = np.array([1.0, 0.5, 0.5])
    assert total_travel_time(net, x) == pytest.approx(1 * 2 + 0.5 * link_time(net, x)[1] + 0.5 * link_time(net, x)[2])


def test_two_route_closed_forms():
    net = two_routes()
    x, gaps = frank_wolfe(net, iters=5000, tol=1e-10)
    # UE: 1 + x^4 = 2 (+ negligible) -> x = 1; SO: 1 + 5 x^4 = 2 -> x = 5^(-1/4)
    assert x[0] == pytest.approx(1.0, abs=1e-3) and x.sum() == pytest.approx(1.5 + 0.5)
    assert gaps.ndim == 1 and gaps[-1] <= 1e-3
    xs, _ = system_optimum(net, iters=5000, tol=1e-10)
    assert xs[0] == pytest.approx(5 ** -0.25, abs=1e-3)
    # the Pigouvian toll on route 1 is x t'(x) = 4 x^4 at the SO
    th = marginal_cost_tolls(net, xs)
    assert th[0] == pytest.approx(4 * xs[0] ** 4, rel=1e-9)
    xt, _ = frank_wolfe(net, th, iters=5000, tol=1e-10)
    assert np.allclose(xt, xs, atol=2e-3)


@pytest.mark.parametrize("seed", [0, 1])
def test_frank_wolfe_matches_scipy_path_formulation(seed):
    """Convexity sandwich: Phi(x_FW) - Phi* lies in [0, duality gap of x_FW], with Phi* from SciPy."""
    g = grid_network(3, 3, [(0, 8), (2, 6)], demand=[2.0, 1.5], seed=seed)
    ps = enumerate_paths(g)
    x, gaps = frank_wolfe(g, iters=1000, tol=1e-8)
    c = link_time(g, x)
    gap_abs = gaps[-1] * (c @ x)
    ref = beckmann(g, slsqp_equilibrium(g, ps))
    assert -1e-8 <= beckmann(g, x) - ref <= gap_abs + 1e-8
    xs, sgaps = system_optimum(g, iters=1000, tol=1e-8)
    mc = marginal_cost(g, xs)
    ref_so = total_travel_time(g, slsqp_equilibrium(g, ps, so=True))
    assert -1e-8 <= total_travel_time(g, xs) - ref_so <= sgaps[-1] * (mc @ xs) + 1e-8
    assert total_travel_time(g, xs) <= total_travel_time(g, x) + 1e-9


def test_frank_wolfe_on_sioux_falls_matches_published_equilibrium():
    sf = load_sioux_falls()
    ref = np.zeros(sf.n_links)
    for a, b, v, _ in TNTP_FLOWS:
        ref[sf.link_index(a - 1, b - 1)] = v
    x, gaps = frank_wolfe(sf, iters=1500, tol=1e-6)
    assert gaps[-1] < 2e-4 and np.all(np.diff(gaps[:5]) != 0)
    assert total_travel_time(sf, x) == pytest.approx(total_travel_time(sf, ref), rel=1e-3)
    assert total_travel_time(sf, ref) == pytest.approx(sum(v * c for *_, v, c in TNTP_FLOWS), rel=1e-12)
    assert np.abs(x - ref).max() / ref.max() < 0.02
    assert beckmann(sf, x) >= beckmann(sf, ref) * (1 - 1e-9)


def test_line_search_is_the_exact_minimiser():
    g = grid_network(3, 3, [(0, 8)], demand=2.0, seed=4)
    rng = np.random.default_rng(0)
    x, s = rng.uniform(0, 2, g.n_links), rng.uniform(0, 2, g.n_links)
    gam = line_search(lambda z: link_time(g, z), x, s)
    grid = np.linspace(0, 1, 4001)
    vals = [beckmann(g, x + t * (s - x)) for t in grid]
    assert abs(gam - grid[int(np.argmin(vals))]) <= 1e-3
    assert line_search(lambda z: link_time(g, z), x, x + 0.0) in (0.0, 1.0)


def test_sampling_schemes():
    g = grid_network(3, 4, [(0, 11)], demand=1.0, seed=0)
    ps = enumerate_paths(g)
    st = path_strata(ps)
    rng = np.random.default_rng(0)
    for _ in range(20):
        (u,) = sample_candidates(st, 5, "uniform", rng)
        (s,) = sample_candidates(st, 5, "stratified", rng)
        assert len(u) == 5 and len(np.unique(u)) == 5
        assert set(np.unique(ps.hops[s])) == set(np.unique(ps.hops))       # every stratum represented
    # stratified inclusion probability of a given shortest path is quota / stratum size (Eq. 12)
    short = st[0][0]
    q = int(np.ceil(6 / len(st[0])))
    hits = np.mean([short[0] in sample_candidates(st, 6, "stratified", rng)[0] for _ in range(3000)])
    assert hits == pytest.approx(min(q, len(short)) / len(short), abs=0.04)
    with pytest.raises(ValueError):
        sample_candidates(st, 5, "bogus", rng)


def test_sampled_frank_wolfe_properties():
    g = grid_network(3, 4, [(0, 11), (3, 8)], demand=[1.5, 1.5], seed=1)
    ps = enumerate_paths(g)
    ex = frank_wolfe_sampled(g, ps, None, "exact", iters=200)
    x, _ = frank_wolfe(g, iters=200, tol=0)
    assert np.allclose(ex["flows"], x) and ex["hit"].all()
    r = frank_wolfe_sampled(g, ps, 3, "uniform", iters=200, seed=0)
    assert np.all(np.diff(r["phi"]) <= 1e-12 * r["phi"][0])   # line search: never worse than staying
    assert r["hit"].mean() < 1                             # m = 3 misses the minimiser sometimes
    full = frank_wolfe_sampled(g, ps, ps.n_paths, "uniform", iters=20, seed=0)
    assert full["hit"].all()                                # m >= |P_w|: the sample is the whole set
    # feasibility: every OD's demand leaves its origin
    out = np.bincount(g.tail, r["flows"], g.n_nodes) - np.bincount(g.head, r["flows"], g.n_nodes)
    assert out[0] == pytest.approx(1.5) and out[3] == pytest.approx(1.5)


def test_zo_gradient_unbiased_on_linear_and_quadratic():
    a = np.array([1.0, -2.0, 0.5, 3.0])
    # for a linear F the two-point estimate with b directions averages to a (E[u u^T] = I/d)
    gs = np.mean([zo_gradient(lambda t: a @ t, np.zeros(4), 0.3, 4, np.random.default_rng(i)) for i in range(3000)], 0)
    assert np.allclose(gs, a, atol=0.1)
    # each single estimate is d (a.u) u exactly
    rng = np.random.default_rng(5)
    g1 = zo_gradient(lambda t: a @ t, np.zeros(4), 0.3, 1, np.random.default_rng(5))
    u = rng.standard_normal(4); u /= np.linalg.norm(u)
    assert np.allclose(g1, 4 * (a @ u) * u)


def test_unrolled_gradient_matches_finite_difference():
    g = grid_network(3, 3, [(0, 8), (2, 6)], demand=[1.5, 1.5], seed=3)
    ps = enumerate_paths(g)
    th = torch.full((g.n_links,), 0.1, dtype=torch.float64, requires_grad=True)
    (gr,) = torch.autograd.grad(unrolled_social_cost(g, ps, th, T=20, tau=0.2), th)
    for e in (0, 7):
        d = torch.zeros(g.n_links, dtype=torch.float64); d[e] = 1e-6
        fd = (unrolled_social_cost(g, ps, th.detach() + d, T=20, tau=0.2)
              - unrolled_social_cost(g, ps, th.detach() - d, T=20, tau=0.2)) / 2e-6
        assert gr[e].item() == pytest.approx(fd.item(), rel=1e-5, abs=1e-7)


def test_leaders_reduce_social_cost_and_respect_the_box():
    g = grid_network(3, 3, [(0, 8), (2, 6)], demand=[2.0, 2.0], seed=0)
    ps = enumerate_paths(g)
    x_ue, _ = frank_wolfe(g, iters=1000, tol=1e-8)
    x_so, _ = system_optimum(g, iters=1000, tol=1e-8)
    th = marginal_cost_tolls(g, x_so)
    tl = np.sort(np.argsort(-th)[:4]); tmax = 1.5 * th[tl].max()
    r = zos(g, tl, tmax, outer=20, b=2, inner_iters=40, seed=0)
    assert r["theta"].shape == (21, 4) and np.all((r["theta"] >= 0) & (r["theta"] <= tmax))
    d = diff_stackelberg(g, ps, tl, tmax, outer=20, T=40)
    assert np.all((d["theta"] >= 0) & (d["theta"] <= tmax))
    for theta in (r["theta"][-1], d["theta"][-1]):
        tolls = np.zeros(g.n_links); tolls[tl] = theta
        x, _ = frank_wolfe(g, tolls, iters=1000, tol=1e-8)
        assert total_travel_time(g, x) < total_travel_time(g, x_ue)
        assert total_travel_time(g, x) >= total_travel_time(g, x_so) - 1e-6
    with pytest.raises(ValueError):
        zos(g, tl, 100.0, outer=1)          # delta = 5 >= min t0: costs could turn negative


def test_marginal_cost_is_gradient_of_total_travel_time():
    g = grid_network(3, 3, [(0, 8)], demand=1.0, seed=2)
    x = np.linspace(0.2, 1.4, g.n_links)
    h = 1e-6
    for e in (0, 5, 11):
        d = np.zeros(g.n_links); d[e] = h
        assert marginal_cost(g, x)[e] == pytest.approx((total_travel_time(g, x + d) - total_travel_time(g, x - d)) / (2 * h), rel=1e-6)
