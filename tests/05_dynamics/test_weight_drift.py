"""paper_suite.dynamics.weight_drift against closed forms, brute force and properties."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats

from paper_suite.dynamics.weight_drift import (MLP, activation, bias_factor, init_gradient, loss_fn, mse_prediction,
                                               spike_ratio, stein_factor, train_mlp, zero_fraction)


@pytest.mark.parametrize("q", [0.5, 1.0, 3.0])
def test_bias_factor_closed_forms(q):
    # ReLU: E[relu(z)] = sqrt(q / 2π); ReLU²: 2 E[relu(z)^3] = 2 q^{3/2} sqrt(2/π); tanh: odd, so 0
    assert bias_factor("relu", q) == pytest.approx(math.sqrt(q / (2 * math.pi)), rel=1e-7)
    assert bias_factor("relu2", q) == pytest.approx(2 * q ** 1.5 * math.sqrt(2 / math.pi), rel=1e-6)
    assert abs(bias_factor("tanh", q)) < 1e-10


@pytest.mark.parametrize("name", ["gelu", "silu", "relu2"])
def test_bias_factor_against_sampling_and_stein(name):
    z = torch.tensor(stats.norm.rvs(size=400_000, random_state=0), dtype=torch.float64, requires_grad=True)
    a = activation(name)(z)
    (g,) = torch.autograd.grad(a.sum(), z)
    mc = (a * g).detach().numpy()
    assert abs(mc.mean() - bias_factor(name)) < 5 * mc.std() / math.sqrt(len(mc))
    assert bias_factor(name, 2.0) == pytest.approx(stein_factor(name, 2.0), rel=1e-6)
    assert bias_factor(name) > 0


def test_init_gradient_matches_the_exact_mse_value_and_signs():
    kw = dict(trials=300, batch=32, width=64, dim=16, out=5, seed=0)
    m, se = init_gradient("gelu", "mse", **kw)
    assert abs(m - mse_prediction("gelu", 5, 64)) < 4 * se
    m, se = init_gradient("relu", "ce", **kw)
    assert m / se > 4
    m, se = init_gradient("tanh", "ce", **kw)
    assert abs(m / se) < 4


def test_init_gradient_bad_loss():
    with pytest.raises(ValueError, match="allowed: mse, ce"):
        init_gradient("relu", "hinge", trials=2, batch=2, width=2, dim=2, out=2, seed=0)


def test_unknown_activation_is_a_clear_error():
    with pytest.raises(ValueError, match="allowed: relu, gelu"):
        activation("swish2")


def test_clipped_square():
    z = torch.linspace(-4, 4, 81)
    assert torch.equal(activation("relu2_clip")(z), torch.clamp(F.relu(z) ** 2, max=4.0))
    assert torch.allclose(activation("gelu2")(z), F.gelu(z) ** 2)


def test_topk_sparsity_is_exact_per_sample():
    net = MLP("relu", 40, sparsity=0.9)
    z = torch.randn(7, 40) + 5                # all positive: exactly k = 4 survive, the 4 largest
    h = net._act(z)
    assert ((h != 0).sum(-1) == 4).all()
    assert torch.equal(torch.sort(h, -1).values[:, -4:], torch.sort(z, -1).values[:, -4:])


def test_mse_loss_is_half_squared_error():
    logits, y = torch.randn(4, 3), torch.tensor([0, 2, 1, 1])
    ref = 0.5 * ((logits - F.one_hot(y, 3).float()) ** 2).sum(1).mean()
    assert torch.allclose(loss_fn("mse", logits, y), ref)
    assert torch.allclose(loss_fn("ce", logits, y), F.cross_entropy(logits, y))


def test_training_is_seeded_and_traces_every_step():
    X, y = torch.rand(100, 64), torch.randint(10, (100,))
    kw = dict(act="relu", loss="mse", width=16, steps=4, batch=8, lr=1e-3, seed=3)
    _, a = train_mlp(X, y, X, y, **kw)
    _, b = train_mlp(X, y, X, y, **kw)
    assert len(a.w_mean) == 5 and np.array_equal(a.w_mean, b.w_mean) and a.test_acc == b.test_acc


def test_spike_statistics():
    h = torch.zeros(100); h[0] = 10.0
    assert spike_ratio(h) == pytest.approx(10.0 / math.sqrt(1.0), rel=1e-6)
    assert zero_fraction(h) == pytest.approx(0.99)
