"""Unit tests for paper_suite.generative.kcgm against references that share none of its code: scikit-learn's
RBF kernel, double loops over index pairs, closed-form objectives differentiated by autograd and averaged
exactly over all sample tuples of a categorical model, and the GPT's own full forward pass."""
import itertools
import math

import numpy as np
import pytest
import torch
from sklearn.metrics.pairwise import rbf_kernel

from paper_suite.generative.kcgm import (
    ALPHABET, _cached_step, categorical_mmd2, exact_expected_gradient, features, finetune, is_valid,
    kcgm_surrogate, mean_matching_surrogate, mmd2_unbiased, mmd_weights, rbf_mixture_kernel, sample_corpus,
    sample_strings, score_surrogate, sequence_logprob)
from paper_suite.tinytf import GPT, CharTokenizer, GPTConfig

BW = [0.4, 1.0, 2.5]


def _data(seed=0, n=6, m=5, p=3):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, p, generator=g, dtype=torch.float64),
            torch.randn(m, p, generator=g, dtype=torch.float64) + 0.3)


def _k(a, b):
    return float(np.mean([math.exp(-float(((a - b) ** 2).sum()) / (2 * h * h)) for h in BW]))


def test_kernel_matches_sklearn_and_keeps_dtype():
    x, y = _data()
    ref = np.mean([rbf_kernel(x.numpy(), y.numpy(), gamma=1 / (2 * h * h)) for h in BW], 0)
    assert np.allclose(rbf_mixture_kernel(x, y, BW).numpy(), ref, atol=1e-14)
    assert rbf_mixture_kernel(x.float(), y.float(), BW).dtype == torch.float32
    with pytest.raises(ValueError, match="positive"):
        rbf_mixture_kernel(x, y, [1.0, -1.0])
    with pytest.raises(ValueError, match="at least one"):
        rbf_mixture_kernel(x, y, [])


def test_mmd2_unbiased_matches_a_double_loop():
    x, y = _data(1)
    n, m = len(x), len(y)
    loop = (sum(_k(x[i], x[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
            + sum(_k(y[i], y[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
            - 2 * sum(_k(x[i], y[j]) for i in range(n) for j in range(m)) / (n * m))
    v = mmd2_unbiased(x, y, BW)
    assert v.ndim == 0 and abs(float(v) - loop) < 1e-12
    assert mmd2_unbiased(x.float(), y.float(), BW).dtype == torch.float32
    with pytest.raises(ValueError, match="at least 2"):
        mmd2_unbiased(x[:1], y, BW)


def test_mmd2_unbiased_is_unbiased_for_equal_distributions():
    g = torch.Generator().manual_seed(3)
    vals = [float(mmd2_unbiased(torch.randn(20, 2, generator=g, dtype=torch.float64),
                                torch.randn(15, 2, generator=g, dtype=torch.float64), [1.0])) for _ in range(400)]
    assert abs(np.mean(vals)) < 4 * np.std(vals) / math.sqrt(len(vals))


def test_weights_match_a_loop():
    x, y = _data(2)
    n, m = len(x), len(y)
    loop = [2 / (n - 1) * sum(_k(x[i], x[j]) for j in range(n) if j != i) - 2 / m * sum(_k(x[i], y[j]) for j in range(m))
            for i in range(n)]
    r = mmd_weights(rbf_mixture_kernel(x, x, BW), rbf_mixture_kernel(x, y, BW))
    assert np.allclose(r.numpy(), loop, atol=1e-12)


def test_surrogate_gradient_is_the_weighted_score_sum():
    # one batch: grad L = (1/n) sum_i sg[r_i + beta (lp_i - lp0_i) - b] grad lp_i, checked with per-sample grads
    g = torch.Generator().manual_seed(4)
    th = torch.randn(5, generator=g, dtype=torch.float64, requires_grad=True)
    idx = torch.tensor([0, 3, 3, 1])
    H = torch.randn(5, 2, generator=g, dtype=torch.float64)
    R = torch.randn(4, 2, generator=g, dtype=torch.float64)
    lp0 = torch.log_softmax(torch.randn(5, generator=g, dtype=torch.float64), 0)[idx]
    lp = torch.log_softmax(th, 0)[idx]
    L = kcgm_surrogate(lp, H[idx], R, BW, beta=0.3, logp_base=lp0, baseline=0.2)
    (gL,) = torch.autograd.grad(L, th)
    r = mmd_weights(rbf_mixture_kernel(H[idx], H[idx], BW), rbf_mixture_kernel(H[idx], R, BW))
    w = r + 0.3 * (lp.detach() - lp0) - 0.2
    ref = sum(w[i] * torch.autograd.grad(torch.log_softmax(th, 0)[idx[i]], th)[0] for i in range(4)) / 4
    assert torch.allclose(gL, ref, atol=1e-13)
    assert kcgm_surrogate(lp.float(), H[idx].float(), R.float(), BW).dtype == torch.float32
    with pytest.raises(ValueError, match="logp_base"):
        score_surrogate(lp, r, beta=0.1)


def _closed_form_objective(theta, theta0, H, R, beta):
    """MMD^2(softmax(theta) on atoms H, empirical R) + beta KL, written out with numpy-free torch sums."""
    p = torch.softmax(theta, 0)
    K = len(theta)
    exp_pairs = sum(p[a] * p[b] * _kt(H[a], H[b]) for a in range(K) for b in range(K))
    cross = sum(p[a] * _kt(H[a], R[j]) for a in range(K) for j in range(len(R))) / len(R)
    m = len(R)
    rr = sum(_kt(R[i], R[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    kl = (p * (torch.log(p) - torch.log_softmax(theta0, 0))).sum()
    return exp_pairs - 2 * cross + rr + beta * kl


def _kt(a, b):
    return sum(torch.exp(-((a - b) ** 2).sum() / (2 * h * h)) for h in BW) / len(BW)


@pytest.mark.parametrize("baseline", [0.0, 1.7])
def test_exact_expectation_equals_exact_gradient(baseline):
    g = torch.Generator().manual_seed(5)
    theta, theta0 = (torch.randn(3, generator=g, dtype=torch.float64) for _ in range(2))
    H, R = torch.randn(3, 2, generator=g, dtype=torch.float64), torch.randn(4, 2, generator=g, dtype=torch.float64)
    th = theta.clone().requires_grad_(True)
    (exact,) = torch.autograd.grad(_closed_form_objective(th, theta0, H, R, 0.5), th)
    # enumerate all 3^3 tuples by hand (independent of exact_expected_gradient)
    tot = torch.zeros(3, dtype=torch.float64)
    for tup in itertools.product(range(3), repeat=3):
        idx = torch.tensor(tup)
        t2 = theta.clone().requires_grad_(True)
        lp = torch.log_softmax(t2, 0)[idx]
        L = kcgm_surrogate(lp, H[idx], R, BW, beta=0.5, logp_base=torch.log_softmax(theta0, 0)[idx], baseline=baseline)
        (gL,) = torch.autograd.grad(L, t2)
        tot += lp.detach().sum().exp() * gL
    assert torch.allclose(tot, exact, atol=1e-12)
    helper = exact_expected_gradient(theta, H, R, BW, 3, beta=0.5, theta_base=theta0, baseline=baseline)
    assert torch.allclose(helper, exact, atol=1e-12)
    assert abs(float(categorical_mmd2(torch.softmax(theta, 0), H, R, BW))
               - float(_closed_form_objective(theta, theta, H, R, 0.0))) < 1e-12


def test_mean_matching_is_the_gradient_of_the_squared_mean_difference():
    g = torch.Generator().manual_seed(6)
    theta = torch.randn(3, generator=g, dtype=torch.float64)
    H, R = torch.randn(3, 2, generator=g, dtype=torch.float64), torch.randn(5, 2, generator=g, dtype=torch.float64)
    th = theta.clone().requires_grad_(True)
    (exact,) = torch.autograd.grad(((torch.softmax(th, 0) @ H - R.mean(0)) ** 2).sum(), th)
    est = exact_expected_gradient(theta, H, R, BW, 3,
                                  surrogate=lambda lp, f, lp0: mean_matching_surrogate(lp, f, R, baseline=0.4))
    assert torch.allclose(est, exact, atol=1e-12)


@pytest.mark.parametrize("s,ok", [("CC", True), ("C1CC1", True), ("C(=O)N", True), ("N(C)(C)C", True),
                                  ("OC1=CC=CC=C1", True), ("C12CC1C2", True), ("O=O", True), ("", False),
                                  ("(C)", False), ("N(C)(C)(C)C", False), ("C1CC", False), ("C11", False),
                                  ("C()", False), ("C=", False), ("O=C=O=C", False), ("CC)", False), ("C(C", False),
                                  ("1CC1", False), ("CX", False), ("C=(C)C", False)])
def test_validity(s, ok):
    assert is_valid(s) is ok


def test_features_and_corpus():
    assert features(["C1CC(N)O1", "NN"]).mul(10).tolist() == [[1, 1, 1, 1, 5], [2, 0, 0, 0, 2]]
    corpus = sample_corpus(200, "base", seed=0)
    refs = sample_corpus(200, "reference", seed=0)
    assert corpus == sample_corpus(200, "base", seed=0) and all(map(is_valid, corpus + refs))
    fb, fr = features(corpus).mean(0), features(refs).mean(0)
    assert fr[0] > fb[0] and fr[2] > fb[2]          # the reference class has more N and more rings


def test_sampling_and_sequence_logprob_match_the_full_forward():
    torch.manual_seed(0)
    tok = CharTokenizer(ALPHABET)
    m = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=12, n_layer=2, n_head=2, d_model=16))
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    m.eval()
    ids = torch.randint(0, tok.vocab_size, (3, 8))
    cache = [[None, None] for _ in m.blocks]
    with torch.no_grad():
        inc = torch.stack([_cached_step(m, ids[:, t], t, cache) for t in range(8)], 1)
    assert torch.allclose(inc, m(ids)[0], atol=1e-5)
    s, seqs, L = sample_strings(m, tok, 6, torch.Generator().manual_seed(1))
    assert len(s) == 6 and seqs.shape[0] == 6 and int(L.max()) <= 11
    for i in range(6):
        assert s[i] == tok.decode(seqs[i, 1:int(L[i]) + 1]).replace("\n", "")
    lp = sequence_logprob(m, seqs, L)
    with torch.no_grad():
        loop = [sum(float(torch.log_softmax(m(seqs[i:i + 1, :t + 1])[0][0, -1], -1)[seqs[i, t + 1]])
                    for t in range(int(L[i]))) for i in range(6)]
    assert np.allclose(lp.detach().numpy(), loop, atol=1e-4)


def test_finetune_rejects_unknown_methods():
    tok = CharTokenizer(ALPHABET)
    m = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=8, n_layer=1, n_head=1, d_model=8))
    with pytest.raises(ValueError, match="kcgm, mean, reward"):
        finetune(m, m, tok, torch.zeros(3, 5), method="ppo", steps=1, n=4, lr=1e-3)
