"""paper_suite.tinytf against transformer_lens's HookedTransformer built from the same weights."""
import os
import warnings

import pytest
import torch

from paper_suite.tinytf import GPT, GPTConfig, capture, pattern_names, residual_names

os.environ.setdefault("HF_HUB_OFFLINE", "1")       # nothing is fetched: the model is built from a config
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from transformer_lens import HookedTransformer, HookedTransformerConfig


def hooked_copy(m: GPT) -> HookedTransformer:
    """A HookedTransformer with the same architecture and weights as `m` (block LayerNorm on, or fully off)."""
    c = m.cfg
    H, C = c.n_head, c.d_model
    dh = C // H
    norm = "LN" if c.block_norm else None
    cfg = HookedTransformerConfig(n_layers=c.n_layer, d_model=C, n_ctx=c.block_size, d_head=dh, n_heads=H,
                                  d_vocab=c.vocab_size, act_fn="gelu", normalization_type=norm, attn_only=c.attn_only,
                                  d_mlp=None if c.attn_only else (c.d_ff or 4 * C), positional_embedding_type="standard",
                                  device="cpu", seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        h = HookedTransformer(cfg)
    sd = h.state_dict()
    sd["embed.W_E"], sd["pos_embed.W_pos"] = m.tok.weight, m.pos.weight
    heads = lambda W: W.T.reshape(C, H, dh).permute(1, 0, 2)          # nn.Linear (out, in) → (H, d_model, d_head)
    for i, b in enumerate(m.blocks):
        p = f"blocks.{i}."
        Wq, Wk, Wv = b.attn.qkv.weight.split(C, 0)
        bq, bk, bv = b.attn.qkv.bias.split(C, 0)
        sd[p + "attn.W_Q"], sd[p + "attn.W_K"], sd[p + "attn.W_V"] = heads(Wq), heads(Wk), heads(Wv)
        sd[p + "attn.b_Q"], sd[p + "attn.b_K"], sd[p + "attn.b_V"] = bq.view(H, dh), bk.view(H, dh), bv.view(H, dh)
        sd[p + "attn.W_O"], sd[p + "attn.b_O"] = b.attn.proj.weight.T.reshape(H, dh, C), b.attn.proj.bias
        if c.block_norm:
            sd[p + "ln1.w"], sd[p + "ln1.b"] = b.ln1.weight, b.ln1.bias
        if not c.attn_only:
            sd[p + "ln2.w"], sd[p + "ln2.b"] = b.ln2.weight, b.ln2.bias
            sd[p + "mlp.W_in"], sd[p + "mlp.b_in"] = b.mlp.fc.weight.T, b.mlp.fc.bias
            sd[p + "mlp.W_out"], sd[p + "mlp.b_out"] = b.mlp.proj.weight.T, b.mlp.proj.bias
    if c.block_norm:
        sd["ln_final.w"], sd["ln_final.b"] = m.ln_f.weight, m.ln_f.bias
    sd["unembed.W_U"], sd["unembed.b_U"] = m.head.weight.T, torch.zeros(c.vocab_size)
    h.load_state_dict({k: v.detach().clone() for k, v in sd.items()})
    return h.eval()


def _randomise(m: GPT) -> GPT:
    """O(1) weights everywhere: the 0.02-scale init, unit LayerNorm gains and zero biases would hide a mix-up
    (and keep the MLP inputs where every GELU variant agrees)."""
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m.eval()


@pytest.mark.parametrize("tied", [True, False])
def test_gpt_with_mlp_matches_hooked_transformer(tied):
    torch.manual_seed(0)
    m = _randomise(GPT(GPTConfig(vocab_size=13, block_size=10, n_layer=2, n_head=2, d_model=12, tied=tied,
                                 explicit_attention=True)))
    h = hooked_copy(m)
    x = torch.randint(13, (3, 10))
    with capture(m, pattern_names(m) + residual_names(m)) as st:
        logits, _ = m(x)
    ref, cache = h.run_with_cache(x)
    assert torch.allclose(logits, ref, atol=1e-5)
    for i in range(2):
        assert torch.allclose(st[f"blocks.{i}.attn.pattern"][0], cache[f"blocks.{i}.attn.hook_pattern"], atol=1e-6)
        assert torch.allclose(st[f"blocks.{i}"][0], cache[f"blocks.{i}.hook_resid_post"], atol=1e-5)


def test_attention_only_norm_free_matches_hooked_transformer():
    """HookedTransformer without normalisation also drops the final LN, so compare the residual stream and patterns,
    and the logits through our final LN and read-out."""
    torch.manual_seed(1)
    m = _randomise(GPT(GPTConfig(vocab_size=17, block_size=12, n_layer=2, n_head=2, d_model=16, tied=False,
                                 explicit_attention=True, attn_only=True, block_norm=False)))
    h = hooked_copy(m)
    x = torch.randint(17, (4, 12))
    with capture(m, pattern_names(m) + residual_names(m)) as st:
        logits, _ = m(x)
    _, cache = h.run_with_cache(x)
    for i in range(2):
        assert torch.allclose(st[f"blocks.{i}.attn.pattern"][0], cache[f"blocks.{i}.attn.hook_pattern"], atol=1e-6)
        assert torch.allclose(st[f"blocks.{i}"][0], cache[f"blocks.{i}.hook_resid_post"], atol=1e-5)
    assert torch.allclose(logits, m.head(m.ln_f(cache["blocks.1.hook_resid_post"])), atol=1e-5)
