"""paper_suite.applications.dgp against references that share no code with it: scipy's Jensen-Shannon distance,
a float64 numpy loop for the gate, autograd for the derivative of the injection, a hand loop for the mixture."""
import numpy as np
import pytest
import scipy.spatial.distance
import torch

from paper_suite.applications.dgp import (VQADecoder, PooledViT, dgp_gates, dgp_inject, routing_jsd,
                                          vqa_questions, ANSWERS)


def test_routing_jsd_matches_scipy_squared_base_e():
    rng = np.random.default_rng(0)
    P, Q = rng.dirichlet(np.ones(6), 40), rng.dirichlet(0.2 * np.ones(6), 40)
    ref = np.array([scipy.spatial.distance.jensenshannon(p, q) ** 2 for p, q in zip(P, Q)])
    ours = routing_jsd(torch.tensor(P), torch.tensor(Q)).numpy()
    assert np.allclose(ours, ref, atol=1e-12)


def test_routing_jsd_bounds_symmetry_zeros():
    p = torch.tensor([0.7, 0.3, 0.0], dtype=torch.float64)
    q = torch.tensor([0.0, 0.2, 0.8], dtype=torch.float64)
    assert float(routing_jsd(p, p)) == pytest.approx(0.0, abs=1e-15)
    assert float(routing_jsd(p, q)) == pytest.approx(float(routing_jsd(q, p)), abs=1e-15)
    assert 0 < float(routing_jsd(p, q)) < np.log(2)
    assert float(routing_jsd(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]))) == pytest.approx(np.log(2), abs=1e-6)
    with pytest.raises(ValueError, match="same shape"):
        routing_jsd(torch.ones(3), torch.ones(4))
    with pytest.raises(ValueError, match="non-negative"):
        routing_jsd(torch.tensor([1.0, -0.5]), torch.tensor([0.5, 0.5]))


def test_dgp_gates_matches_numpy_loop():
    g = torch.Generator().manual_seed(1)
    h = torch.randn(4, 8, 6, dtype=torch.float64, generator=g)
    W, b = torch.randn(5, 6, dtype=torch.float64, generator=g), torch.randn(5, dtype=torch.float64, generator=g)
    mask = torch.rand(4, 8, generator=g) > 0.5
    mask[:, -1] = True
    tau = 0.5
    out = dgp_gates(h, mask, W, b, tau)
    for i in range(4):
        s = h[i].numpy()[mask[i].numpy()].mean(0)
        z = (W.numpy() @ s + b.numpy()) / tau
        e = np.exp(z - z.max())
        assert np.allclose(out[i].numpy(), e / e.sum(), atol=1e-12)
    # question dependence: changing only a text position changes the gate; changing a non-text one does not
    h2 = h.clone()
    h2[0, ~mask[0]] += 5.0
    assert torch.allclose(dgp_gates(h2, mask, W, b, tau), out)
    h2[0, -1] += 5.0
    assert not torch.allclose(dgp_gates(h2, mask, W, b, tau)[0], out[0])


def test_dgp_gates_errors():
    h = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="tau"):
        dgp_gates(h, torch.ones(2, 3, dtype=torch.bool), torch.zeros(5, 4), torch.zeros(5), tau=0.0)
    with pytest.raises(ValueError, match="text"):
        dgp_gates(h, torch.zeros(2, 3, dtype=torch.bool), torch.zeros(5, 4), torch.zeros(5))
    with pytest.raises(ValueError, match="W"):
        dgp_gates(h, torch.ones(2, 3, dtype=torch.bool), torch.zeros(5, 3), torch.zeros(5))


def _inputs(seed=2):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(3, 7, 4, dtype=torch.float64, generator=g)
    vis = torch.tensor([1, 2, 3])
    feats = torch.randn(5, 3, 3, 4, dtype=torch.float64, generator=g)
    alpha = torch.softmax(torch.randn(3, 5, dtype=torch.float64, generator=g), -1)
    return h, vis, feats, alpha


def test_dgp_inject_matches_loop_and_leaves_text_alone():
    h, vis, feats, alpha = _inputs()
    beta = torch.tensor(0.8, dtype=torch.float64)
    out = dgp_inject(h, vis, feats, alpha, beta)
    ref = h.clone()
    for bb in range(3):
        for j, t in enumerate(vis.tolist()):
            ref[bb, t] += np.tanh(0.8) * sum(alpha[bb, k] * feats[k, bb, j] for k in range(5))
    assert torch.allclose(out, ref, atol=1e-12)
    assert torch.equal(out[:, [0, 4, 5, 6]], h[:, [0, 4, 5, 6]])


def test_dgp_inject_identity_and_derivative_at_zero():
    h, vis, feats, alpha = _inputs(3)
    beta = torch.zeros((), dtype=torch.float64)
    assert torch.equal(dgp_inject(h, vis, feats, alpha, beta), h)
    J = torch.autograd.functional.jacobian(lambda b_: dgp_inject(h, vis, feats, alpha, b_), beta)
    M = torch.einsum("bk,kbtd->btd", alpha, feats)
    assert torch.allclose(J[:, vis], M, atol=1e-12)
    assert float(J[:, [0, 4, 5, 6]].abs().max()) == 0.0
    a = alpha.clone().requires_grad_()
    f = feats.clone().requires_grad_()
    dgp_inject(h, vis, f, a, beta).pow(2).sum().backward()
    assert float(a.grad.abs().max()) == 0.0 and float(f.grad.abs().max()) == 0.0
    with pytest.raises(ValueError, match="alpha"):
        dgp_inject(h, vis, feats, alpha[:, :4], beta)


def test_pooled_vit_mixing_and_decoder_choices():
    x = torch.rand(2, 3, 16, 16)
    zs = PooledViT(16, 8, width=8, depth=2, heads=2, gamma=1.0)(x)
    assert len(zs) == 3 and float((zs[2] - zs[2][:, :1]).abs().max()) < 1e-6
    with pytest.raises(ValueError, match="gamma"):
        PooledViT(16, 8, gamma=1.5)
    with pytest.raises(ValueError, match="variant must be one of"):
        VQADecoder("llava2", 5, 8, 4, 10, 6, 3)
    torch.manual_seed(0)
    m = VQADecoder("dgp", 5, 8, 4, 10, 6, 3, d=16, n_layer=2, heads=2, hidden=8)
    out = m(torch.randn(5, 2, 4, 8), torch.randint(0, 10, (2, 3)))
    assert out.shape == (2, 6) and m.last_gates.shape == (2, 2, 5)


def test_vqa_questions_answers_from_scene():
    from paper_suite.synthimg import grid_scenes
    sc = grid_scenes(5, 16, 1, grid=(2, 2), colours=("red", "green", "blue", "yellow"))
    q = vqa_questions(sc, range(5), 12, 0)
    for j in range(len(q["img"])):
        i, t = int(q["img"][j]), int(q["qtype"][j])
        words = [q["vocab"][int(w)] for w in q["ids"][j]]
        a = ANSWERS[int(q["answer"][j])]
        if t == 0:
            assert a == ("red", "green", "blue", "yellow")[sc["colour"][i].ravel()[int(words[1][4:])]]
        elif t == 3:
            n = int((sc["shape"][i].ravel() == ("circle", "square", "triangle").index(words[1])).sum())
            assert a == ("4+" if n >= 4 else str(n))
