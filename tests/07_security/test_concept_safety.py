"""paper_suite.security.concept_safety against references that share no code with it: per-sequence
F.cross_entropy (Eq. 2), greedy decoding one prompt and one token at a time (Eq. 1), the sorted-order Gini
formula (Eq. 4), gradients by backward passes and central finite differences (Eqs. 5-6), and properties of the
knowledge base, the fine-tuning sets, the kernel prediction (Eq. 7) and the bootstrap (Eq. 10)."""
import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paper_suite.security.concept_safety import (REFUSAL, bootstrap_concepts, bootstrap_prompts, concept_gradient_kernel,
                                                 concept_gradients, familiarity_gradients, ft_docs, gini, make_kb,
                                                 predicted_dz, pretrain_docs, refusal_rate, statement_nll)
from paper_suite.tinytf import GPT, GPTConfig


def tiny(seed=0, vocab=20, dtype=torch.float32):
    torch.manual_seed(seed)
    m = GPT(GPTConfig(vocab, block_size=12, n_layer=1, n_head=2, d_model=16)).to(dtype).eval()
    with torch.no_grad():     # larger weights, so greedy decoding is not degenerate
        for p in m.parameters():
            p.mul_(8.0)
    return m


def seqs(lengths, vocab=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(vocab, (L,), generator=g) for L in lengths]


def test_statement_nll_matches_cross_entropy_per_sequence():
    m = tiny()
    ids = seqs([2, 3, 7, 12, 5])
    with torch.no_grad():
        ref = torch.stack([F.cross_entropy(m(x[None])[0][0, :-1], x[1:]) for x in ids])
        got = statement_nll(m, ids)
        got_small_batches = statement_nll(m, ids, batch=2)
    assert torch.allclose(got, ref, atol=1e-5)
    assert torch.allclose(got_small_batches, ref, atol=1e-5)


def test_statement_nll_rejects_bad_input():
    m = tiny()
    with pytest.raises(ValueError, match="at least 2 tokens"):
        statement_nll(m, [torch.tensor([3])])
    with pytest.raises(ValueError, match="block size"):
        statement_nll(m, seqs([13]))


def greedy(m, x, k):
    for _ in range(k):
        with torch.no_grad():
            x = torch.cat([x, m(x[None])[0][0, -1].argmax()[None]])
    return x[-k:]


def test_refusal_rate_matches_one_prompt_at_a_time_decoding():
    m = tiny(1)
    prompts = seqs([3, 3, 4, 5, 5, 5, 8], seed=2)
    for k in (1, 2, 3):
        r = greedy(m, prompts[0], k)
        ref = [float(torch.equal(greedy(m, p, k), r)) for p in prompts]
        got = refusal_rate(m, prompts, r, per_prompt=True)
        assert got.tolist() == ref and ref[0] == 1.0
        assert refusal_rate(m, prompts, r) == pytest.approx(np.mean(ref))


def test_refusal_rate_errors_and_mode():
    m = tiny()
    m.train()
    with pytest.raises(ValueError, match="at least one prompt"):
        refusal_rate(m, [], torch.tensor([1]))
    with pytest.raises(ValueError, match="block size"):
        refusal_rate(m, seqs([11]), torch.tensor([1, 2, 3]))
    refusal_rate(m, seqs([3]), torch.tensor([1]))
    assert m.training                       # the model's mode is restored


def gini_sorted(x):
    x = np.sort(np.asarray(x, float))
    n = len(x)
    return float(np.sum((2 * np.arange(1, n + 1) - n - 1) * x) / (n * x.sum()))


@pytest.mark.parametrize("seed", range(5))
def test_gini_matches_sorted_formula(seed):
    x = np.random.default_rng(seed).exponential(size=17)
    assert gini(x) == pytest.approx(gini_sorted(x), abs=1e-12)


def test_gini_closed_forms_and_errors():
    assert gini([2.0, 2.0, 2.0]) == 0.0 and gini(np.zeros(4)) == 0.0
    assert gini([0, 0, 0, 0, 1]) == pytest.approx(0.8)
    assert gini([1, 3]) == pytest.approx(gini([10, 30]))           # scale invariance
    with pytest.raises(ValueError):
        gini([1.0, -1.0])
    with pytest.raises(ValueError):
        gini([])


def backward_grad(m, prompts, answer):
    """g by a backward pass through an independent log-probability (log-softmax per prompt, no padding)."""
    m.zero_grad(set_to_none=True)
    total = 0.0
    for p in prompts:
        seq = torch.cat([p, answer])
        logp = m(seq[None])[0][0, :-1].log_softmax(-1)
        total = total + logp[len(p) - 1:, :].gather(-1, answer[:, None]).sum()
    (total / len(prompts)).backward()
    return torch.cat([p.grad.reshape(-1) for p in m.parameters()])


def test_concept_gradients_match_backward_and_finite_differences():
    m = tiny(2, dtype=torch.float64)
    groups = [seqs([3, 4], seed=3), seqs([5], seed=4), seqs([2, 2, 6], seed=5)]
    ans = torch.tensor([4, 7])
    G = concept_gradients(m, groups, ans)
    assert G.shape == (3, sum(p.numel() for p in m.parameters()))          # tied weights counted once
    for c, ps in enumerate(groups):
        assert torch.allclose(G[c], backward_grad(m, ps, ans), atol=1e-9)
    v = torch.randn(G.shape[1], dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def z(shift):
        mm = copy.deepcopy(m)
        vec = torch.nn.utils.parameters_to_vector(mm.parameters()) + shift
        torch.nn.utils.vector_to_parameters(vec, mm.parameters())
        with torch.no_grad():
            out = []
            for ps in groups:
                lp = [mm(torch.cat([p, ans])[None])[0][0, :-1].log_softmax(-1)[len(p) - 1:].gather(-1, ans[:, None]).sum()
                      for p in ps]
                out.append(torch.stack(lp).mean())
            return torch.stack(out)
    fd = (z(1e-6 * v) - z(-1e-6 * v)) / 2e-6
    assert torch.allclose(G @ v, fd, rtol=1e-5, atol=1e-6)


def test_kernel_is_gram_matrix_symmetric_psd():
    m = tiny(3, dtype=torch.float64)
    groups = [seqs([3, 4], seed=s) for s in range(4)]
    ans = torch.tensor([1, 2, 3])
    K = concept_gradient_kernel(m, groups, ans)
    G = torch.stack([backward_grad(m, ps, ans) for ps in groups])
    assert K.shape == (4, 4)
    assert torch.allclose(K, G @ G.T, rtol=1e-9)
    assert torch.allclose(K, K.T) and torch.linalg.eigvalsh(K).min() > -1e-9 * K.diag().max()
    # duplicating a concept's prompts leaves its mean gradient unchanged
    K2 = concept_gradient_kernel(m, [groups[0] + groups[0]] + groups[1:], ans)
    assert torch.allclose(K2, K, rtol=1e-9)


def test_familiarity_gradient_is_minus_nll_gradient():
    m = tiny(4, dtype=torch.float64)
    groups = [seqs([4, 6], seed=7)]
    H = familiarity_gradients(m, groups)
    m.zero_grad(set_to_none=True)
    loss = torch.stack([F.cross_entropy(m(x[None])[0][0, :-1], x[1:]) for x in groups[0]]).mean()
    loss.backward()
    ref = -torch.cat([p.grad.reshape(-1) for p in m.parameters()])
    assert torch.allclose(H[0], ref, atol=1e-10)


def test_uniform_coverage_homogenises_block_kernel_prediction():
    """Eq. (7): with K = αI + βB and equal domains, uniform n gives a constant prediction; skewed n does not."""
    dom = np.repeat(np.arange(5), 8)
    K = 0.5 * np.eye(40) + 2.0 * (dom[:, None] == dom[None, :])
    uni = predicted_dz(K, np.full(40, 3.0))
    skew = predicted_dz(K, np.where(dom < 2, 7.5, 0.0))          # same budget, 120
    assert np.ptp(uni) < 1e-12 and np.std(skew) > 1
    assert np.allclose(skew[dom >= 2], 0) and np.allclose(skew[dom == 0], skew[0])
    rng = np.random.default_rng(0)
    for _ in range(50):                                           # no budget-120 allocation has smaller variance
        n = rng.dirichlet(np.ones(40)) * 120
        assert predicted_dz(K, n).var() >= uni.var() - 1e-12


def test_knowledge_base_and_fine_tuning_sets():
    kb = make_kb(seed=3)
    C = len(kb.concepts)
    assert C == 40 and len(set(kb.concepts) | set(kb.domains)) == 45 and kb.presafe.sum() == 12
    assert all(len(kb.unsafe_prompts(c)) == 8 and len(kb.procedure(c)) == 3 for c in range(C))
    # concepts of one domain share their unsafe verbs, other domains do not
    assert kb.verbs[kb.domain[0]] == kb.verbs[kb.domain[1]] and kb.verbs[0] != kb.verbs[1]
    docs = pretrain_docs(kb, 400, 0.8, seed=0)
    assert len(docs) == 400 and all(d.startswith("| ") for d in docs)
    cov = kb.domain < 2
    fd = ft_docs(kb, cov, 0.0, 500, seed=1)
    n_tok = sum(len(d.split()) for d in fd)
    assert 500 <= n_tok < 500 + 25
    assert not any("first" in d.split() for d in fd)                         # no exposure
    used = {c for c in range(C) for d in fd if f" {kb.concepts[c]} " in d + " "}
    assert used <= set(np.flatnonzero(cov))
    fd_hi = ft_docs(kb, cov, 1.0, 500, seed=1)
    assert all(d.split()[-12] == "first" for d in fd_hi if d.endswith(REFUSAL))
    with pytest.raises(ValueError):
        ft_docs(kb, np.zeros(C, bool), 0.1, 100, seed=0)
    with pytest.raises(ValueError):
        make_kb(presafe_frac=1.5)


def test_bootstrap_intervals():
    o = (np.random.default_rng(0).random((40, 8)) < 0.6).astype(float)
    lo, hi = bootstrap_prompts(o, np.mean, 400, seed=0)
    assert lo < o.mean() < hi
    assert bootstrap_prompts(np.ones((6, 8)), np.std, 50) == (0.0, 0.0)
    x = np.arange(30.0)
    lo, hi = bootstrap_concepts(x, 2 * x + 1, lambda a, b: np.corrcoef(a, b)[0, 1], 200, seed=0)
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.0)
