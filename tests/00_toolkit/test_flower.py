"""paper_suite.flower against independent references: the in-house FedAvg loop of paper_suite.fl, hand-written
loops over a participation schedule, NumPy medians (Flower's FedMedian), and the behaviour Flower documents."""
import random

import numpy as np
import pytest
import torch
from flwr.server.strategy import FedAvg, FedMedian, FedProx, Strategy

from paper_suite.fl import CommLedger, fedavg, weighted_average
from paper_suite.flower import FitReply, flower_fit, ndarrays_to_state, state_to_ndarrays


def _problem(dtype=torch.float64, K=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = [torch.randn(10 + 7 * k, 3, generator=g, dtype=dtype) for k in range(K)]
    y = [x @ torch.tensor([1.0, -2.0, 0.5], dtype=dtype) + k for k, x in enumerate(X)]

    def update(k, state, r):                          # a few least-squares gradient steps on client k's data
        w, b = state["w"].clone(), state["b"].clone()
        for _ in range(3):
            e = X[k] @ w + b - y[k]
            w, b = w - 0.05 * X[k].T @ e / len(e), b - 0.05 * e.mean()
        return {"w": w, "b": b}

    init = {"w": torch.zeros(3, dtype=dtype), "b": torch.zeros((), dtype=dtype)}
    return init, update, [len(x) for x in X]


def _gap(a, b):
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_equals_inhouse_fedavg(dtype, tol):
    init, update, sizes = _problem(dtype)
    l1, l2 = CommLedger(), CommLedger()
    ref = fedavg(init, update, sizes, rounds=7, ledger=l1)
    out, _ = flower_fit(FedAvg(fraction_evaluate=0.0), init, update, len(sizes), 7, num_examples=sizes, ledger=l2)
    assert _gap(ref, out) < tol and all(out[k].dtype == dtype for k in out)
    assert l1.records == l2.records                  # same messages, rounds, clients and sizes


def test_participants_schedule_matches_a_hand_loop():
    init, update, sizes = _problem()
    sched = {0: [0, 3], 1: [1, 2], 2: [2, 3], 3: [0, 1], 4: [1, 3]}
    state = dict(init)
    for r in range(2, 5):                             # rounds 2..4, as a second phase of a longer run
        state = weighted_average([update(k, state, r) for k in sched[r]], [sizes[k] for k in sched[r]])
    seen = []

    def logged(k, s, r):
        seen.append((r, k))
        return update(k, s, r)

    out, _ = flower_fit(FedAvg(fraction_fit=0.5, fraction_evaluate=0.0), init, logged, 4, 3, num_examples=sizes,
                        participants=lambda r: sched[r], first_round=2)
    assert _gap(state, out) < 1e-12
    assert seen == [(r, k) for r in range(2, 5) for k in sched[r]]


def test_fedmedian_is_the_elementwise_median():
    init, update, sizes = _problem()
    out, _ = flower_fit(FedMedian(fraction_evaluate=0.0), init, update, 4, 1, num_examples=sizes)
    states = [update(k, init, 0) for k in range(4)]
    for key in init:
        assert np.allclose(out[key].numpy(), np.median(np.stack([s[key].numpy() for s in states]), axis=0))


def test_config_reaches_the_client_and_replies_carry_extras():
    init, update, sizes = _problem()
    got = []

    def with_config(k, state, r, config):
        got.append(config.get("proximal_mu"))
        return FitReply(update(k, state, r), num_examples=sizes[k], extra=[np.array([k, r])], metrics={"k": k})

    class Spy(FedAvg):
        def aggregate_fit(self, server_round, results, failures):
            from flwr.common import parameters_to_ndarrays
            self.extras = [parameters_to_ndarrays(res.parameters)[-1].tolist() for _, res in results]
            self.order = [p.cid for p, _ in results]
            return None, {}                          # keep the model: this spy only looks

    spy = Spy(fraction_evaluate=0.0)
    flower_fit(spy, init, with_config, 4, 1)
    assert spy.extras == [[k, 0] for k in range(4)] and spy.order == ["0", "1", "2", "3"]
    assert got == [None] * 4                          # FedAvg sends no proximal term

    def prox_client(k, state, r, config):
        got.append(config["proximal_mu"])
        return update(k, state, r)

    flower_fit(FedProx(proximal_mu=0.25, fraction_evaluate=0.0), init, prox_client, 4, 1, num_examples=sizes)
    assert got[-4:] == [0.25] * 4


def test_local_evaluate_gives_the_weighted_distributed_loss():
    init, update, sizes = _problem()
    out, hist = flower_fit(FedAvg(), init, update, 4, 2, num_examples=sizes,
                           local_evaluate=lambda k, s, r: (float(k), sizes[k], {}))
    assert [r for r, _ in hist.losses_distributed] == [1, 2]
    assert abs(hist.losses_distributed[0][1] - np.average(range(4), weights=sizes)) < 1e-12


def test_runs_are_reproducible_and_leave_the_global_generator_alone():
    init, update, sizes = _problem()
    random.seed(123)
    before = random.getstate()
    a, _ = flower_fit(FedAvg(fraction_fit=0.5, fraction_evaluate=0.0), init, update, 4, 4, num_examples=sizes,
                      sampling_seed=3)
    assert random.getstate() == before
    b, _ = flower_fit(FedAvg(fraction_fit=0.5, fraction_evaluate=0.0), init, update, 4, 4, num_examples=sizes,
                      sampling_seed=3)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_errors_are_loud():
    init, update, sizes = _problem()
    with pytest.raises(ValueError, match="asks for"):                 # more clients than exist: no day-long wait
        flower_fit(FedAvg(min_fit_clients=5, fraction_evaluate=0.0), init, update, 4, 1, num_examples=sizes)
    with pytest.raises(ValueError, match="participants"):
        flower_fit(FedAvg(fraction_fit=1.0, fraction_evaluate=0.0), init, update, 4, 1, num_examples=sizes,
                   participants=lambda r: [0, 1])
    with pytest.raises(ValueError, match="initial_parameters"):
        from flwr.common import ndarrays_to_parameters
        flower_fit(FedAvg(initial_parameters=ndarrays_to_parameters(state_to_ndarrays(init))), init, update, 4, 1,
                   num_examples=sizes)
    with pytest.raises(ValueError, match="num_examples"):
        flower_fit(FedAvg(fraction_evaluate=0.0), init, update, 4, 1)

    def broken(k, state, r):
        raise RuntimeError(f"client {k} failed")

    with pytest.raises(RuntimeError, match="failed"):                 # Flower alone would drop the client silently
        flower_fit(FedAvg(fraction_evaluate=0.0), init, broken, 4, 1, num_examples=sizes)


def test_state_round_trip_and_shape_checks():
    s = {"a": torch.randn(2, 3, dtype=torch.float64), "i": torch.arange(3), "h": torch.ones(4, dtype=torch.float16)}
    back = ndarrays_to_state(state_to_ndarrays(s), s)
    assert all(torch.equal(back[k], s[k]) and back[k].dtype == s[k].dtype for k in s)
    with pytest.raises(ValueError):
        ndarrays_to_state(state_to_ndarrays(s)[:2], s)


def test_wrapped_strategy_sees_every_hook():
    """A minimal custom Strategy (not FedAvg) runs: the bridge relies only on the Strategy interface."""
    init, update, sizes = _problem()

    class LastClient(Strategy):           # keeps the state of the highest-id client of each round
        def initialize_parameters(self, client_manager):
            return None

        def configure_fit(self, server_round, parameters, client_manager):
            from flwr.common import FitIns
            return [(c, FitIns(parameters, {})) for c in client_manager.sample(2, 2)]

        def aggregate_fit(self, server_round, results, failures):
            return results[-1][1].parameters, {}

        def configure_evaluate(self, server_round, parameters, client_manager):
            return []

        def aggregate_evaluate(self, server_round, results, failures):
            return None, {}

        def evaluate(self, server_round, parameters):
            return None

    out, _ = flower_fit(LastClient(), init, update, 4, 1, num_examples=sizes, participants=lambda r: [2, 1])
    assert _gap(out, update(2, init, 0)) == 0.0
