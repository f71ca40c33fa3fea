"""paper_suite.lora against peft 0.21.2's LoRA on the same weights, and Eqs. (2)-(4) written out by hand."""
import copy
import math

import pytest
import torch
import torch.nn as nn

from paper_suite.lora import (LoRALinear, apply_lora, delta_weights, lora_layers, lora_parameters, merge_lora,
                              remove_lora, unmerge_lora)
from paper_suite.tinytf import GPT, GPTConfig

peft = pytest.importorskip("peft")
from peft import LoraConfig, inject_adapter_in_model  # noqa: E402

TARGETS = ["qkv", "fc"]


def pair(rank=4, alpha=8.0, seed=0):
    """A tinytf GPT adapted by peft and the same GPT adapted by us, with identical (random, non-zero) A and B."""
    torch.manual_seed(seed)
    base = GPT(GPTConfig(vocab_size=40, block_size=10, n_layer=2, n_head=2, d_model=16))
    theirs = inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=alpha, target_modules=TARGETS, lora_dropout=0.0,
                                                init_lora_weights=False), copy.deepcopy(base))
    ours = copy.deepcopy(base)
    layers = apply_lora(ours, TARGETS, rank=rank, alpha=alpha)
    with torch.no_grad():
        for name, layer in layers.items():
            pm = theirs.get_submodule(name)
            layer.A.copy_(pm.lora_A["default"].weight)
            layer.B.copy_(pm.lora_B["default"].weight)
    return base, theirs, ours, layers


def test_forward_and_trainable_set_match_peft():
    base, theirs, ours, layers = pair()
    idx = torch.randint(40, (3, 10))
    assert not torch.allclose(theirs(idx)[0], base(idx)[0], atol=1e-4)       # the adapter does something
    torch.testing.assert_close(ours(idx)[0], theirs(idx)[0], rtol=1e-5, atol=1e-6)
    n_ours = sum(p.numel() for p in ours.parameters() if p.requires_grad)
    n_theirs = sum(p.numel() for n, p in theirs.named_parameters() if "lora_" in n)
    assert n_ours == n_theirs == sum(p.numel() for p in lora_parameters(ours))


def test_gradients_match_peft():
    _, theirs, ours, layers = pair(seed=1)
    idx, y = torch.randint(40, (4, 10)), torch.randint(40, (4, 10))
    ours(idx, y)[1].backward()
    theirs(idx, y)[1].backward()
    for name, layer in layers.items():
        pm = theirs.get_submodule(name)
        torch.testing.assert_close(layer.A.grad, pm.lora_A["default"].weight.grad, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(layer.B.grad, pm.lora_B["default"].weight.grad, rtol=1e-4, atol=1e-6)


def test_delta_weight_merge_unmerge_match_peft():
    _, theirs, ours, layers = pair(rank=3, alpha=5.0, seed=2)
    idx = torch.randint(40, (2, 10))
    before = ours(idx)[0].detach()
    for name, dw in delta_weights(ours).items():
        torch.testing.assert_close(dw, theirs.get_submodule(name).get_delta_weight("default"), rtol=1e-5, atol=1e-7)
    merge_lora(ours)
    for name in layers:
        theirs.get_submodule(name).merge()
        torch.testing.assert_close(ours.get_submodule(name).base.weight,
                                   theirs.get_submodule(name).base_layer.weight, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours(idx)[0], before, rtol=1e-5, atol=1e-5)
    unmerge_lora(ours)
    assert not any(m.merged for m in lora_layers(ours).values())
    torch.testing.assert_close(ours(idx)[0], before, rtol=1e-5, atol=1e-5)


def test_remove_lora_matches_peft_merge_and_unload():
    from peft.tuners.lora import LoraLayer
    base, theirs, ours, layers = pair(seed=3)
    for m in theirs.modules():
        if isinstance(m, LoraLayer):
            m.merge()
    idx = torch.randint(40, (2, 10))
    plain = remove_lora(copy.deepcopy(ours))
    assert not lora_layers(plain) and all(type(plain.get_submodule(n)) is nn.Linear for n in layers)
    for n in layers:
        torch.testing.assert_close(plain.get_submodule(n).weight, theirs.get_submodule(n).base_layer.weight,
                                   rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(plain(idx)[0], ours(idx)[0], rtol=1e-5, atol=1e-5)
    frozen = remove_lora(copy.deepcopy(ours), merge=False)          # the frozen model back
    torch.testing.assert_close(frozen(idx)[0], base(idx)[0])


def test_default_init_is_peft_default():
    torch.manual_seed(0)
    lin = nn.Linear(50, 7)
    layer = LoRALinear(lin, rank=5, alpha=10, seed=4)
    bound = 1 / math.sqrt(50)                       # kaiming_uniform(a = sqrt 5) = U(-1/sqrt(d_in), 1/sqrt(d_in))
    assert layer.A.abs().max() <= bound and layer.A.abs().max() > 0.8 * bound and layer.A.std() > 0.4 * bound
    assert torch.count_nonzero(layer.B) == 0 and layer.scaling == 2.0
    x = torch.randn(3, 50)
    assert torch.equal(layer(x), lin(x))
    again = LoRALinear(nn.Linear(50, 7), rank=5, alpha=10, seed=4)
    assert torch.equal(again.A, layer.A)            # seeded: the same A
    g = LoRALinear(nn.Linear(50, 7), rank=5, init="gaussian", seed=0)
    assert 0.15 < g.A.std() < 0.25                  # N(0, 1/r^2)


def test_in_proj_follows_eq_2_and_3_for_any_leading_shape():
    torch.manual_seed(5)
    lin = nn.Linear(8, 6)
    M = torch.randn(8, 8)
    layer = LoRALinear(lin, rank=3, alpha=1.5, in_proj=M)
    with torch.no_grad():
        layer.B.normal_()
    for shape in [(8,), (5, 8), (2, 3, 8), (2, 2, 2, 8)]:
        x = torch.randn(shape)
        ref = lin.weight @ x.unsqueeze(-1) + 0.5 * layer.B @ layer.A @ M @ x.unsqueeze(-1)
        torch.testing.assert_close(layer(x), ref.squeeze(-1) + lin.bias, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(layer(x), x @ (lin.weight + layer.delta_weight()).T + lin.bias, rtol=1e-5, atol=1e-5)


def test_projection_branch_is_blind_and_gets_no_gradient_along_u():
    torch.manual_seed(6)
    U = torch.linalg.qr(torch.randn(10, 3))[0]
    P = torch.eye(10) - U @ U.T
    layer = LoRALinear(nn.Linear(10, 4), rank=2, alpha=2, in_proj=P)
    with torch.no_grad():
        layer.B.normal_()
    x = torch.randn(7, 10)
    moved = x + torch.randn(7, 3) @ U.T
    torch.testing.assert_close(layer.branch(moved), layer.branch(x), rtol=1e-5, atol=1e-5)
    assert (layer.delta_weight() @ U).abs().max() < 1e-5
    layer(x).square().sum().backward()
    assert (layer.A.grad @ U).abs().max() < 1e-5 * layer.A.grad.abs().max()
    plain = LoRALinear(nn.Linear(10, 4), rank=2, alpha=2)      # without the projection it does see U
    with torch.no_grad():
        plain.B.normal_()
    assert not torch.allclose(plain.branch(moved), plain.branch(x), atol=1e-3)


def test_targets_by_list_regex_predicate_and_per_layer_projection():
    torch.manual_seed(7)
    m = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, d_model=8))
    assert list(apply_lora(copy.deepcopy(m), r"blocks\.1\..*")) == ["blocks.1.attn.qkv", "blocks.1.attn.proj",
                                                                    "blocks.1.mlp.fc", "blocks.1.mlp.proj"]
    assert list(apply_lora(copy.deepcopy(m), lambda n: n == "head", freeze=False)) == ["head"]
    P = {"blocks.0.mlp.fc": torch.eye(8) * 0.5}
    layers = apply_lora(m, ["blocks.0.mlp.fc", "blocks.1.mlp.fc"], in_proj=P, seed=3)
    assert layers["blocks.0.mlp.fc"].in_proj is not None and layers["blocks.1.mlp.fc"].in_proj is None
    assert not torch.equal(layers["blocks.0.mlp.fc"].A, layers["blocks.1.mlp.fc"].A)   # seed + i per layer


def test_dropout_only_in_training():
    torch.manual_seed(8)
    layer = LoRALinear(nn.Linear(6, 6), rank=2, dropout=0.5)
    with torch.no_grad():
        layer.B.normal_()
    x = torch.randn(50, 6)
    layer.train()
    assert not torch.allclose(layer(x), layer(x))
    layer.eval()
    torch.testing.assert_close(layer(x), x @ (layer.base.weight + layer.delta_weight()).T + layer.base.bias)


def test_bad_input_is_refused():
    lin = nn.Linear(4, 3)
    with pytest.raises(ValueError, match="rank"):
        LoRALinear(lin, rank=0)
    with pytest.raises(ValueError, match="allowed"):
        LoRALinear(lin, rank=2, init="xavier")
    with pytest.raises(ValueError, match="shape"):
        LoRALinear(lin, rank=2, in_proj=torch.eye(3))
    with pytest.raises(TypeError):
        LoRALinear(nn.Conv1d(2, 2, 1), rank=1)
    with pytest.raises(ValueError, match="linear layers"):
        apply_lora(nn.Sequential(nn.Linear(2, 2)), ["qkv"])
    layer = LoRALinear(lin, rank=1)
    layer.merge()
    with pytest.raises(RuntimeError):
        layer.merge()
