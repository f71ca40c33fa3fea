"""paper_suite.fl against independent references: partition properties, NumPy weighted means, hand counts."""
import numpy as np
import pytest
import torch

from paper_suite.fl import CommLedger, dirichlet_partition, fedavg, make_clients, nbytes, weighted_average


@pytest.mark.parametrize("alpha", [0.01, 1.0, 1000.0])
def test_partition_is_disjoint_and_complete(alpha):
    y = np.repeat(np.arange(6), 40)
    parts = dirichlet_partition(y, 4, alpha, seed=3, min_size=5)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(y)))
    assert all(len(p) >= 5 for p in parts)


def test_skew_decreases_with_alpha():
    y = np.repeat(np.arange(10), 60)

    def classes(alpha):
        return np.mean([np.mean([len(np.unique(y[p])) for p in dirichlet_partition(y, 5, alpha, seed=s, min_size=1)])
                        for s in range(5)])
    assert classes(0.01) < classes(1.0) < classes(1000.0) == 10


def test_partition_is_reproducible_and_min_size_is_enforced():
    y = np.repeat(np.arange(3), 10)
    a, b = dirichlet_partition(y, 3, 0.5, seed=1), dirichlet_partition(y, 3, 0.5, seed=1)
    assert all(np.array_equal(x, z) for x, z in zip(a, b))
    with pytest.raises(ValueError):
        dirichlet_partition(y, 4, 0.5, seed=0, min_size=8)


def test_clients_split_their_own_data():
    y = np.repeat(np.arange(5), 30)
    cl = make_clients(y, 3, 0.3, holdout=0.25, seed=0, min_size=4)
    for c in cl:
        assert len(np.intersect1d(c.train, c.holdout)) == 0 and len(c.holdout) >= 1 and len(c.train) >= 1
    assert np.array_equal(np.sort(np.concatenate([np.r_[c.train, c.holdout] for c in cl])), np.arange(150))


def test_weighted_average_matches_numpy():
    rng = np.random.default_rng(0)
    arrs, w = [rng.normal(size=(3, 4)) for _ in range(5)], rng.random(5) + 0.1
    out = weighted_average([{"p": torch.tensor(a), "i": torch.arange(3)} for a in arrs], w)
    assert np.allclose(out["p"].numpy(), np.average(np.stack(arrs), axis=0, weights=w))
    assert out["i"].tolist() == [0, 1, 2]
    with pytest.raises(ValueError):
        weighted_average([{"i": torch.arange(3)}, {"i": torch.arange(1, 4)}], [1, 1])


def test_fedavg_rounds_and_ledger():
    # local update: move halfway to the client's target; the fixed point of the rounds is the weighted mean
    targets = [torch.tensor([0.0]), torch.tensor([4.0])]
    led = CommLedger()
    out = fedavg({"w": torch.tensor([10.0])}, lambda k, s, r: {"w": (s["w"] + targets[k]) / 2}, [3, 1], 30, led)
    assert abs(out["w"].item() - 1.0) < 1e-6
    assert led.total("up") == 30 * 2 * 4 and led.per_client("down") == {0: 120, 1: 120}
    assert nbytes({"a": np.zeros(3, np.int64), "b": [torch.zeros(2, dtype=torch.float16)]}) == 28
