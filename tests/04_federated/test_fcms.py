"""paper_suite.federated.fcms against independent references: per-row loops for the concept-level rule, the
function-preservation identity, scikit-learn's logistic regression, hand-built Flower FitRes, and the loop
against the Flower backend."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from sklearn.linear_model import LogisticRegression

from paper_suite.federated.fcms import (CONCEPTS, AGG_RULES, ConceptBottleneck, ConceptFedAvg, Federation, LocalConfig,
                                        aggregate_concepts, cbm_loss, concept_codes, concept_labels, federated_cbm,
                                        ink_threshold, intervention_accuracy, warm_start_head)
from paper_suite.fl import Client


def test_class_concepts_determine_the_digit():
    codes = concept_codes()
    assert codes.shape == (10, 6) and len({tuple(c) for c in codes}) == 10
    # by hand, from the definitions: 7 is odd, >= 5, prime, no loop, a vertical stroke, not mirror-symmetric
    assert codes[7].tolist() == [0, 1, 1, 0, 1, 0] and codes[8].tolist() == [1, 1, 0, 1, 0, 1]
    # the nearest-code head (W = 2·codes − 1, b = −|code|) decodes every code to its digit
    W, b = 2 * codes - 1, -codes.sum(1)
    assert ((codes @ W.T + b).argmax(1) == np.arange(10)).all()


def test_style_concepts_by_pixels():
    X = np.zeros((3, 16), np.float32)
    X[0, :8] = 1.0                                   # top half inked: heavy, top-heavy
    X[1, 8:] = 0.5                                   # bottom half, little ink
    X[2, [0, 15]] = 1.0                              # balanced
    C = concept_labels(X, [0, 1, 2], ink=3.0)
    assert C[:, 6].tolist() == [1, 1, 0] and C[:, 7].tolist() == [1, 0, 0]
    assert ink_threshold(X) == float(np.median(X.sum(1)))
    with pytest.raises(ValueError):
        concept_labels(np.zeros((1, 10)), [0], 1.0)


def _states(K=4, J=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [{"enc": torch.randn(3, 2, generator=g, dtype=torch.float64),
             "cw": torch.randn(J, 3, generator=g, dtype=torch.float64),
             "cb": torch.randn(J, generator=g).float(),
             "tw": torch.randn(2, J, generator=g, dtype=torch.float64), "wiring": torch.arange(3)} for _ in range(K)]


def test_concept_rule_by_loops():
    states, n = _states(), [5, 1, 3, 7]
    counts = np.array([[5, 0, 2, 0, 0], [1, 1, 0, 0, 0], [0, 3, 3, 0, 0], [7, 0, 0, 0, 7]])
    out = aggregate_concepts(states, n, counts, ["cw", "cb"])
    for key in ("cw", "cb"):
        for j in range(5):
            w = counts[:, j] if counts[:, j].sum() > 0 else np.array(n)       # fallback: FedAvg by size
            ref = sum(w[k] * states[k][key][j].double() for k in range(4)) / w.sum()
            assert torch.allclose(out[key][j].double(), ref, atol=1e-6)
    for key in ("enc", "tw"):                                                 # FedAvg by size
        assert torch.allclose(out[key], sum(n[k] * states[k][key] for k in range(4)) / sum(n))
    assert out["cb"].dtype == torch.float32 and out["wiring"].tolist() == [0, 1, 2]


def test_concept_rule_is_fedavg_when_everyone_supervises_everything():
    states, n = _states(), [5, 1, 3, 7]
    out = aggregate_concepts(states, n, np.tile(np.array(n)[:, None], (1, 5)), ["cw", "cb"])
    assert torch.allclose(out["cw"], sum(n[k] * states[k]["cw"] for k in range(4)) / sum(n))


def test_concept_rule_rejects_bad_input():
    states = _states()
    with pytest.raises(ValueError):
        aggregate_concepts(states, [1, 1, 1, 1], np.ones((4, 4), int), ["cw"])           # J mismatch
    with pytest.raises(ValueError):
        aggregate_concepts(states, [1, 1, 1, 1], np.ones((4, 5)), ["cw"])                # float counts
    with pytest.raises(ValueError):
        aggregate_concepts(states, [1, 1, 1, 1], -np.ones((4, 5), int), ["cw"])
    with pytest.raises(ValueError):
        aggregate_concepts(states, [1, 1, 1, 1], np.ones((4, 5), int), ["wiring"])       # not float
    bad = _states()
    bad[1]["wiring"] = torch.arange(1, 4)
    with pytest.raises(ValueError):
        aggregate_concepts(bad, [1, 1, 1, 1], np.ones((4, 5), int), ["cw"])


def test_model_intervention_and_expansion():
    m = ConceptBottleneck(6, (8, 5), 3, 4, seed=2).double()
    x = torch.randn(7, 6, dtype=torch.float64)
    c, z = m(x)
    assert torch.allclose(z, c @ m.task.weight.T + m.task.bias)
    assert torch.allclose(c, torch.sigmoid(m.concept_logits(x)))
    mask = torch.zeros(7, 3, dtype=torch.bool)
    mask[2, 1] = True
    ct = torch.full((7, 3), 0.25, dtype=torch.float64)
    ci, zi = m(x, mask, ct)
    assert ci[2, 1] == 0.25 and torch.equal(ci[~mask], c[~mask])
    assert torch.allclose(zi - z, (ci - c) @ m.task.weight.T)                  # Eq. (8)
    with pytest.raises(ValueError):
        m(x, mask)
    big = m.expand(4)
    cb, zb = big(x)
    assert big.n_concepts == 7 and (zb - z).abs().max() < 1e-12 and torch.equal(cb[:, :3], c)
    assert big.task.weight.dtype == torch.float64 and (big.task.weight[:, 3:] == 0).all()
    assert [k for k, v in big.state_dict().items() if v.shape[:1] == (7,)] == list(big.concept_keys)
    # same seed, same initialisation, without touching the global generator
    state = torch.random.get_rng_state()
    a, b = ConceptBottleneck(6, 8, 3, 4, seed=5), ConceptBottleneck(6, 8, 3, 4, seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(u, v) for u, v in zip(a.state_dict().values(), b.state_dict().values()))


def test_cbm_loss_by_hand():
    m = ConceptBottleneck(4, 6, 3, 5, seed=0).double()
    x, y = torch.randn(9, 4, dtype=torch.float64), torch.randint(0, 5, (9,))
    c = (torch.rand(9, 3) > 0.5).double()
    sup = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)
    p = torch.sigmoid(m.concept_logits(x))
    bce = -(c * torch.log(p) + (1 - c) * torch.log(1 - p))
    ref = F.cross_entropy(p @ m.task.weight.T + m.task.bias, y) + 0.7 * (bce[:, [0, 2]].sum(1)).mean()
    assert torch.allclose(cbm_loss(m, x, y, c, sup, 0.7), ref)


def test_warm_start_is_sklearn_logistic_regression():
    g = torch.Generator().manual_seed(3)
    f = [torch.randn(25 + 15 * k, 5, generator=g, dtype=torch.float64) for k in range(4)]
    lab = [((u[:, 1] - u[:, 3] + 0.7 * torch.randn(len(u), generator=g, dtype=torch.float64)) > 0.2).double() for u in f]
    for rho in (0.5, 3.0):
        u = warm_start_head(f, lab, rho=rho, steps=15)
        ref = LogisticRegression(C=1 / rho, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(
            torch.cat(f).numpy(), torch.cat(lab).numpy())
        assert np.allclose(u.numpy(), np.r_[ref.coef_[0], ref.intercept_], atol=1e-7)


def test_intervention_accuracy_extremes():
    m = ConceptBottleneck(4, 6, 3, 2, seed=0).double()
    with torch.no_grad():
        m.task.weight.copy_(torch.tensor([[4.0, 0, 0], [-4.0, 0, 0]]))         # the label is concept 0
        m.task.bias.copy_(torch.tensor([-2.0, 2.0]))
    x = torch.randn(50, 4, dtype=torch.float64)
    y = torch.randint(0, 2, (50,))
    ct = torch.stack([(y == 0).double(), torch.zeros(50), torch.zeros(50)], 1).double()
    assert intervention_accuracy(m, x, y, ct, 3, 5, seed=0) == 1.0              # all imposed: perfect
    with torch.no_grad():
        base = (m(x)[1].argmax(1) == y).double().mean().item()
    assert intervention_accuracy(m, x, y, ct, 0, 5, seed=0) == base
    # one concept of three: concept 0 is drawn with probability 1/3, so the mean lies between
    one = intervention_accuracy(m, x, y, ct, 1, 300, seed=0)
    assert abs(one - (base + (1.0 - base) / 3)) < 0.06
    with pytest.raises(ValueError):
        intervention_accuracy(m, x, y, ct, 4, 1, seed=0)


def _tiny_federation():
    g = np.random.default_rng(0)
    y = g.integers(0, 10, 90)
    X = np.clip(g.random((90, 16)) * 0.5 + (y[:, None] % 4 == np.arange(16) % 4) * 0.5, 0, 1).astype(np.float32)
    C = concept_labels(X, y, ink_threshold(X))
    clients = [Client(k, np.arange(30 * k, 30 * k + 24), np.arange(30 * k + 24, 30 * k + 30)) for k in range(3)]
    ann = np.zeros((3, len(CONCEPTS)), bool)
    ann[:, 0] = True
    ann[0, 1] = ann[2, 1] = ann[1, 6] = True
    arrival = np.array([0, 2, 9, 9, 9, 9, 3, 9])
    t = lambda a, d=torch.float64: torch.as_tensor(a, dtype=d)
    return Federation(t(X), t(y, torch.int64), t(C), clients, ann, arrival, [[0, 1], [1, 2], [0, 2], [0, 1], [1, 2]])


@pytest.mark.parametrize("rule", AGG_RULES)
def test_flower_backend_equals_the_loop(rule):
    fed, cfg = _tiny_federation(), LocalConfig(hidden=(8,), epochs=1, batch=8, lr=0.1, momentum=0.9, lam=1.0)
    a, order = federated_cbm(fed, [0, 1, 6], rule, cfg, seed=1, warm_steps=4)
    b, order_b = federated_cbm(fed, [0, 1, 6], rule, cfg, seed=1, warm_steps=4, backend="flower")
    assert order == order_b == [0, 1, 6] and a.n_concepts == 3
    assert max((u - v).abs().max().item() for u, v in zip(a.state_dict().values(), b.state_dict().values())) < 1e-10


def test_rules_differ_only_through_concept_rows_and_bad_choices_are_refused():
    fed, cfg = _tiny_federation(), LocalConfig(hidden=(8,), epochs=1, batch=8, lr=0.1, momentum=0.9, lam=1.0)
    a, _ = federated_cbm(fed, [0], "concept", cfg, seed=0)          # concept 0 is supervised everywhere by everyone
    b, _ = federated_cbm(fed, [0], "fedavg", cfg, seed=0)
    assert all(torch.allclose(u, v) for u, v in zip(a.state_dict().values(), b.state_dict().values()))
    with pytest.raises(ValueError, match="allowed"):
        federated_cbm(fed, [0], "median", cfg, seed=0)
    with pytest.raises(ValueError, match="allowed"):
        federated_cbm(fed, [0], "concept", cfg, seed=0, backend="ray")
    with pytest.raises(ValueError):
        federated_cbm(fed, [1], "concept", cfg, seed=0)               # nothing announced at round 0


def test_concept_fedavg_on_hand_built_results():
    states, n = _states(K=3), [4, 2, 6]
    counts = np.array([[4, 0, 4, 0, 0], [0, 2, 2, 0, 0], [6, 0, 0, 6, 0]])
    keys = ["enc", "cw", "cb", "tw"]
    res = [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([s[k].numpy() for k in keys] + [cnt]), nk, {}))
           for s, nk, cnt in zip(states, n, counts)]
    params, _ = ConceptFedAvg([1, 2]).aggregate_fit(1, res, [])
    got = parameters_to_ndarrays(params)
    ref = aggregate_concepts([{k: s[k] for k in keys} for s in states], n, counts, ["cw", "cb"])
    assert len(got) == 4 and all(np.allclose(g, ref[k].numpy()) for g, k in zip(got, keys))
    assert got[2].dtype == np.float32
    with pytest.raises(ValueError):
        ConceptFedAvg([7]).aggregate_fit(1, res, [])
    assert ConceptFedAvg([0], accept_failures=False).aggregate_fit(1, res, [RuntimeError()]) == (None, {})
