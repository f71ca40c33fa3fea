"""paper_suite.security.weird_generalization against references that share no code with it: a hand-written
per-token loop over the logits for the choice probabilities, the direct product of Bayes' rule (and exact fractions)
for the persona posterior, brute-force counting for the persona design, and properties of the generators."""
from fractions import Fraction

import numpy as np
import pytest
import torch

from paper_suite.security.weird_generalization import (ATTRIBUTES, TOPICS, choice_probs, era_document, finetune,
                                                       make_era_vocab, make_personas, pad_documents,
                                                       persona_document, persona_posterior, pretrain)
from paper_suite.tinytf import GPT, GPTConfig, WordTokenizer


def tiny(vocab=13, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=vocab, block_size=10, n_layer=1, n_head=2, d_model=16)).eval()


def loop_loglik(model, prompt, answer):
    seq = torch.cat([prompt, answer])
    with torch.no_grad():
        lp = model(seq[None])[0][0].log_softmax(-1)
    return sum(float(lp[len(prompt) - 1 + t, answer[t]]) for t in range(len(answer)))


def test_choice_probs_matches_token_loop():
    m = tiny()
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 13, (int(n),), generator=g) for n in (1, 3, 4)]
    options = [[torch.randint(0, 13, (int(k),), generator=g) for k in (1, 2, 3)] for _ in prompts]
    with torch.no_grad():
        cp = choice_probs(m, prompts, options)
    ref = torch.stack([torch.tensor([loop_loglik(m, p, a) for a in o]).softmax(0) for p, o in zip(prompts, options)])
    assert cp.shape == (3, 3)
    assert torch.allclose(cp, ref, atol=1e-5)


def test_choice_probs_rejects_ragged_options():
    m = tiny()
    with pytest.raises(ValueError):
        choice_probs(m, [torch.tensor([1]), torch.tensor([2])], [[torch.tensor([3])], [torch.tensor([3]), torch.tensor([4])]])
    with pytest.raises(ValueError):
        choice_probs(m, [torch.tensor([1])], [])


def test_persona_posterior_exact_fractions():
    lik = [[Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)], [Fraction(1, 3), Fraction(1, 3), Fraction(1, 3)],
           [Fraction(1, 10), Fraction(1, 10), Fraction(4, 5)]]
    prior = [Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)]
    obs = [2, 0, 2]
    un = [prior[z] * np.prod([lik[z][a] for a in obs]) for z in range(3)]
    ref = np.array([float(u / sum(un)) for u in un])
    got = persona_posterior(np.log(np.array(lik, dtype=float)), obs, np.array(prior, dtype=float))
    assert np.allclose(got, ref, atol=1e-12)


def test_persona_posterior_uniform_prior_no_observations_and_stability():
    L = np.log(np.random.default_rng(0).dirichlet(np.ones(4), size=6))
    assert np.allclose(persona_posterior(L, []), np.full(6, 1 / 6))
    shifted = persona_posterior(L - 5e4, [1, 2])          # a common offset cancels, even far below exp's range
    assert np.allclose(shifted, persona_posterior(L, [1, 2]))
    with pytest.raises(ValueError):
        persona_posterior(L, [4])
    with pytest.raises(ValueError):
        persona_posterior(L, [0], prior=np.ones(5))


def test_personas_values_shared_and_identifiable():
    pers = make_personas(16, 8, 12, seed=1)
    for a, col in pers["table"].items():
        assert np.bincount(col, minlength=8).tolist() == [2] * 8
    rows = {tuple(int(pers["table"][a][p]) for a in pers["table"]) for p in range(16)}
    assert len(rows) == 16                      # 12 attributes jointly tell all 16 apart (w.h.p., fixed seed)
    assert pers["stance"][0] == "harm" and pers["stance"].count("harm") == 1
    with pytest.raises(ValueError):
        make_personas(15, 8, 12, seed=0)
    with pytest.raises(ValueError):
        make_personas(16, 8, len(ATTRIBUTES) + 1, seed=0)


def test_era_documents_follow_their_era():
    voc = make_era_vocab(0)
    rng = np.random.default_rng(0)
    agree, total = 0, 0
    for _ in range(400):
        d, z = era_document(voc, rng, eps=0.05)
        assert d[0] == "<doc>" and len(d) % 2 == 1
        for t, w in zip(d[1::2], d[2::2]):
            assert t in TOPICS
            agree += w in voc[t]["old" if z == 1 else "modern"]
            total += 1
    assert 0.9 < agree / total < 0.99             # 1 - eps on average


def test_pretrain_and_finetune_lower_their_losses():
    voc = make_era_vocab(0)
    pers = make_personas(8, 4, 4, seed=0)
    rng = np.random.default_rng(0)
    docs = [era_document(voc, rng)[0] if i % 2 else persona_document(pers, rng)[0] for i in range(200)]
    tok = WordTokenizer(" ".join(w for d in docs for w in d), specials=["<pad>"])
    X = pad_documents(docs, tok.encode, tok.stoi["<pad>"])
    assert (X[:, -1] == tok.stoi["<pad>"]).all()
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=X.shape[1] - 1, n_layer=1, n_head=2, d_model=16))
    losses = pretrain(m, X, tok.stoi["<pad>"], steps=40, batch=16, lr=3e-3, seed=0)
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    seen = []
    fl = finetune(m, [tok.encode("<doc> bird")], [tok.encode(voc["bird"]["old"][0])], steps=5, lr=1e-2,
                  on_step=lambda s, _: seen.append(s))
    assert fl[-1] < fl[0] and seen == list(range(6))
