"""Tests of paper_suite.interpretability.editors against references that share no code with it:
numpy's SVD and least squares, Eq. (4) written out, scikit-learn, and properties of the corpus generator."""
import numpy as np
import pytest
import torch
import torch.nn as nn
from sklearn.linear_model import LogisticRegression

from paper_suite.interpretability.editors import (
    TOPIC_VOCAB, TOPICS, AuthorClassifier, DeflatedLoRA, WholeInputDeflation, build_vocab, content_subspace, deflator,
    distinct_n, elbow_rank, encode, encode_set, home_topics, inlp_projection, keyword_adherence, lstsq_projected,
    pos_mask, pretraining_text, synth_authors, two_factor_toy)
from paper_suite.lora import LoRALinear, apply_lora
from paper_suite.tinytf import GPT, GPTConfig

CONTENT = {w for v in TOPIC_VOCAB.values() for part in v for w in part}


def test_content_subspace_is_numpys_top_right_singular_vectors():
    rng = np.random.default_rng(0)
    W = rng.standard_normal((9, 5)) @ rng.standard_normal((5, 12))
    U = content_subspace(torch.from_numpy(W), 3).numpy()
    Vt = np.linalg.svd(W)[2]
    assert U.shape == (12, 3)
    np.testing.assert_allclose(U @ U.T, Vt[:3].T @ Vt[:3], atol=1e-10)        # the same subspace (signs aside)
    np.testing.assert_allclose(U.T @ U, np.eye(3), atol=1e-10)
    with pytest.raises(ValueError, match="rank"):
        content_subspace(torch.from_numpy(W), 0)
    with pytest.raises(ValueError, match="matrix"):
        content_subspace(torch.zeros(3), 1)


def test_content_subspace_of_a_lora_update_spans_a():
    torch.manual_seed(1)
    layer = LoRALinear(nn.Linear(10, 6), rank=3, alpha=3)
    with torch.no_grad():
        layer.B.normal_()
    U = content_subspace(layer.delta_weight().detach(), 3)
    A = layer.A.detach().numpy().T
    proj_A = A @ np.linalg.pinv(A)                                                # projector onto span(A^T)
    np.testing.assert_allclose(U.numpy() @ U.numpy().T, proj_A, atol=1e-5)


def test_elbow_rank():
    assert elbow_rank([10, 9, 8.5, 1, 0.9, 0.8]) == 3
    assert elbow_rank([5, 0.1, 0.09, 0.08]) == 1
    assert elbow_rank([1, 1, 1, 1, 0.01]) == 4
    assert elbow_rank([3.0]) == 1 and elbow_rank([1.0, 0.0, 0.0]) == 1
    assert elbow_rank([10, 9, 8.5, 1, 0.9, 0.8], max_rank=2) == 1


def test_deflated_lora_matches_eq_4_any_leading_shape():
    torch.manual_seed(2)
    base = nn.Linear(8, 5)
    U = torch.linalg.qr(torch.randn(8, 3))[0]
    m = DeflatedLoRA(base, rank=4, alpha=2.0, content_basis=U, seed=0)
    with torch.no_grad():
        m.B.normal_()
    Pn = np.eye(8) - U.numpy() @ U.numpy().T
    A, B, W, b = (t.detach().numpy() for t in (m.A, m.B, base.weight, base.bias))
    for shape in [(8,), (4, 8), (2, 3, 8)]:
        x = torch.randn(shape)
        ref = x.numpy() @ W.T + b + 0.5 * (x.numpy() @ Pn) @ A.T @ B.T
        np.testing.assert_allclose(m(x).detach().numpy(), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m.delta_weight().detach().numpy(), 0.5 * B @ A @ Pn, atol=1e-6)
    x = torch.randn(6, 8)
    merged = x.numpy() @ (W + m.delta_weight().detach().numpy()).T + b
    np.testing.assert_allclose(m(x).detach().numpy(), merged, rtol=1e-5, atol=1e-5)


def test_deflated_lora_is_blind_to_u_and_gets_no_gradient_along_it():
    torch.manual_seed(3)
    U = torch.linalg.qr(torch.randn(12, 4))[0]
    m = DeflatedLoRA(nn.Linear(12, 7), rank=3, alpha=3.0, content_basis=U)
    with torch.no_grad():
        m.B.normal_()
    x = torch.randn(20, 12)
    y0 = m(x)
    z = torch.randn(20, 4) @ U.T
    torch.testing.assert_close(m.branch(x + z), m.branch(x), rtol=1e-5, atol=1e-5)
    y0.square().sum().backward()
    assert (m.A.grad @ U).abs().max() <= 1e-5 * m.A.grad.abs().max()
    assert m.A.grad.abs().max() > 0


def test_deflated_lora_without_basis_is_plain_lora_and_checks_shapes():
    torch.manual_seed(4)
    base = nn.Linear(6, 3)
    m = DeflatedLoRA(base, rank=2, alpha=4.0)
    assert m.in_proj is None and m.content_basis is None
    x = torch.randn(5, 6)
    torch.testing.assert_close(m(x), base(x))                                    # B starts at zero
    assert all(p.requires_grad is False for p in base.parameters()) and m.A.requires_grad and m.B.requires_grad
    with pytest.raises(ValueError, match="content_basis"):
        DeflatedLoRA(base, 2, 4.0, content_basis=torch.zeros(5, 1))


def test_whole_input_deflation_projects_the_base_input_too():
    torch.manual_seed(5)
    base = nn.Linear(6, 3)
    U = torch.linalg.qr(torch.randn(6, 2))[0]
    m = WholeInputDeflation(base, 2, 2.0, U)
    x = torch.randn(4, 6)
    Pm = deflator(U)
    torch.testing.assert_close(m(x), base(x @ Pm), rtol=1e-5, atol=1e-6)        # B = 0: the projected base


def test_two_factor_toy_projection_recovers_style_weights():
    t = two_factor_toy(n=4000, seed=1)
    Pc = np.eye(t["S"].shape[0]) - t["C"] @ t["C"].T
    w = lstsq_projected(t["X_train"], t["y_train"], Pc)
    assert np.linalg.norm(w - t["S"] @ t["w_s"]) < 0.05 * np.linalg.norm(t["w_s"])
    w_plain = lstsq_projected(t["X_train"], t["y_train"])
    np.testing.assert_allclose(w_plain, np.linalg.pinv(t["X_train"]) @ t["y_train"], rtol=1e-6, atol=1e-8)
    assert np.linalg.norm(t["C"].T @ w_plain) > 0.1                            # the plain fit leans on content
    mse = lambda v: np.mean((t["X_test"] @ v - t["y_test"]) ** 2)
    assert mse(w) < mse(w_plain)


def test_synth_authors_design():
    c = synth_authors(60, 30, seed=3)
    tr = c["train"]
    assert len(tr) == 360 and len(c["test_id"]) == 180 and len(c["test_shift"]) == 180
    home = np.mean([t in home_topics(a) for a, t in zip(tr.author, tr.topic)])
    assert 0.84 <= home <= 0.96
    shift_home = np.mean([t in home_topics(a) for a, t in zip(c["test_shift"].author, c["test_shift"].topic)])
    assert 0.1 <= shift_home <= 0.4                                             # uniform topics: 2/8 expected
    for toks, pos, neu, t in zip(tr.tokens, tr.pos, tr.neutral, tr.topic):
        assert len(toks) == len(pos)
        words = [w for w in toks if w in CONTENT]
        assert words == [w for w in neu if w in CONTENT]                       # restatement keeps the content
        nouns, verbs, adjs = TOPIC_VOCAB[TOPICS[t]]
        assert set(words) <= set(nouns + verbs + adjs)                         # content words from its own topic
        assert not {"however", "perhaps", ";", "it's", "slowly"} & set(neu)    # neutral: no style markers
    assert synth_authors(60, 30, seed=3)["train"].tokens == tr.tokens
    assert synth_authors(60, 30, seed=4)["train"].tokens != tr.tokens
    assert len(synth_authors(5, 5, n_authors=10)["train"]) == 50
    with pytest.raises(ValueError):
        synth_authors(5, 5, kappa=1.5)


def test_style_is_learnable_and_content_is_shortcut():
    """Style alone (content words masked) predicts authors on the shifted set; topic alone does not."""
    c = synth_authors(80, 40, seed=0)
    from sklearn.feature_extraction.text import CountVectorizer
    def fit_score(f):
        v = CountVectorizer(token_pattern=r"\S+")
        clf = LogisticRegression(max_iter=3000).fit(v.fit_transform(f(c["train"])), c["train"].author)
        return clf.score(v.transform(f(c["test_shift"])), c["test_shift"].author)
    style = fit_score(lambda t: [" ".join(pos_mask(s, p)) for s, p in zip(t.tokens, t.pos)])
    topic = fit_score(lambda t: [" ".join(s) for s in t.neutral])
    assert style > 0.5 and topic < 0.3


def test_pos_mask_and_vocab():
    toks = ["Perhaps", "the", "grim", "ship", "sank", "a", "wave", "slowly", ";", "but"]
    pos = ["ADV", "DET", "ADJ", "NOUN", "VERB", "DET", "NOUN", "ADV", "PUNCT", "CONJ"]
    assert pos_mask(toks, pos) == ["#ADV", "the", "#ADJ", "#NOUN", "#VERB", "a", "#NOUN", "#ADV", ";", "but"]
    v = build_vocab(6)
    assert v[0] == "<pad>" and len(set(v)) == len(v) and "<a5>" in v and "#NOUN" in v
    stoi = {w: i for i, w in enumerate(v)}
    for s in pretraining_text(50, seed=1) + synth_authors(10, 5)["train"].tokens:
        assert all(w in stoi for w in s)
    ids = encode([["the", "ship"], ["a"] * 10], stoi, 4)
    assert ids.tolist() == [[stoi["the"], stoi["ship"], 0, 0], [stoi["a"]] * 4]


def test_inlp_projection_is_orthogonal_and_removes_the_label():
    rng = np.random.default_rng(1)
    z = rng.integers(0, 3, 900)
    X = rng.standard_normal((900, 8)) + 3.0 * np.eye(8)[z]
    Pm = inlp_projection(X, z, n_iter=2)
    np.testing.assert_allclose(Pm, Pm.T, atol=1e-8)
    np.testing.assert_allclose(Pm @ Pm, Pm, atol=1e-8)
    before = LogisticRegression(max_iter=2000).fit(X[:600], z[:600]).score(X[600:], z[600:])
    after = LogisticRegression(max_iter=2000).fit(X[:600] @ Pm, z[:600]).score(X[600:] @ Pm, z[600:])
    assert before > 0.9 and after < 0.5


def test_generation_metrics():
    assert distinct_n([["a", "b", "c"], ["a", "b", "d"]], 2) == 3 / 4
    assert distinct_n([["x"]], 2) == 0.0
    assert keyword_adherence([["ship", "wave", "judge"]], [TOPICS.index("sea")]) == pytest.approx(2 / 3)
    assert keyword_adherence([["the"]], [0]) == 0.0


def test_classifier_stem_plus_rest_equals_the_model():
    """stem followed by hidden is the GPT's own final hidden state (tinytf's forward, read through a hook)."""
    torch.manual_seed(6)
    lm = GPT(GPTConfig(vocab_size=30, block_size=10, n_layer=2, n_head=2, d_model=16)).eval()
    idx = torch.randint(1, 30, (3, 10))
    store = {}
    h = lm.ln_f.register_forward_hook(lambda m, i, o: store.__setitem__("h", o))
    lm(idx)
    h.remove()
    for targets in (["blocks.1.mlp.fc"], ["blocks.1.attn.qkv"], ["qkv"], ["fc", "proj"]):
        clf = AuthorClassifier(lm, 4, targets)
        torch.testing.assert_close(clf.hidden(clf.stem(idx)), store["h"], rtol=1e-5, atol=1e-5)
    clf = AuthorClassifier(lm, 4, ["blocks.1.mlp.fc"])
    apply_lora(clf.lm, ["blocks.1.mlp.fc"])
    mask = torch.ones(3, 10)
    assert clf(clf.stem(idx), mask).shape == (3, 4)
    with pytest.raises(ValueError):
        AuthorClassifier(lm, 4, ["head"])
