"""The speed comparison: its confidence interval against exact binomial counting and simulation, interleaving,
and a verdict that a busy machine does not flip."""
import math
import multiprocessing as mp
import time

import numpy as np
import pytest

from paper_suite.bench import SpeedComparison, compare_speed, median_ci


def _coverage(j: int, n: int) -> float:
    return sum(math.comb(n, k) for k in range(j, n - j + 1)) / 2 ** n


@pytest.mark.parametrize("n", [5, 9, 15, 21, 40])
@pytest.mark.parametrize("conf", [0.8, 0.9, 0.95])
def test_median_ci_is_the_narrowest_order_statistic_interval(n, conf):
    x = np.arange(1.0, n + 1)
    med, lo, hi, cov = median_ci(x[::-1], conf)        # order of the input does not matter
    j = int(lo)
    assert hi == n + 1 - j and med == np.median(x)
    if cov >= conf:
        assert _coverage(j, n) == pytest.approx(cov) and (j + 1 > n // 2 or _coverage(j + 1, n) < conf)
    else:                                              # too few repetitions: the whole range
        assert j == 1


def test_median_ci_covers_as_promised():
    rng = np.random.default_rng(1)
    hits = [lo <= 1.0 <= hi for _, lo, hi, _ in (median_ci(rng.lognormal(size=15), 0.9) for _ in range(3000))]
    assert abs(np.mean(hits) - median_ci(np.zeros(15), 0.9)[3]) < 0.025


def test_bad_arguments():
    with pytest.raises(ValueError, match="baseline"):
        compare_speed({"a": int, "b": int}, "c")
    with pytest.raises(ValueError, match="at least two"):
        compare_speed({"a": int}, "a")
    with pytest.raises(ValueError, match="repeats"):
        compare_speed({"a": int, "b": int}, "a", repeats=2)
    with pytest.raises(ValueError, match="confidence"):
        median_ci([1.0, 2.0], 1.5)


def test_ratio_orientation_and_record():
    sp = SpeedComparison({"fast": [1.0, 1.0, 1.0], "slow": [2.0, 2.0, 2.0]}, "slow", 0.9, {"fast": 1, "slow": 1})
    assert sp.ratio("fast").median == 2.0 and sp.ratio("slow", baseline="fast").median == 0.5
    rec = sp.record("fast")
    assert rec["speedup"] == 2.0 and rec["ci"] == [2.0, 2.0] and rec["repeats"] == 3 and rec["over"] == "slow"


def _spin(stop):
    while not stop.is_set():
        pass


def _work(n: int) -> float:
    s = 0.0
    for i in range(n):
        s += i * 0.5
    return s


def test_the_verdict_survives_two_busy_processes():
    """A 3x-more-work function is slower with the 90 % interval well away from 1, on an idle or a busy machine."""
    stop = mp.Event()
    hogs = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(2)]
    for h in hogs:
        h.start()
    try:
        time.sleep(0.2)
        sp = compare_speed({"1x": lambda: _work(20_000), "3x": lambda: _work(60_000)}, baseline="3x", repeats=15)
        assert sp.clock == "cpu"
    finally:
        stop.set()
        for h in hogs:
            h.join(5)
    r = sp.ratio("1x")
    assert r.lo > 1.5 and 2.0 < r.median < 4.5, r
