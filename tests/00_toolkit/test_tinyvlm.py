"""paper_suite.tinyvlm against hand-written references: patch order, attention, prefix causality, loss."""
import math

import pytest
import torch
import torch.nn.functional as F

from paper_suite.tinyvlm import (EncoderBlock, PatchEncoder, caption_batch, caption_tokenizer, greedy_decode, make_vlm,
                                 patchify, train_captioner)


def test_patchify_is_row_major_and_channel_major():
    x = torch.randn(2, 3, 6, 6)
    p = patchify(x, 3)
    assert p.shape == (2, 4, 27)
    for k in range(4):
        a, b = divmod(k, 2)
        assert torch.equal(p[:, k], x[:, :, 3 * a:3 * a + 3, 3 * b:3 * b + 3].reshape(2, -1))
    with pytest.raises(ValueError, match="does not divide"):
        patchify(x, 4)


def test_encoder_block_matches_the_formula():
    torch.manual_seed(0)
    blk = EncoderBlock(8, 2)
    z = torch.randn(3, 5, 8)
    u = blk.ln1(z)
    q, k, v = blk.qkv(u).split(8, 2)
    heads = []
    for h in range(2):
        s = slice(4 * h, 4 * h + 4)
        att = (q[..., s] @ k[..., s].transpose(1, 2) / math.sqrt(4)).softmax(-1)   # no causal mask
        heads.append(att @ v[..., s])
    u = z + blk.proj(torch.cat(heads, -1))
    ref = u + blk.mlp(blk.ln2(u))
    assert torch.allclose(blk(z), ref, atol=1e-5)


def test_prefix_reaches_every_text_position_and_text_never_reaches_back():
    m = make_vlm(8, 4, vocab_size=11, max_text=5, enc_width=16, d_model=16, n_head=2, seed=1).eval()
    img = torch.rand(1, 3, 8, 8, requires_grad=True)
    ids = torch.randint(11, (1, 5))
    logits = m(img, ids)[0]
    g = torch.autograd.grad(logits[0, 0].sum(), img)[0]
    assert g.abs().sum() > 0                      # the first text position already sees the image
    h = m.embed(img, ids)
    assert h.shape == (1, m.n_vis + 5, 16)
    with pytest.raises(ValueError, match="block size"):
        m(img.detach(), torch.randint(11, (1, 6)))


def test_caption_batch_and_loss_ignore_padding():
    caps = ["red square left", "blue circle"]
    tok = caption_tokenizer(caps)
    ids, tgt = caption_batch(caps, tok)
    assert ids.shape == tgt.shape == (2, 4)
    assert tok.decode(ids[1]) == "<bos> blue circle <pad>"
    assert tgt[1].tolist()[:3] == [tok.stoi["blue"], tok.stoi["circle"], tok.stoi["<eos>"]] and tgt[1, 3] == -100
    m = make_vlm(8, 4, tok.vocab_size, max_text=4, enc_width=16, d_model=16, n_head=2, seed=0)
    img = torch.rand(2, 3, 8, 8)
    logits, loss = m(img, ids, tgt)
    keep = tgt != -100
    ref = F.cross_entropy(logits[keep], tgt[keep])
    assert torch.allclose(loss, ref, atol=1e-6)


def test_captioner_learns_image_dependent_captions():
    g = torch.Generator().manual_seed(0)
    n = 256
    side = torch.randint(2, (n,), generator=g)
    x = 0.05 * torch.rand(n, 3, 8, 8, generator=g)
    for i in range(n):
        x[i, 0, :, 4 * int(side[i]):4 * int(side[i]) + 4] = 1.0
    caps = ["red " + ("left" if s == 0 else "right") for s in side.tolist()]
    tok = caption_tokenizer(caps)
    ids, tgt = caption_batch(caps, tok)
    m = make_vlm(8, 4, tok.vocab_size, max_text=3, enc_width=16, d_model=16, n_head=2, seed=0)
    losses = train_captioner(m, x[:200], ids[:200], tgt[:200], steps=150, batch=32, lr=3e-3, seed=0)
    assert losses[-1] < 0.5 * losses[0]
    out = greedy_decode(m, x[200:], tok, 2)
    assert sum(a == b for a, b in zip(out, caps[200:])) / 56 >= 0.9
