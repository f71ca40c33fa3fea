"""paper_suite.interpretability.acc against independent references: brute-force bilinear forms, captum's
Integrated Gradients, brute-force re-softmax, scipy's subspace angles, and the model's own forward pass."""
import math

import numpy as np
import pytest
import torch
from scipy.linalg import subspace_angles

from paper_suite.interpretability.acc import (acc_greedy, folded_inputs, ig_softmax, ioi_batch, ioi_prompt, ioi_vocab,
                                              residual_parts, score_breakdown, select_signals, signal_overlap,
                                              trace_firing)
from paper_suite.tinytf import GPT, GPTConfig, hidden_states


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def test_score_breakdown_matches_brute_force_terms_and_sums_to_scores():
    g = _g()
    D, dh, Cd, Cs, T = 10, 3, 4, 3, 5
    Wq, Wk = torch.randn(D, dh, generator=g, dtype=torch.float64), torch.randn(D, dh, generator=g, dtype=torch.float64)
    dp, sp = torch.randn(Cd, D, generator=g, dtype=torch.float64), torch.randn(Cs, T, D, generator=g, dtype=torch.float64)
    B = score_breakdown(dp, sp, Wq, Wk)
    assert B.shape == (Cd, Cs, dh, T)
    U, S, Vh = np.linalg.svd((Wq @ Wk.T).numpy())
    for a in range(Cd):
        for b in range(Cs):
            for k in range(dh):
                for t in range(T):
                    ref = S[k] * (dp[a].numpy() @ U[:, k]) * (sp[b, t].numpy() @ Vh[k]) / math.sqrt(dh)
                    assert abs(float(B[a, b, k, t]) - ref) < 1e-10
    scores = (dp.sum(0) @ Wq) @ (sp.sum(0) @ Wk).T / math.sqrt(dh)
    assert torch.allclose(B.sum((0, 1, 2)), scores, atol=1e-10)
    with pytest.raises(ValueError):
        score_breakdown(dp[0], sp, Wq, Wk)


def test_ig_softmax_matches_captum_and_is_complete():
    from captum.attr import IntegratedGradients
    t = torch.randn(6, 5, generator=_g(1), dtype=torch.float64)
    ig = ig_softmax(t, 1, steps=2000)
    ig_ref = IntegratedGradients(lambda c: torch.softmax((c * t[None]).sum(1), -1)[:, 1]).attribute(
        torch.ones(1, 6, 1, dtype=torch.float64), baselines=torch.zeros(1, 6, 1, dtype=torch.float64), n_steps=64,
        method="gausslegendre")[0, :, 0]
    assert torch.allclose(ig, ig_ref, atol=1e-6)
    fine = ig_softmax(t, 1, steps=4000)
    assert abs(float(fine.sum()) - float(torch.softmax(t.sum(0), -1)[1] - 1 / 5)) < 1e-6
    with pytest.raises(ValueError):
        ig_softmax(t, 1, steps=0)


def test_select_signals_stops_at_first_drop_and_edge_cases():
    t = torch.randn(8, 6, generator=_g(2), dtype=torch.float64)
    t[:, 0] += 1.0
    p = lambda rows: float(torch.softmax(t.sum(0) - t[rows].sum(0) if rows else t.sum(0), -1)[0])
    thr = 0.5 * p([])
    order = list(range(8))[::-1]
    sel = select_signals(t, 0, thr, order=order)
    if sel != order:
        assert p(sel) < thr and all(p(sel[:m]) >= thr for m in range(len(sel)))
    assert sorted(select_signals(t, 0, 0.0)) == list(range(8))      # never drops below 0: everything
    assert select_signals(t, 0, 2.0) == []                          # p < 2 always: starts below
    big = torch.zeros(3, 4, dtype=torch.float64); big[:, 0] = 5.0
    assert sorted(select_signals(big, 0, 0.1)) == [0, 1, 2]         # never drops below 0.1 until all are gone (then 1/4 ≥ 0.1)
    default = select_signals(t, 0, thr)
    ig_order = torch.argsort(ig_softmax(t, 0), descending=True).tolist()
    assert default == ig_order[:len(default)]


def test_acc_greedy_is_the_brute_force_best_single_removal():
    t = torch.randn(6, 5, generator=_g(3), dtype=torch.float64)
    first = acc_greedy(t, 2, 0.0)[0]
    brute = int(np.argmin([float(torch.softmax(t.sum(0) - t[n], -1)[2]) for n in range(6)]))
    assert first == brute


def test_signal_overlap_matches_scipy_principal_angles():
    rng = np.random.default_rng(0)
    for r1, r2 in ((1, 1), (2, 3), (4, 2)):
        A, B = rng.standard_normal((9, r1)), rng.standard_normal((9, r2))
        ref = float(np.mean(np.cos(subspace_angles(A, B)) ** 2))
        assert abs(signal_overlap(torch.tensor(A), torch.tensor(B)) - ref) < 1e-10
    Q = torch.linalg.qr(torch.randn(9, 2, dtype=torch.float64))[0]
    assert abs(signal_overlap(Q, Q @ torch.tensor([[2.0, 1.0], [0.0, 3.0]], dtype=torch.float64)) - 1) < 1e-10


def _model():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=len(ioi_vocab()), block_size=20, n_layer=2, n_head=4, d_model=32,
                      explicit_attention=True)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))                       # non-trivial LN gains and biases
    return m


def test_residual_parts_and_folding_reproduce_the_forward_pass():
    m = _model()
    idx = ioi_batch(1, seed=4)["ids"][0]
    parts, names = residual_parts(m, idx, 1)
    assert torch.allclose(parts.sum(0), hidden_states(m, idx[None])[1][0], atol=1e-5)
    assert names[:2] == ["tok", "pos"] and "MLP0" in names
    for h in range(4):
        x, xq, xk, Wq, Wk = folded_inputs(m, parts, 1, h)
        blk = m.blocks[1]
        q, k, _ = blk.attn.qkv(blk.ln1(parts.sum(0))).split(32, -1)
        q, k = q[:, h * 8:(h + 1) * 8], k[:, h * 8:(h + 1) * 8]
        assert torch.allclose((x.sum(0) + xq) @ Wq, q, atol=1e-4)
        B = score_breakdown(torch.cat([x[:, 19], xq[None]]), torch.cat([x, xk.expand(1, 20, -1)]), Wq, Wk)
        assert torch.allclose(B.sum((0, 1, 2)), q[19] @ k.T / math.sqrt(8), atol=1e-4)


def test_trace_firing_signals_break_the_attention():
    m = _model()
    b = ioi_batch(1, seed=6)
    idx, roles = b["ids"][0], b["roles"][0]
    edges = trace_firing(m, idx, 1, 0, 19, roles.index("IO"))
    assert {e["side"] for e in edges} <= {"dest", "src"}
    for e in edges:
        assert e["basis"].shape == (32, len(e["ks"]))
        assert torch.allclose(e["basis"].T @ e["basis"], torch.eye(len(e["ks"])), atol=1e-4)


def test_ioi_generator_roles_and_bad_input():
    b = ioi_batch(40, seed=1)
    v = ioi_vocab()
    for n in range(40):
        r, ids = b["roles"][n], b["ids"][n]
        assert ids[r.index("IO")] == b["answer"][n] and ids[r.index("S1")] == ids[r.index("S2")] == b["s"][n]
        assert (b["template"][n] % 2 == 0) == (r.index("IO") < r.index("S1"))
    assert set(b["lang"]) <= {1, 2, 3, 4}
    with pytest.raises(ValueError, match="lang"):
        ioi_prompt(5, True, False, "N0", "N1", "P0", "O0")
    with pytest.raises(ValueError, match="length"):
        ioi_batch(2, length=8)
    assert len(set(v)) == len(v)
