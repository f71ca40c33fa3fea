"""paper_suite.interpretability.transcoders against independent references: numpy's matrix inverse and a brute-force
path enumeration for the influence, a hand-written multi-head attention for the OV split, autograd linearity for
the replacement graph, and a plain ReLU transcoder for the unit-norm rescaling."""
import itertools

import numpy as np
import pytest
import torch

from paper_suite.interpretability.transcoders import (MMDiT, TimestepTranscoder, graph_influence, mmdit_forward,
                                                      ov_contributions, patchify, prune_nodes, replacement_edges,
                                                      unit_norm_decoder, unpatchify)


def _dag(n, seed, density=0.5):
    rs = np.random.default_rng(seed)
    A = np.tril(rs.normal(size=(n, n)), -1) * (rs.random((n, n)) < density)
    perm = rs.permutation(n)                      # any node order: a DAG need not be lower-triangular
    return A[np.ix_(perm, perm)]


def _normalise(A):
    Ah = np.abs(A)
    s = Ah.sum(1, keepdims=True)
    return np.divide(Ah, s, out=np.zeros_like(Ah), where=s > 0)


@pytest.mark.parametrize("seed", range(5))
def test_graph_influence_is_the_neumann_series_of_the_normalised_graph(seed):
    A = _dag(15, seed)
    w = np.random.default_rng(100 + seed).random(15) * (np.random.default_rng(seed).random(15) < 0.3)
    ref = w @ (np.linalg.inv(np.eye(15) - _normalise(A)) - np.eye(15))
    got = graph_influence(torch.tensor(A), torch.tensor(w)).numpy()
    np.testing.assert_allclose(got, ref, atol=1e-12)


def test_graph_influence_equals_a_brute_force_sum_over_paths():
    A = _dag(7, 11, density=0.7)
    Ah = _normalise(A)
    w = np.zeros(7); w[np.argmax(np.abs(A).sum(1))] = 1.0
    ref = np.zeros(7)
    for L in range(1, 7):                        # every path j -> ... -> i of length L, weight w_i Π Â
        for path in itertools.permutations(range(7), L + 1):
            prod = np.prod([Ah[path[k + 1], path[k]] for k in range(L)])
            ref[path[0]] += w[path[-1]] * prod
    np.testing.assert_allclose(graph_influence(torch.tensor(A), torch.tensor(w)).numpy(), ref, atol=1e-12)


def test_graph_influence_rejects_cycles_and_bad_shapes():
    A = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="cycle"):
        graph_influence(A, torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="adjacency must be"):
        graph_influence(torch.zeros(3, 2), torch.zeros(3))


def test_prune_nodes_keeps_the_fewest_top_nodes_reaching_the_threshold_ties_and_targets():
    # chain-free star: target 0 reads nodes 1..4 with |weights| 4, 3, 2, 1 → influences 0.4, 0.3, 0.2, 0.1
    A = torch.zeros(5, 5, dtype=torch.float64)
    A[0, 1:] = torch.tensor([4.0, -3.0, 2.0, 1.0])
    w = torch.tensor([1.0, 0, 0, 0, 0], dtype=torch.float64)
    assert prune_nodes(A, w, 0.7).tolist() == [True, True, True, False, False]
    assert prune_nodes(A, w, 0.71).tolist() == [True, True, True, True, False]
    assert prune_nodes(A, w, 1.0).tolist() == [True] * 5
    A[0, 1:] = torch.tensor([2.0, 1.0, 1.0, 0.0])        # a tie at the cut keeps both
    assert prune_nodes(A, w, 0.6).tolist() == [True, True, True, True, False]
    with pytest.raises(ValueError, match="node_threshold"):
        prune_nodes(A, w, 0.0)


def test_ov_contributions_sum_to_a_hand_written_multi_head_attention():
    g = torch.Generator().manual_seed(0)
    H, Q, T, d, dh = 3, 4, 6, 8, 2
    x = torch.randn(T, d, generator=g, dtype=torch.float64)
    pat = torch.softmax(torch.randn(H, Q, T, generator=g, dtype=torch.float64), -1)
    WV, WO = torch.randn(H, d, dh, generator=g, dtype=torch.float64), torch.randn(H, dh, d, generator=g, dtype=torch.float64)
    heads = [pat[h] @ (x @ WV[h]) for h in range(H)]
    ref = torch.cat(heads, -1) @ torch.cat(list(WO), 0)
    C = ov_contributions(x, pat, WV, WO)
    assert C.shape == (H, Q, T, d)
    torch.testing.assert_close(C.sum((0, 2)), ref)
    torch.testing.assert_close(C[1, 2, 3], pat[1, 2, 3] * x[3] @ WV[1] @ WO[1])
    with pytest.raises(ValueError, match="expected x"):
        ov_contributions(x, pat[:, :, :5], WV, WO)


def test_unit_norm_decoder_keeps_the_map_and_normalises_rows():
    tc = TimestepTranscoder(6, 10, seed=1)
    with torch.no_grad():
        tc.W_dec.mul_(torch.rand(10, 1) * 3 + 0.1); tc.b_enc.normal_()
    xt = torch.cat([torch.randn(20, 6), torch.rand(20, 1)], 1)
    before = tc(xt)[0]
    unit_norm_decoder(tc)
    torch.testing.assert_close(tc(xt)[0], before, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(tc.W_dec.norm(dim=1), torch.ones(10))


def test_patchify_round_trip():
    img = torch.randn(2, 3, 8, 8)
    z = patchify(img, 4)
    assert z.shape == (2, 4, 48)
    torch.testing.assert_close(unpatchify(z, 4), img)
    torch.testing.assert_close(z[0, 1], img[0, :, :4, 4:].reshape(-1))


def _tiny():
    torch.manual_seed(0)
    m = MMDiT(vocab=5, n_txt=3, n_img=4, patch_dim=12, d=8, n_blocks=2, heads=2)
    with torch.no_grad():                       # zero-initialised modulations and output would make a trivial graph
        for p in m.parameters():
            if p.abs().sum() == 0:
                p.normal_(0, 0.3)
    tcs = {}
    for b in range(2):
        for s in ("txt", "img"):
            tc = TimestepTranscoder(8, 12, seed=b)
            with torch.no_grad():
                tc.b_enc.fill_(0.2); tc.film[2].weight.normal_(0, 0.3)
            tcs[(b, s)] = tc
    return m, tcs


def test_replacement_edges_sum_exactly_and_reproduce_the_output():
    m, tcs = _tiny()
    ids, z = torch.tensor([1, 2, 3]), torch.randn(4, 12)
    G = replacement_edges(m, tcs, ids, z, 0.4, torch.randn(4, 12, dtype=torch.float64))
    assert next(m.parameters()).dtype == torch.float32         # the model is not converted in place
    torch.testing.assert_close(G["sum_edges"], G["value"], atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(G["v_repl"], G["v_orig"], atol=1e-12, rtol=1e-12)
    # the original velocity of the float32 model, independently
    with torch.no_grad():
        v = mmdit_forward(m, m.embed(ids[None], z[None]), torch.tensor([0.4]))[0]
    torch.testing.assert_close(G["v_orig"].float(), v, atol=1e-5, rtol=1e-5)
    feat = [i for i, nd in enumerate(G["nodes"]) if nd[0] == "feat"]
    assert feat and G["A"].shape == (len(G["nodes"]),) * 2
    # a DAG: block-0 features receive no edge from block-1 features
    b1 = [i for i in feat if G["nodes"][i][1][0] == 1]
    b0 = [i for i in feat if G["nodes"][i][1][0] == 0]
    assert float(G["A"][np.ix_(b0, b1)].abs().sum()) == 0.0


def test_with_frozen_patterns_text_reaches_the_image_only_through_image_to_text_attention():
    m, _ = _tiny()
    ids, z = torch.tensor([1, 2, 3]), torch.randn(1, 4, 12)
    t = torch.tensor([0.3])
    cache = {}
    with torch.no_grad():
        x = m.embed(ids[None], z)
        mmdit_forward(m, x, t, cache=cache)
    cut = lambda b, A: torch.cat([A[..., :3, :], torch.cat([torch.zeros_like(A[..., 3:, :3]), A[..., 3:, 3:]], -1)], -2)
    for edit, zero in ((None, False), (cut, True)):
        xx = {k: v.detach().clone().requires_grad_(True) for k, v in x.items()}
        mmdit_forward(m, xx, t, frozen=cache, pattern_fn=edit).sum().backward()
        assert (float(xx["txt"].grad.abs().max()) == 0.0) == zero
