"""paper_suite.synthimg: the contract of change_pairs (no change outside the mask without nuisances, empty masks at
p_change = 0, determinism, nuisances that only touch post), checked by brute force on the arrays, and make_shapes
kept byte-identical to its original definition in info_dynamics."""
import numpy as np
import pytest

from paper_suite.synthimg import NUISANCES, change_pairs, make_shapes


def test_shapes_contract():
    sh = make_shapes(12, 16, 0)
    assert sh["images"].shape == (12, 16, 16) and set(np.unique(sh["cls"])) <= {0, 1, 2}
    assert sh["images"].min() >= 0 and sh["images"].max() <= 1
    assert (sh["images"][~sh["mask"]] <= 0.5 + 1e-12).all()      # outside the mask the coverage is < 1/2
    assert make_shapes(3, 16, 5)["images"].tobytes() == make_shapes(3, 16, 5)["images"].tobytes()


def test_shapes_same_as_info_dynamics():
    from paper_suite.generative import info_dynamics
    assert info_dynamics.make_shapes is make_shapes


@pytest.mark.parametrize("size", [16, 24])
def test_no_nuisance_changes_only_inside_mask(size):
    d = change_pairs(30, size, 1, nuisances=())
    assert d["pre"].shape == d["post"].shape == (30, 3, size, size) and d["pre"].dtype == np.float32
    assert d["mask"].shape == (30, size, size) and d["mask"].dtype == bool
    diff = np.abs(d["pre"] - d["post"]).max(1)
    assert (diff[~d["mask"]] == 0).all()
    assert (diff[d["mask"]] > 0).mean() > 0.5           # inside the mask most pixels do change
    assert np.array_equal(d["changed"], d["mask"].any((1, 2)))


def test_p_change_zero_and_one():
    d0 = change_pairs(25, 16, 2, p_change=0.0, nuisances=())
    assert not d0["mask"].any() and np.array_equal(d0["pre"], d0["post"])
    d1 = change_pairs(25, 16, 2, p_change=1.0)
    assert d1["changed"].mean() > 0.9


def test_determinism_and_nuisances_touch_post_only():
    a, b = change_pairs(10, 16, 7), change_pairs(10, 16, 7)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["post"], change_pairs(10, 16, 8)["post"])
    for nu in NUISANCES:
        c = change_pairs(10, 16, 7, nuisances=(nu,))
        assert np.array_equal(c["pre"], a["pre"]) and np.array_equal(c["mask"], a["mask"])
        assert c["post"].min() >= 0 and c["post"].max() <= 1
        clean = change_pairs(10, 16, 7, nuisances=())
        assert np.abs(c["post"] - clean["post"])[..., ~clean["mask"].any(0)].max() > 1e-3   # it does something


def test_bad_input():
    with pytest.raises(ValueError, match="unknown nuisance"):
        change_pairs(2, 16, 0, nuisances=("fog",))
    with pytest.raises(ValueError, match="p_change"):
        change_pairs(2, 16, 0, p_change=1.5)
