"""paper_suite.tinytf against hand-written references."""
import math

import pytest
import torch
import torch.nn as nn

from paper_suite.tinytf import (GPT, AffineLens, CharTokenizer, GPTConfig, capture, fit_affine_lens, forward_from, get_batch,
                                 hidden_states, lens_scores, logit_lens, mlp_act_names, split_ids)


def _manual_block_attention(attn, u, n_head):
    B, T, C = u.shape
    q, k, v = attn.qkv(u).split(C, dim=2)
    d = C // n_head
    heads = []
    for h in range(n_head):
        s = slice(h * d, (h + 1) * d)
        sc = q[..., s] @ k[..., s].transpose(1, 2) / math.sqrt(d)
        sc = sc.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        heads.append(sc.softmax(-1) @ v[..., s])
    return attn.proj(torch.cat(heads, -1))


def test_attention_matches_the_formula():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=7, block_size=9, n_layer=1, n_head=3, d_model=12))
    u = torch.randn(2, 9, 12)
    assert torch.allclose(m.blocks[0].attn(u), _manual_block_attention(m.blocks[0].attn, u, 3), atol=1e-6)


def test_causality_future_tokens_do_not_change_the_past():
    torch.manual_seed(1)
    m = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=2, n_head=2, d_model=8)).eval()
    x = torch.randint(7, (1, 8))
    y = x.clone(); y[0, 5:] = (y[0, 5:] + 1) % 7
    assert torch.allclose(m(x)[0][0, :5], m(y)[0][0, :5], atol=1e-6)
    assert not torch.allclose(m(x)[0][0, 5:], m(y)[0][0, 5:])


def test_tied_embeddings_and_activation_swap():
    m = GPT(GPTConfig(vocab_size=5, d_model=8, n_head=2, activation=nn.ReLU))
    assert m.head.weight is m.tok.weight and isinstance(m.blocks[0].mlp.act, nn.ReLU)
    assert GPT(GPTConfig(vocab_size=5, d_model=8, n_head=2, tied=False)).head.weight is not None


def test_loss_at_init_is_near_log_vocab():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=50, block_size=16, d_model=16, n_head=2))
    _, loss = m(torch.randint(50, (4, 16)), torch.randint(50, (4, 16)))
    assert abs(loss.item() - math.log(50)) < 0.1


def test_capture_hooks_and_bad_names():
    m = GPT(GPTConfig(vocab_size=5, block_size=4, d_model=8, n_head=2, n_layer=2))
    with capture(m, mlp_act_names(m)) as st:
        m(torch.randint(5, (3, 4)))
    assert [v[0].shape for v in st.values()] == [(3, 4, 32), (3, 4, 32)]
    with pytest.raises(KeyError, match="no submodule"):
        with capture(m, ["blocks.9.mlp.act"]):
            pass


def test_tokenizer_roundtrip_and_batches():
    tok = CharTokenizer("abcabd")
    assert tok.vocab_size == 4 and tok.decode(tok.encode("dab")) == "dab"
    tr, va = split_ids(torch.arange(100), 0.2)
    assert len(tr) == 80 and va[0] == 80
    x, y = get_batch(tr, 5, 3, torch.Generator().manual_seed(0))
    assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(y - x, torch.ones_like(x))


def test_explicit_attention_matches_sdpa_and_exposes_patterns():
    from paper_suite.tinytf import pattern_names, residual_names
    torch.manual_seed(2)
    kw = dict(vocab_size=9, block_size=12, n_layer=2, n_head=3, d_model=12)
    fused, explicit = GPT(GPTConfig(**kw)), GPT(GPTConfig(**kw, explicit_attention=True))
    explicit.load_state_dict(fused.state_dict())
    x = torch.randint(9, (3, 12))
    assert torch.allclose(fused(x)[0], explicit(x)[0], atol=1e-5)
    with capture(explicit, pattern_names(explicit) + residual_names(explicit)) as st:
        explicit(x)
    u = explicit.blocks[0].ln1(explicit.tok(x) + explicit.pos(torch.arange(12)))
    q, k, _ = explicit.blocks[0].attn.qkv(u).split(12, dim=2)
    s = slice(4, 8)   # head 1, by hand
    ref = (q[..., s] @ k[..., s].transpose(1, 2) / 2.0).masked_fill(
        torch.triu(torch.ones(12, 12, dtype=torch.bool), 1), float("-inf")).softmax(-1)
    assert torch.allclose(st["blocks.0.attn.pattern"][0][:, 1], ref, atol=1e-6)
    with pytest.raises(ValueError, match="explicit_attention"):
        pattern_names(fused)


def test_attention_only_and_norm_free_blocks():
    from paper_suite.tinytf import residual_names
    m = GPT(GPTConfig(vocab_size=6, block_size=8, d_model=8, n_head=2, attn_only=True, block_norm=False))
    assert all(b.mlp is None and b.ln2 is None and isinstance(b.ln1, nn.Identity) for b in m.blocks)
    assert not any(isinstance(mod, nn.Linear) and mod.out_features == 32 for mod in m.modules())   # no d_ff layers
    with pytest.raises(ValueError, match="attention-only"):
        mlp_act_names(m)
    torch.manual_seed(0)
    u = torch.randn(2, 8, 8)
    blk = m.blocks[0]
    assert torch.allclose(blk(u), u + _manual_block_attention(blk.attn, u, 2), atol=1e-6)
    with capture(m, residual_names(m)) as st:
        m(torch.randint(6, (2, 8)))
    assert st["blocks.1"][0].shape == (2, 8, 8)


def test_repeated_segment_batch_places_one_copy():
    from paper_suite.tinytf import repeated_segment_batch
    x, y, mask = repeated_segment_batch(1000, 24, 6, 200, torch.Generator().manual_seed(3))
    assert torch.equal(x[:, 1:], y[:, :-1]) and (mask.sum(1) == 5).all()
    for r in range(200):
        q = mask[r].nonzero()[:, 0]
        assert torch.equal(q, torch.arange(int(q[0]), int(q[0]) + 5))             # one contiguous run
        b = int(q[0])                                                              # x[b] starts the copy
        full = torch.cat([x[r, :1], y[r]])                                         # the whole sequence, length 25
        a = [m for m in range(b - 5) if torch.equal(full[m:m + 6], full[b:b + 6])]
        assert a, "the copied segment must occur earlier, a whole segment before"
    with pytest.raises(ValueError, match="too short"):
        repeated_segment_batch(10, 10, 6, 1, torch.Generator())


def _loop_induction(pattern, x, mask):
    B, H, T, _ = pattern.shape
    out = torch.zeros(H)
    n = 0
    for r in range(B):
        for q in range(T):
            if mask[r, q]:
                n += 1
                for j in range(1, q + 1):
                    if x[r, j - 1] == x[r, q]:
                        out += pattern[r, :, q, j]
    return out / n


def test_induction_and_previous_token_scores_match_loops():
    from paper_suite.tinytf import induction_score, prev_token_score, repeated_segment_batch
    x, _, mask = repeated_segment_batch(8, 16, 4, 6, torch.Generator().manual_seed(1))   # small vocab: many matches
    torch.manual_seed(0)
    pat = torch.randn(6, 3, 16, 16).masked_fill(torch.triu(torch.ones(16, 16, dtype=torch.bool), 1), -1e9).softmax(-1)
    assert torch.allclose(induction_score(pat, x, mask), _loop_induction(pat, x, mask), atol=1e-6)
    ref = torch.stack([pat[:, :, q, q - 1] for q in range(1, 16)], -1).mean((0, 2))
    assert torch.allclose(prev_token_score(pat), ref, atol=1e-7)


@pytest.fixture
def tiny_lm():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=13, block_size=8, n_layer=3, d_model=16, n_head=2)).eval()
    return m, torch.randint(13, (4, 8))


def test_lens_and_forward_from_match_the_model(tiny_lm):
    m, x = tiny_lm
    hs = hidden_states(m, x)
    assert len(hs) == 4
    logits = m(x)[0]
    torch.testing.assert_close(logit_lens(m, hs[-1]), logits)
    for l in range(4):
        torch.testing.assert_close(forward_from(m, hs[l], l), logits)
    agree, kl = lens_scores(logits, logits)
    assert agree == 1.0 and abs(kl) < 1e-6


def test_affine_lens_starts_as_logit_lens_and_improves_kl(tiny_lm):
    m, x = tiny_lm
    hs = [h.flatten(0, 1) for h in hidden_states(m, x)]
    final = logit_lens(m, hs[-1])
    torch.testing.assert_close(AffineLens(16, 4)(m, hs[1], 1), logit_lens(m, hs[1]))
    lens = fit_affine_lens(m, hs, final, steps=60, seed=0)
    with torch.no_grad():
        before, after = lens_scores(logit_lens(m, hs[1]), final)[1], lens_scores(lens(m, hs[1], 1), final)[1]
    assert after < before
    assert all(p.requires_grad for p in m.parameters())


def test_word_tokenizer_round_trip_and_unknown_word():
    from paper_suite.tinytf import WordTokenizer
    tk = WordTokenizer("b a c a .", specials=["<pad>"])
    assert tk.words == [".", "<pad>", "a", "b", "c"] and tk.vocab_size == 5
    assert tk.encode("a b .").tolist() == [2, 3, 0] and tk.decode(tk.encode("c a")) == "c a"
    with pytest.raises(KeyError, match="not in the vocabulary"):
        tk.encode("a zebra")


def test_answer_logprob_against_one_at_a_time_scoring():
    from paper_suite.tinytf import answer_logprob
    torch.manual_seed(4)
    m = GPT(GPTConfig(vocab_size=12, block_size=9, n_layer=2, n_head=2, d_model=16)).eval()
    g = torch.Generator().manual_seed(0)
    ps = [torch.randint(12, (int(torch.randint(1, 5, (1,), generator=g)),), generator=g) for _ in range(7)]
    as_ = [torch.randint(12, (int(torch.randint(0, 5, (1,), generator=g)),), generator=g) for _ in range(7)]
    with torch.no_grad():
        got = answer_logprob(m, ps, as_, batch=3)
        for p, a, v in zip(ps, as_, got):
            seq = torch.cat([p, a])[None]
            lp = torch.log_softmax(m(seq)[0][0], -1)
            ref = sum(float(lp[len(p) - 1 + t, a[t]]) for t in range(len(a)))
            assert abs(float(v) - ref) < 1e-5
    assert got.shape == (7,)
    # differentiable outside no_grad
    lp = answer_logprob(m, ps[:2], as_[:2])
    lp.sum().backward()
    assert m.tok.weight.grad is not None


def test_answer_logprob_rejects_overlong_items():
    from paper_suite.tinytf import answer_logprob
    m = GPT(GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, d_model=8))
    with pytest.raises(ValueError, match="block size"):
        answer_logprob(m, [torch.tensor([1, 2, 3])], [torch.tensor([1, 2])])
    with pytest.raises(ValueError, match="at least one token"):
        answer_logprob(m, [torch.tensor([], dtype=torch.long)], [torch.tensor([1])])


def test_embed_onehot_is_the_models_embedding_and_differentiable():
    from paper_suite.tinytf import embed_onehot
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=9, block_size=8, n_layer=2, n_head=2, d_model=8)).eval()
    x = torch.randint(9, (3, 5))
    oh = torch.nn.functional.one_hot(x, 9).float().requires_grad_(True)
    h0 = embed_onehot(m, oh)
    assert torch.equal(h0, m.tok(x) + m.pos(torch.arange(5)))
    logits = forward_from(m, h0, 0)
    torch.testing.assert_close(logits, m(x)[0])
    logits[0, -1, 2].backward()
    # Eq. (2) of the chapter: the one-hot gradient is the embedding gradient times W_E^T (finite difference check)
    g = oh.grad[0, 1]
    for v in (0, 4):
        oh2 = oh.detach().clone(); oh2[0, 1, v] += 1e-3
        fd = (forward_from(m, embed_onehot(m, oh2), 0)[0, -1, 2] - logits[0, -1, 2]).item() / 1e-3
        assert abs(fd - g[v].item()) < 1e-2
    with pytest.raises(ValueError, match="one-hot rows"):
        embed_onehot(m, torch.zeros(2, 5, 8))
    with pytest.raises(ValueError, match="sequence length"):
        embed_onehot(m, torch.zeros(1, 9, 9))
