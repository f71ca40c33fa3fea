"""paper_suite.interpretability.tgcl against independent references: closed forms, brute force over permutations,
scikit-learn's Lasso, finite differences, and planted concepts."""
import itertools

import numpy as np
import pytest
import torch
from sklearn.linear_model import Lasso

from paper_suite.interpretability.tgcl import (baseline_concepts, concept_overlap, deletion_drop, finish_run,
                                               hoyer_sparsity, ista, matched_cosine, probe_relevance, split_run,
                                               tgcl_concepts, token_logprob, whitener)
from paper_suite.tinyvlm import make_vlm

torch.set_num_threads(1)        # tiny tensors: threads only add overhead on a shared machine


def _cos(u, v):
    return abs(float(u @ v / (u.norm() * v.norm())))


def test_hoyer_closed_forms_and_formula():
    x = torch.tensor([[0.0, 0, 2, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])
    h = hoyer_sparsity(x)
    assert h[0] == pytest.approx(1.0) and h[1] == pytest.approx(0.0) and torch.isnan(h[2])
    a = np.random.default_rng(3).normal(size=(4, 9))
    ref = (3 - np.abs(a).sum(1) / np.linalg.norm(a, axis=1)) / 2
    assert np.allclose(hoyer_sparsity(torch.tensor(a)).numpy(), ref)
    # scale invariance, and batch dims are kept
    assert torch.allclose(hoyer_sparsity(torch.tensor(a) * 7.5), hoyer_sparsity(torch.tensor(a)))
    assert hoyer_sparsity(torch.rand(2, 3, 6)).shape == (2, 3)
    with pytest.raises(ValueError, match="at least 2"):
        hoyer_sparsity(torch.ones(3, 1))


def test_matched_cosine_brute_force_and_invariances():
    r = np.random.default_rng(0)
    for K1, K2 in [(3, 3), (3, 5), (5, 2)]:
        A, B = torch.tensor(r.normal(size=(K1, 4))), torch.tensor(r.normal(size=(K2, 4)))
        m = min(K1, K2)
        if K1 <= K2:
            best = max(np.mean([_cos(A[i], B[p[i]]) for i in range(K1)]) for p in itertools.permutations(range(K2), K1))
        else:
            best = max(np.mean([_cos(A[p[j]], B[j]) for j in range(K2)]) for p in itertools.permutations(range(K1), K2))
        assert matched_cosine(A, B) == pytest.approx(best)
        assert matched_cosine(B, A) == pytest.approx(best)
        assert 0 <= best <= 1 and m >= 2
    A = torch.tensor(r.normal(size=(6, 8)))
    assert matched_cosine(A, -3 * A[torch.randperm(6)]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="dimensions"):
        matched_cosine(torch.ones(2, 3), torch.ones(2, 4))


def test_overlap_double_loop_and_orthogonal():
    B = torch.tensor(np.random.default_rng(1).normal(size=(5, 7)))
    ref = np.mean([_cos(B[i], B[j]) for i in range(5) for j in range(5) if i != j])
    assert concept_overlap(B) == pytest.approx(ref)
    Q = torch.linalg.qr(torch.randn(7, 4, dtype=torch.float64))[0].T
    assert concept_overlap(Q) == pytest.approx(0.0, abs=1e-12)
    assert concept_overlap(torch.ones(3, 4)) == pytest.approx(1.0)


@pytest.mark.parametrize("nonneg", [False, True])
def test_ista_matches_sklearn_lasso(nonneg):
    g = torch.Generator().manual_seed(2)
    D = torch.randn(5, 15, generator=g, dtype=torch.float64)
    X = torch.randn(4, 15, generator=g, dtype=torch.float64)
    C = ista(X, D, 0.7, n_iter=4000, nonneg=nonneg)
    ref = np.stack([Lasso(alpha=0.7 / 15, fit_intercept=False, positive=nonneg, tol=1e-12, max_iter=100000)
                    .fit(D.T.numpy(), X[i].numpy()).coef_ for i in range(4)])
    assert np.allclose(C.numpy(), ref, atol=1e-5)


def test_whitener_whitens():
    X = torch.randn(500, 6, dtype=torch.float64) @ torch.randn(6, 6, dtype=torch.float64)
    mu, W, Winv = whitener(X, ridge=0.0)
    Z = (X - mu) @ W
    assert torch.allclose(torch.cov(Z.T), torch.eye(6, dtype=torch.float64), atol=1e-8)
    assert torch.allclose(W @ Winv, torch.eye(6, dtype=torch.float64), atol=1e-8)


def _planted(seed=1, d=16, K=3):
    g = torch.Generator().manual_seed(seed)
    V = torch.linalg.qr(torch.randn(d, K, generator=g))[0].T
    u = torch.randn(d, generator=g)
    u /= u.norm()

    def patches(n, k=None):
        x = 5 * torch.rand(n, 1, generator=g) * u + 0.3 * torch.randn(n, d, generator=g)
        return x + (2 * V[k] if k is not None else 0)
    pos = [patches(200, k) for k in range(K)]
    neg = [torch.cat([patches(200)] + [patches(100, j) for j in range(K) if j != k]) for k in range(K)]
    return V, pos, neg


def test_tgcl_recovers_planted_concepts_with_orientation():
    V, pos, neg = _planted()
    T = tgcl_concepts(pos, neg, seed=0, steps=60)
    assert T.shape == V.shape and torch.allclose(T.norm(dim=1), torch.ones(3), atol=1e-5)
    assert ((T.double() * V.double()).sum(1) > 0.9).all()            # row k is concept k, positive orientation
    for k in range(3):
        assert (pos[k] @ T[k]).mean() > (neg[k] @ T[k]).mean()
    # the positive mean alone is dominated by the shared nuisance
    mp = torch.stack([p.mean(0) / p.mean(0).norm() for p in pos])
    assert ((mp * V).sum(1).abs() < 0.9).all()
    # same seed, same answer; swapping the concepts' order swaps the rows
    assert torch.equal(T, tgcl_concepts(pos, neg, seed=0, steps=60))
    T2 = tgcl_concepts(pos[::-1], neg[::-1], seed=0, steps=60)
    assert ((T2.flip(0).double() * V.double()).sum(1) > 0.9).all()
    with pytest.raises(ValueError, match="same length"):
        tgcl_concepts(pos, neg[:2])


def test_baselines_shapes_orientation_and_errors():
    V, pos, neg = _planted(seed=4)
    for m in ("PCA", "KMeans", "DictLearning", "SAE", "CAV", "DiffMeans"):
        B = baseline_concepts(m, pos, neg, seed=0, sae_steps=50)
        assert B.shape == (3, 16) and torch.allclose(B.norm(dim=1), torch.ones(3), atol=1e-5)
        for k in range(3):
            assert (pos[k] @ B[k]).mean() >= (neg[k] @ B[k]).mean()
    DM = baseline_concepts("DiffMeans", pos, neg)
    assert ((DM.double() * V.double()).sum(1) > 0.9).all()
    with pytest.raises(ValueError, match="allowed"):
        baseline_concepts("ICA", pos, neg)


def _tiny():
    m = make_vlm(12, 6, vocab_size=9, max_text=5, d_model=16, enc_width=16, n_head=2, seed=0).eval()
    img = torch.rand(3, 3, 12, 12, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([[0, 3, 4, 5], [0, 4, 3, 5], [0, 5, 5, 3]])
    tgt = torch.tensor([[3, 4, 5, 1], [4, 3, 5, 1], [5, 5, 3, 1]])
    return m, img, ids, tgt


def test_split_run_reassembles_the_model():
    m, img, ids, tgt = _tiny()
    with torch.no_grad():
        full = m(img, ids)[0].log_softmax(-1)
        for layer in (0, 1):
            assert torch.allclose(finish_run(m, split_run(m, img, ids, layer), layer), full, atol=1e-5)


def test_probe_relevance_is_gradient_times_activation():
    m, img, ids, tgt = _tiny()
    r = probe_relevance(m, img, ids, tgt, 3, layer=0)
    with torch.no_grad():
        h = split_run(m, img, ids, 0)
        base = token_logprob(finish_run(m, h, 0), tgt, 3).sum()
        for n in (0, 3):
            eta = 1e-3
            h2 = h.clone()
            h2[:, n] *= 1 - eta
            fd = (token_logprob(finish_run(m, h2, 0), tgt, 3).sum() - base) / -eta
            assert float(r[:, n].sum()) == pytest.approx(float(fd), rel=2e-2, abs=1e-4)


def test_deletion_drop_edit():
    m, img, ids, tgt = _tiny()
    with torch.no_grad():
        h = split_run(m, img, ids, 0)
    d = torch.randn(16)
    assert torch.allclose(deletion_drop(m, h, tgt, 3, d, 0, strength=0.0), torch.zeros(3), atol=1e-6)
    # s = 1 (linedit's projection) agrees with the explicit formula at s -> 1, and is invariant to d's scale
    a = deletion_drop(m, h, tgt, 3, d, 0)
    assert torch.allclose(a, deletion_drop(m, h, tgt, 3, d, 0, strength=1.0 - 1e-9), atol=1e-4)
    assert torch.allclose(a, deletion_drop(m, h, tgt, 3, 5 * d, 0), atol=1e-5)
    # by hand: project, then run the rest of the decoder
    v = h[:, :m.n_vis]
    u = d / d.norm()
    he = torch.cat([v - (v @ u)[..., None] * u, h[:, m.n_vis:]], 1)
    with torch.no_grad():
        after = token_logprob(finish_run(m, he, 0), tgt, 3)[tgt == 3]
        before = token_logprob(finish_run(m, h, 0), tgt, 3)[tgt == 3]
    assert torch.allclose(a, before - after, atol=1e-5)
    # removing a direction with no component in any patch activation changes nothing
    null = torch.linalg.svd(v.reshape(-1, 16), full_matrices=True)[2][-1]
    assert torch.allclose(deletion_drop(m, h, tgt, 3, null, 0), torch.zeros(3), atol=1e-5)
