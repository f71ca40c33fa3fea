"""paper_suite.interpretability.sae_weights against independent references: autograd through a real LayerNorm,
brute force, complete enumeration, transformer_lens' FactoredMatrix, and hand-made hooks."""
import math
import os
import warnings
from itertools import combinations

import numpy as np
import pytest
import torch

from paper_suite.dictionary import SparseDictionary
from paper_suite.interpretability.sae_weights import (CATEGORY_NAMES, activation_labels, ablation_effect,
                                                       attention_participation, category_language, category_vocab,
                                                       direct_logits, label_agreement, log_prob_of_set, null_threshold,
                                                       purity_null_sf, random_directions, token_purity, top_category)
from paper_suite.tinytf import GPT, GPTConfig, capture


def test_direct_logits_is_the_fixed_scale_derivative_of_layernorm_then_unembedding():
    torch.manual_seed(0)
    D, V = 12, 17
    ln, W_U = torch.nn.LayerNorm(D), torch.randn(D, V)
    with torch.no_grad():
        ln.weight.uniform_(0.3, 2.0)
        ln.bias.normal_()
    for _ in range(5):
        d, x = torch.randn(D), torch.randn(D)
        pd, px = d - d.mean(), x - x.mean()
        px = px - (px @ pd) / (pd @ pd) * pd                          # no first-order change of the scale
        x = px * ((1 - ln.eps) / px.var(unbiased=False)).sqrt()       # sigma(x) = 1
        jvp = torch.func.jvp(lambda v: ln(v) @ W_U, (x,), (d,))[1]
        assert torch.allclose(direct_logits(d[None], W_U, ln.weight.detach())[0], jvp, atol=1e-4)
    # gamma = None is gamma = 1, and a constant direction has no effect (centring)
    assert torch.allclose(direct_logits(torch.ones(2, D), W_U), torch.zeros(2, V), atol=1e-5)
    with pytest.raises(ValueError, match="d_model"):
        direct_logits(torch.randn(3, D + 1), W_U)


def test_purity_and_top_category_by_brute_force():
    g = torch.Generator().manual_seed(1)
    cats = torch.randint(5, (40,), generator=g)
    scores = torch.randn(30, 40, generator=g)
    pur, lab = token_purity(scores, cats, top=7), top_category(scores, cats, top=7)
    for r in range(30):
        top = sorted(range(40), key=lambda v: -scores[r, v].item())[:7]
        counts = [sum(int(cats[v]) == c for v in top) for c in range(5)]
        assert pur[r].item() == pytest.approx(max(counts) / 7)
        assert lab[r].item() == counts.index(max(counts))
    with pytest.raises(ValueError, match="top must be"):
        token_purity(scores, cats, top=41)


def test_hypergeometric_null_by_enumeration_and_simulation():
    sizes, m = [4, 2, 3, 1], 4
    tok = [c for c, n in enumerate(sizes) for _ in range(n)]
    mx = np.array([max(np.bincount([tok[i] for i in s], minlength=4)) for s in combinations(range(10), m)])
    assert np.allclose(purity_null_sf(sizes, m), [(mx >= j).mean() for j in range(m + 1)], atol=1e-12)
    _, cats = category_vocab()
    sf = purity_null_sf(torch.bincount(cats).tolist(), 20)
    rng = np.random.default_rng(2)
    sim = np.array([np.bincount(cats.numpy()[rng.choice(301, 20, replace=False)]).max() for _ in range(20000)])
    assert np.abs(sf - [(sim >= j).mean() for j in range(21)]).max() < 0.01
    assert sf[0] == 1.0 and np.all(np.diff(sf) <= 1e-15)


def test_null_threshold_is_the_smallest_level_with_at_most_alpha_above():
    rng = np.random.default_rng(3)
    p = rng.integers(0, 21, 997) / 20
    tau = null_threshold(torch.tensor(p), alpha=0.05, top=20)
    assert np.mean(p >= tau - 1e-9) <= 0.05 < np.mean(p >= tau - 0.05 - 1e-9)
    assert null_threshold(torch.ones(10), alpha=0.05, top=20) > 1.0      # nothing above 1: no direction is semantic


def _tl_factored():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformer_lens import FactoredMatrix
    return FactoredMatrix


def test_attention_participation_against_transformer_lens_factored_matrix():
    FactoredMatrix = _tl_factored()
    g = torch.Generator().manual_seed(4)
    H, D, dh = 3, 10, 4
    W_Q, W_K, W_V = (torch.randn(H, D, dh, generator=g) for _ in range(3))
    W_O = torch.randn(H, dh, D, generator=g)
    dirs = torch.randn(6, D, generator=g) * 3
    ours = attention_participation(dirs, W_Q, W_K, W_V, W_O)
    assert ours.shape == (6, H, 3)
    for h in range(H):
        qk, ov = FactoredMatrix(W_Q[h], W_K[h].T), FactoredMatrix(W_V[h], W_O[h])
        for n in range(6):
            u = dirs[n] / dirs[n].norm()
            ref = torch.stack([(u @ qk).norm() / qk.norm(), (qk @ u).norm() / qk.norm(), (u @ ov).norm() / ov.norm()])
            assert torch.allclose(ours[n, h], ref * math.sqrt(D), atol=1e-4)


def test_random_unit_directions_have_unit_mean_square_ratio():
    g = torch.Generator().manual_seed(5)
    D = 16
    W_Q, W_K, W_V = (torch.randn(2, D, 2, generator=g) for _ in range(3))      # low rank, very unequal scales
    W_O = torch.randn(2, 2, D, generator=g) * torch.tensor([0.01, 100.0])[:, None, None]
    r2 = attention_participation(random_directions(40000, D, seed=6), W_Q, W_K, W_V, W_O).pow(2).mean(0)
    assert torch.allclose(r2, torch.ones(2, 3), atol=0.04)
    u = torch.linalg.svd(W_Q[0] @ W_K[0].T).U[:, 0]                            # the top query direction scores higher
    assert attention_participation(u[None], W_Q, W_K, W_V, W_O)[0, 0, 0] > 1.5


def _tiny():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=15, block_size=8, n_layer=2, n_head=2, d_model=12)).eval()
    sae = SparseDictionary(12, 24, kind="topk", k=4, seed=1)
    x = torch.randint(15, (4, 8))
    with torch.no_grad(), capture(m, ["blocks.0"]) as st:
        m(x)
    z = sae.encode(st["blocks.0"][0]).detach()
    return m, sae, x, z


@pytest.mark.parametrize("control", [False, True])
def test_ablation_effect_against_a_hand_made_hook(control):
    m, sae, x, z = _tiny()
    i = int((z > 0).sum((0, 1)).argmax())
    j = (i + 5) % 24
    direction = sae.W_dec[j if control else i].detach()
    V = torch.tensor([0, 3, 9])
    eff, dlog, n = ablation_effect(m, "blocks.0", sae, x, i, V, control=j if control else None)
    with torch.no_grad():
        clean = m(x)[0]
        h = m.blocks[0].register_forward_hook(lambda mod, inp, out: out - z[..., i:i + 1] * direction)
        edited = m(x)[0]
        h.remove()
    f = z[..., i] > 0
    p = lambda lg: torch.log(lg.softmax(-1)[..., V].sum(-1))
    assert n == int(f.sum()) and eff == pytest.approx(float((p(clean) - p(edited))[f].mean()), abs=1e-5)
    assert torch.allclose(dlog, (edited - clean)[f].mean(0), atol=1e-5)
    assert torch.allclose(log_prob_of_set(clean, V), p(clean), atol=1e-6)


def test_activation_labels_and_agreement_by_brute_force():
    g = torch.Generator().manual_seed(7)
    codes = torch.relu(torch.randn(50, 6, generator=g)) * (torch.rand(50, 6, generator=g) < 0.4)
    toks = torch.randint(-1, 9, (50,), generator=g)
    cats = torch.tensor([0, 0, 1, 1, 1, 2, 2, 3, 3])
    pur, lab, n = activation_labels(codes, toks, cats, top=5)
    for i in range(6):
        pos = sorted((p for p in range(50) if codes[p, i] > 0 and toks[p] >= 0), key=lambda p: -codes[p, i].item())[:5]
        counts = [sum(int(cats[toks[p]]) == c for p in pos) for c in range(4)]
        assert n[i] == len(pos) and lab[i] == counts.index(max(counts))
        assert pur[i].item() == pytest.approx(max(counts) / max(len(pos), 1))
    a, b = torch.randint(4, (500,), generator=g), torch.randint(4, (500,), generator=g)
    ag, chance = label_agreement(a, b, 4)
    perm = np.mean([label_agreement(a, b[torch.randperm(500, generator=g)], 4)[0] for _ in range(400)])
    assert ag == pytest.approx(float((a == b).double().mean())) and abs(perm - chance) < 0.01
    with pytest.raises(ValueError, match="non-empty"):
        label_agreement(torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long), 4)


def test_category_language_follows_the_grammar():
    words, cats = category_vocab()
    assert len(words) == len(set(words)) == 301 and len(CATEGORY_NAMES) == 13
    assert all(int((cats == c).sum()) == 25 for c in range(12))
    ids = category_language(5000, seed=3)
    assert torch.equal(ids, category_language(5000, seed=3)) and not torch.equal(ids, category_language(5000, seed=4))
    name = [CATEGORY_NAMES[int(c)] for c in cats]
    sents = [s.split() for s in " ".join(words[t] for t in ids.tolist()).split(" . ")[1:-1]]
    assert len(sents) > 300
    verbs = {"motion", "eating", "handling"}
    for s in sents:
        c = [name[words.index(w)] for w in s]
        v = next(k for k, x in enumerate(c) if x in verbs)
        assert c[0] == "function" and c[v - 1] in ("animal", "person")
        assert not (c[v - 1] == "animal" and c[v] == "handling")
        assert c[-1] in {"motion": ("place",), "eating": ("food",), "handling": ("tool", "place")}[c[v]]
    # token preferences: with sigma = 3 the object of an eating sentence depends on the subject token
    eat = [(s[next(k for k, w in enumerate(s) if name[words.index(w)] in verbs) - 1], s[-1]) for s in
           (x.split() for x in " ".join(words[t] for t in category_language(60000, seed=5).tolist()).split(" . ")[1:-1])
           if any(name[words.index(w)] == "eating" for w in s)]
    pairs = {}
    for subj, food in eat:
        pairs.setdefault(subj, []).append(food)
    top_share = np.mean([max(map(f.count, set(f))) / len(f) for f in pairs.values() if len(f) >= 20])
    assert top_share > 0.2                                  # uniform over 25 foods would give about 0.1
