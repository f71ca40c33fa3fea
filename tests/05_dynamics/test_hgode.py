"""paper_suite.dynamics.hgode against closed forms, brute force, the toolkit's linear diffusion and properties."""
import math

import numpy as np
import pytest
import torch

from paper_suite.dynamics.hgode import (FOLD_FORCE, GCN, AttentionDiffusionFunc, HGODEFunc, attention_diffusion,
                                        double_well_drift, double_well_equilibria, edge_force, gate, gated_edges,
                                        hgode, loop_area, neighbour_softmax, sgc_features, sweep_double_well,
                                        switch_points, train_gcn, undirected)
from paper_suite.graphs import (LinearDiffusionFunc, add_self_loops, csbm, effective_rank, normalized_adjacency,
                                split_nodes, time_grid)


@pytest.fixture(scope="module")
def g():
    return csbm(45, 3, 0.5, 0.03, 4, 3.0, seed=0)


def test_equilibria_and_fold():
    for F in (-0.3, 0.0, 0.2):
        r = double_well_equilibria(F)
        assert len(r) == 3 and np.allclose(double_well_drift(r, F), 0, atol=1e-10)
    assert len(double_well_equilibria(0.5)) == 1
    # the fold: u − u³ + F and its derivative 1 − 3u² vanish together at u = ±1/√3, F = ∓F_c
    u = 1 / math.sqrt(3)
    assert abs(double_well_drift(u, -FOLD_FORCE)) < 1e-12 and abs(1 - 3 * u * u) < 1e-12
    assert len(double_well_equilibria(FOLD_FORCE * 0.999)) == 3 and len(double_well_equilibria(FOLD_FORCE * 1.001)) == 1


def test_loop_area_closed_form():
    # a slow sweep approaches the quasi-static area 3/2 of Eq. (10) from above; faster sweeps enclose more
    a_slow, a_fast = loop_area(*sweep_double_well(1e-4)), loop_area(*sweep_double_well(2e-2))
    assert 1.5 < a_slow < 1.53 and a_fast > a_slow
    up, down = switch_points(*sweep_double_well(1e-4))
    assert FOLD_FORCE < up < FOLD_FORCE + 0.01 and -FOLD_FORCE - 0.01 < down < -FOLD_FORCE
    # beyond the bistable range there is no loop at all: sweeping only inside one well is reversible
    th = np.linspace(0, 2 * np.pi, 1001)
    assert loop_area(np.cos(th), np.sin(th)) == pytest.approx(np.pi, rel=1e-4)


def test_neighbour_softmax_brute_force(g):
    ei, _ = add_self_loops(g.edge_index, g.n)
    s = torch.randn(ei.shape[1], dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 30
    a = neighbour_softmax(s, ei[0], g.n)
    for i in (0, 7, 30):
        m = ei[0] == i
        assert torch.allclose(a[m], torch.softmax(s[m], 0))


def test_attention_is_row_stochastic_and_contracts(g):
    f = AttentionDiffusionFunc(g.edge_index, g.n)
    c = torch.ones(g.n, 4, dtype=torch.float64) * torch.tensor([1.0, 2, 3, 4], dtype=torch.float64)
    assert torch.allclose(f(0, c), torch.zeros_like(c))            # consensus is a fixed point
    # rows move by convex combinations: each coordinate's max over nodes never rises, its min never falls
    X = attention_diffusion(g.edge_index, g.x, time_grid(20.0, 0.1, 41), step=0.1)
    hi, lo = X.max(1).values, X.min(1).values
    assert (hi[1:] <= hi[:-1] + 1e-12).all() and (lo[1:] >= lo[:-1] - 1e-12).all()
    assert (hi[-1] - lo[-1] < hi[0] - lo[0]).all()
    # well-separated, large features make the softmax nearly block-diagonal: the collapse stalls (metastable)
    Y = attention_diffusion(g.edge_index, g.x, time_grid(300.0, 0.25, 3), step=0.25)
    assert effective_rank(Y[-1]) > 1.5


def test_edge_force_scale_free_and_floor(g):
    src, dst = undirected(g.edge_index)
    F = edge_force(g.x, src, dst, 1.0, 2.0)
    assert torch.allclose(edge_force(1e-3 * g.x, src, dst, 1.0, 2.0), F, atol=1e-6)
    assert F.mean().item() == pytest.approx(1.0, abs=1e-6)               # mean of d̂ is one (τ − 1 with κ = 1)
    const = torch.ones(g.n, 4, dtype=torch.float64)
    assert torch.allclose(edge_force(const, src, dst, 1.0, 2.0), torch.full_like(F, 2.0))   # floor: consensus -> F = κτ


def test_hgode_with_open_gates_is_linear_diffusion(g):
    f = HGODEFunc(g.edge_index, g.n, kappa=1.0, tau=2.0, beta=60.0)
    u = torch.full((f.src.shape[0],), 1.0, dtype=torch.float64)
    dx, du = f(0.0, (g.x, u))
    assert torch.allclose(dx, LinearDiffusionFunc(g.edge_index, g.n)(0.0, g.x), atol=1e-12)
    src, dst = undirected(g.edge_index)
    assert torch.allclose(du, double_well_drift(u, edge_force(g.x, src, dst, 1.0, 2.0)))
    ei, w = gated_edges(src, dst, gate(u, 60.0))
    assert ei.shape == g.edge_index.shape and set(map(tuple, ei.T.tolist())) == set(map(tuple, g.edge_index.T.tolist()))


def test_hgode_closed_gates_freeze_features(g):
    # every edge deep in the insulated well and a strongly negative bias: X barely moves, u stays insulated
    t = torch.tensor([0.0, 5.0], dtype=torch.float64)
    X, U = hgode(g.edge_index, g.x, t, kappa=1.0, tau=2.0, beta=6.0, u0=-1.5, step=0.05, bias=lambda t: -5.0)
    assert (U[-1] < -1).all()
    from paper_suite.graphs import linear_diffusion
    moved_open = float((linear_diffusion(g.edge_index, g.x, t, step=0.05)[-1] - g.x).abs().max())
    assert float((X[-1] - g.x).abs().max()) < 1e-2 * moved_open


def test_hgode_rk4_matches_dopri5(g):
    t = torch.tensor([0.0, 3.0], dtype=torch.float64)
    Xa, Ua = hgode(g.edge_index, g.x, t, kappa=1.0, tau=2.0, beta=6.0, step=0.02)
    Xb, Ub = hgode(g.edge_index, g.x, t, kappa=1.0, tau=2.0, beta=6.0, method="dopri5", step=None)
    assert float((Xa[-1] - Xb[-1]).abs().max()) < 1e-5 and float((Ua[-1] - Ub[-1]).abs().max()) < 1e-5


def test_sgc_and_gcn(g):
    A = normalized_adjacency(g.edge_index, g.n, kind="sym")
    assert torch.allclose(sgc_features(g.edge_index, g.x, 4), torch.linalg.matrix_power(A, 4) @ g.x)
    m = GCN(4, 8, 3, depth=3)
    assert len(m.lins) == 3 and m.lins[-1].out_features == 3
    tr, te = split_nodes(g.y, 0.5, 0)
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)      # tiny matrices: threads only add overhead on a shared machine
    try:
        assert train_gcn(g.edge_index, g.x, g.y, tr, te, depth=2, hidden=8, epochs=200, seed=0) > 0.8
    finally:
        torch.set_num_threads(n_threads)
