"""paper_suite.federated.goliath against independent references: brute-force assignment over permutations,
hand-computed gradients, a dense grid for the time embedding, and the closed-form B = 1 recovery."""
import itertools

import numpy as np
import pytest
import torch

from paper_suite.federated.goliath import (AttackConfig, TableSpec, TabDenoiser, TimeEmbed, align_and_aggregate,
                                           analytic_recover_b1, client_gradient, diffusion_loss, first_layer_inputs,
                                           grad_distance, invert, invert_time_embedding, load_table, one_hot_cat,
                                           per_cell_accuracy, sample_latents)


def _brute_accuracy(rn, rc, tn, tc, sigma, tol):
    B = len(rn)
    best_cost, best = np.inf, None
    for p in itertools.permutations(range(B)):
        cost = sum((np.abs(rn[i] - tn[p[i]]) / sigma).sum() + (rc[i] != tc[p[i]]).sum() for i in range(B))
        if cost < best_cost - 1e-12:
            best_cost, best = cost, p
    hits = sum((np.abs(rn[i] - tn[best[i]]) <= tol * sigma).sum() + (rc[i] == tc[best[i]]).sum() for i in range(B))
    return hits / (B * (rn.shape[1] + rc.shape[1]))


@pytest.mark.parametrize("seed", range(5))
def test_per_cell_accuracy_brute_force(seed):
    rng = np.random.default_rng(seed)
    tn, tc = rng.normal(size=(5, 3)), rng.integers(0, 3, (5, 2))
    p = rng.permutation(5)
    rn, rc = tn[p] + rng.normal(scale=0.15, size=(5, 3)), np.where(rng.random((5, 2)) < 0.3, 0, tc[p])
    sigma = np.array([1.0, 2.0, 0.5])
    for tol in (0.05, 0.1, 0.2):
        assert per_cell_accuracy(rn, rc, tn, tc, sigma, tol) == pytest.approx(_brute_accuracy(rn, rc, tn, tc, sigma, tol))


def test_per_cell_accuracy_edge_cases():
    tc = np.array([[1], [2]])
    assert per_cell_accuracy(np.zeros((2, 0)), tc[::-1], np.zeros((2, 0)), tc, np.ones(0)) == 1.0
    tn = np.array([[0.0], [1.0]])
    assert per_cell_accuracy(tn + 0.3, np.zeros((2, 0)), tn, np.zeros((2, 0)), np.array([1.0])) == 0.0
    assert per_cell_accuracy(tn + 0.3, np.zeros((2, 0)), tn, np.zeros((2, 0)), np.array([1.0]), tol=0.31) == 1.0


def test_align_and_aggregate_recovers_permuted_copies():
    rng = np.random.default_rng(0)
    tn, tc = rng.normal(size=(6, 2)) * 3, rng.integers(0, 4, (6, 3))
    perms = [np.arange(6)] + [rng.permutation(6) for _ in range(4)]
    noise = [0.0, 0.1, -0.1, 0.05, -0.05]
    rc = [tc[p].copy() for p in perms]
    rc[1][:, 0] = (rc[1][:, 0] + 1) % 4                    # one epoch wrong in one column: outvoted
    num, cat = align_and_aggregate(np.stack([tn[p] + n for p, n in zip(perms, noise)]), np.stack(rc), np.ones(2))
    assert np.allclose(num, tn) and np.array_equal(cat, tc)


def test_majority_tie_goes_to_smallest_id():
    num = np.zeros((2, 1, 1))
    _, cat = align_and_aggregate(num, np.array([[[3]], [[1]]]), np.ones(1))
    assert cat.tolist() == [[1]]


def test_first_layer_inputs_from_autograd():
    torch.manual_seed(0)
    lin = torch.nn.Linear(7, 5).double()
    u = torch.randn(1, 7, dtype=torch.float64)
    loss = torch.relu(lin(u)).pow(2).sum() + lin(u)[0, 0]
    gw, gb = torch.autograd.grad(loss, [lin.weight, lin.bias])
    assert torch.allclose(first_layer_inputs(gw, gb), u[0])
    with pytest.raises(ValueError):
        first_layer_inputs(torch.zeros(3, 2), torch.zeros(3))


def test_invert_time_embedding_beyond_grid():
    emb = TimeEmbed(16).double()
    t = torch.rand(20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    rec = invert_time_embedding(emb(t), emb, grid=101)       # grid spacing 0.01
    assert (rec - t).abs().max() < 1e-6
    # a generic callable, refined inside [lo, hi]
    f = lambda s: torch.stack([torch.cos(3 * s), torch.sin(3 * s)], 1)
    assert torch.allclose(invert_time_embedding(f(torch.tensor([0.3, 0.71])), f, 0.2, 0.8, grid=11),
                          torch.tensor([0.3, 0.71]), atol=1e-6)


@pytest.mark.parametrize("regime", ["gaussian", "mixed"])
def test_b1_analytic_recovery_is_exact(regime):
    spec = TableSpec(3, (3, 4, 2))
    torch.manual_seed(1)
    model = TabDenoiser(spec, regime, hidden=32).double()
    gen = torch.Generator().manual_seed(2)
    for _ in range(10):
        x = torch.randn(1, 3, dtype=torch.float64)
        c = torch.stack([torch.randint(0, k, (1,), generator=gen) for k in spec.cards], 1)
        lat = sample_latents(spec, regime, 1, gen, torch.float64, (0.02, 0.98))
        r = analytic_recover_b1(model, client_gradient(model, x, c, lat))
        assert torch.allclose(r["num"], x[0], atol=1e-6) and r["cat"].tolist() == c[0].tolist()
        assert abs(float(r["t"] - lat["t"][0])) < 1e-5
        if regime == "mixed":
            assert r["mask"].tolist() == lat["mask"][0].tolist()


def test_loss_by_hand_mixed():
    spec = TableSpec(1, (2,))
    torch.manual_seed(0)
    m = TabDenoiser(spec, "mixed", hidden=8).double()
    x, p = torch.tensor([[0.5]], dtype=torch.float64), one_hot_cat(spec, torch.tensor([[1]]), torch.float64)
    t, eps, mask = torch.tensor([0.25], dtype=torch.float64), torch.tensor([[0.3]], dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64)
    a, s = (v.item() for v in __import__("paper_suite.federated.goliath", fromlist=["alpha_num"]).alpha_num(t))
    u = torch.tensor([[a * 0.5 + s * 0.3, 0.0, 0.0, 1.0]], dtype=torch.float64)
    eh, lg = m(u, t)
    ref = (eh - eps).pow(2).sum() + 4.0 * -torch.log_softmax(lg, 1)[0, 1]      # w(0.25) = 4, masked cell
    assert torch.allclose(diffusion_loss(m, x, p, t, eps, mask), ref)


def test_grad_distance_kinds():
    a = [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0])]
    assert float(grad_distance(a, a, [[0], [1]], "block")) == pytest.approx(0.0, abs=1e-6)
    assert float(grad_distance([a[0], -a[1]], a, [[0], [1]], "cos")) == pytest.approx(1.6)    # cos = (1 − 4)/5
    with pytest.raises(ValueError, match="allowed"):
        grad_distance(a, a, [[0]], "huber")


def test_oracle_attack_beats_chance_on_tiny_problem():
    spec = TableSpec(2, (3,))
    torch.manual_seed(0)
    m = TabDenoiser(spec, "mixed", hidden=16).double()       # the chapter runs in float64
    gen = torch.Generator().manual_seed(0)
    x, c = torch.randn(2, 2, dtype=torch.float64), torch.tensor([[0], [2]])
    lat = sample_latents(spec, "mixed", 2, gen)
    g = client_gradient(m, x, c, lat)
    rn, rc = invert(m, g, 2, AttackConfig(oracle=True, cyclic=False, restarts=1, cycles=4, n_rows=25, n_lat=25, lr=0.05), 0,
                    np.ones(2), truth_lat=lat)
    assert rn.shape == (2, 2) and rc.shape == (2, 1)
    assert per_cell_accuracy(rn, rc, x.numpy(), c.numpy(), np.ones(2), tol=0.2) >= 0.5


def test_bad_inputs_name_what_is_allowed():
    with pytest.raises(ValueError, match="allowed: gaussian, mixed"):
        TabDenoiser(TableSpec(1, ()), "poisson")
    with pytest.raises(ValueError, match="allowed: copula"):
        load_table("mnist", 0)


def test_tables_load_offline():
    for name in ("copula", "iris", "spector"):
        num, cat = load_table(name, 0, 100)
        assert len(num) == len(cat) and num.shape[1] > 0 and cat.dtype == np.int64
