"""paper_suite.interpretability.adapt against independent references: exact finite differences of a linear
objective, the tinytf model itself, numpy's percentile ranks, brute force over a tiny search space, and a
counting wrapper around the objective."""
import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paper_suite.interpretability.adapt import (METHODS, adapt, beam_search, dataset_grounded_scores, gcg,
                                                 greedy_coordinate, random_search, swap_scores)
from paper_suite.tinytf import GPT, GPTConfig, embed_onehot


def test_swap_scores_are_exact_for_an_objective_linear_in_the_embeddings():
    g = torch.Generator().manual_seed(0)
    W_E, c = torch.randn(9, 4, generator=g, dtype=torch.double), torch.randn(5, 4, generator=g, dtype=torch.double)
    ids = torch.randint(9, (5,), generator=g)
    J = lambda x: float((W_E[x] * c).sum())
    S = swap_scores(c, W_E, ids)
    for i, v in itertools.product(range(5), range(9)):
        y = ids.clone(); y[i] = v
        assert S[i, v].item() == pytest.approx(J(y) - J(ids), abs=1e-12)


def test_swap_scores_first_order_on_a_real_model_with_autograd():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=13, block_size=8, n_layer=1, n_head=2, d_model=8)).double().eval()
    ids = torch.randint(13, (6,))
    h0 = (m.tok(ids[None]) + m.pos(torch.arange(6))).detach().requires_grad_(True)
    f = lambda h: m.head(m.ln_f(m.blocks[0](h)))[0, -1, 3]
    grad = torch.autograd.grad(f(h0), h0)[0][0]
    S = swap_scores(grad, m.tok.weight.detach(), ids)
    # directional derivative along a tiny step towards token v equals S / 1 (linearity of the first-order term)
    eps = 1e-6
    for i, v in [(0, 4), (3, 11), (5, 2)]:
        h = h0.detach().clone()
        h[0, i] += eps * (m.tok.weight[v] - m.tok.weight[ids[i]]).detach()
        assert ((f(h) - f(h0)) / eps).item() == pytest.approx(S[i, v].item(), rel=1e-4, abs=1e-7)


def test_swap_scores_rejects_bad_shapes():
    with pytest.raises(ValueError, match="expected grad"):
        swap_scores(torch.zeros(3, 4), torch.zeros(5, 3), torch.zeros(3, dtype=torch.long))


def test_dataset_grounded_scores_against_numpy():
    rng = np.random.default_rng(0)
    d = np.maximum(rng.normal(size=500), 0)
    v = np.array([[0.0, 0.3], [1.0, 9.0]])
    r, q = dataset_grounded_scores(torch.tensor(v), torch.tensor(d))
    assert r.shape == q.shape == (2, 2)
    np.testing.assert_allclose(r.numpy(), v / d.max())
    np.testing.assert_allclose(q.numpy(), [[np.mean(d <= x) for x in row] for row in v])
    with pytest.raises(ValueError, match="positive"):
        dataset_grounded_scores(torch.tensor([1.0]), torch.zeros(4))


def _linear_gated(V=7, L=3, seed=0, thr=0.3):
    g = torch.Generator().manual_seed(seed)
    C = torch.randn(L, V, generator=g)
    f = lambda oh: torch.relu((oh * C[:oh.shape[1]]).sum((1, 2)) - thr * C[:oh.shape[1]].max(1).values.sum())
    best = float(torch.relu(C.max(1).values.sum() * (1 - thr)))          # every position at its best token
    return f, best


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_respects_the_budget_and_reports_honestly(name):
    f, _ = _linear_gated()
    spent = []

    def counted(oh):
        assert oh.dim() == 3 and 1 <= oh.shape[1] <= 3 and oh.shape[2] == 7
        spent.append(oh.shape[0] * (2 if oh.requires_grad else 1))
        return f(oh)

    for budget in (1, 5, 37, 200):
        spent.clear()
        ids, val, hist = METHODS[name](counted, 7, 3, budget, seed=3)
        assert sum(spent) <= budget
        assert ids.shape == (3,) and val == pytest.approx(float(f(F.one_hot(ids, 7).float()[None])))
        assert hist and hist[-1][1] == val and hist[-1][0] <= budget
        assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(hist, hist[1:]))


def test_adapt_finds_the_brute_force_optimum_and_is_seeded():
    f, best = _linear_gated(V=9, L=4, seed=2)
    every = torch.tensor(list(itertools.product(range(9), repeat=4)))
    assert float(f(F.one_hot(every, 9).float()).max()) == pytest.approx(best)     # brute force over 9^4 prompts
    ids, val, _ = adapt(f, 9, 4, 400, seed=0)
    assert val == pytest.approx(best)
    a, b = adapt(f, 9, 4, 150, seed=5), adapt(f, 9, 4, 150, seed=5)
    assert torch.equal(a[0], b[0]) and a[1] == b[1] and a[2] == b[2]


def test_adapt_climbs_where_the_gradient_is_zero_at_random_prompts():
    # most random prompts give 0 and no gradient; the beam's evaluations still find the gate
    f, best = _linear_gated(V=20, L=5, seed=4, thr=0.55)
    g = torch.Generator().manual_seed(0)
    frac_zero = float((f(F.one_hot(torch.randint(20, (2000, 5), generator=g), 20).float()) == 0).float().mean())
    assert frac_zero > 0.9
    assert adapt(f, 20, 5, 400, seed=0)[1] > 0


def test_objective_through_embed_onehot_matches_token_ids():
    torch.manual_seed(1)
    m = GPT(GPTConfig(vocab_size=10, block_size=6, n_layer=2, n_head=2, d_model=8)).eval()
    ids = torch.randint(10, (4, 6))
    h = embed_onehot(m, F.one_hot(ids, 10).float())
    for blk in m.blocks:
        h = blk(h)
    torch.testing.assert_close(m.head(m.ln_f(h)), m(ids)[0])


def test_budget_too_small_and_bad_objective_are_clear_errors():
    f, _ = _linear_gated()
    with pytest.raises(ValueError, match="budget"):
        random_search(f, 7, 3, 0)
    with pytest.raises(ValueError, match=r"\(B,\)"):
        random_search(lambda oh: oh.sum(-1), 7, 3, 10)
