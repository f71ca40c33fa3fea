"""paper_suite.tinytf against transformer_lens's HookedTransformer built from the same weights (tinytf.hooked_copy)."""
import os
import warnings

import pytest
import torch

from paper_suite.tinytf import GPT, GPTConfig, capture, head_weights, hooked_copy, pattern_names, residual_names

os.environ.setdefault("HF_HUB_OFFLINE", "1")       # nothing is fetched: the model is built from a config


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


@pytest.mark.parametrize("fold", [False, True])
def test_head_weights_match_transformer_lens(fold):
    """head_weights against the HookedTransformer's own W_Q, W_K, W_V, W_O, and with fold_ln=True against
    transformer_lens' fold_layer_norm (gain folded into the reading weights, then centred)."""
    torch.manual_seed(2)
    m = _randomise(GPT(GPTConfig(vocab_size=11, block_size=6, n_layer=2, n_head=4, d_model=16)))
    h = hooked_copy(m)
    sd = {k: v.clone() for k, v in h.state_dict().items()}
    if fold:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sd = h.fold_layer_norm(sd)
    for layer in range(2):
        ours = head_weights(m, layer, fold_ln=fold)
        for name, w in zip("QKVO", ours):
            assert torch.allclose(w, sd[f"blocks.{layer}.attn.W_{name}"], atol=1e-6), (layer, name)


def test_head_weights_bad_layer():
    m = GPT(GPTConfig(vocab_size=5, block_size=4, n_layer=2, n_head=2, d_model=8))
    with pytest.raises(ValueError, match="layer must be in 0..1"):
        head_weights(m, 2)
