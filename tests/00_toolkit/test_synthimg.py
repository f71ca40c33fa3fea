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


def test_grid_scenes_labels_captions_and_masks_agree():
    from paper_suite.synthimg import SCENE_COLOURS, grid_scenes, patch_masks, position_words
    sc = grid_scenes(60, 24, seed=3, grid=(1, 2), textures=("plain",), p_empty=0.3)
    assert sc["images"].shape == (60, 3, 24, 24) and sc["images"].min() >= 0 and sc["images"].max() <= 1
    assert position_words(1, 2) == ["left", "right"]
    cols = list(SCENE_COLOURS)
    for i in range(60):
        words = sc["captions"][i].split()
        assert "striped" not in words
        for k, pos in enumerate(["left", "right"]):
            s = sc["shape"][i, 0, k]
            assert (pos in words) == (s >= 0) == sc["masks"][i, k].any()
            if s >= 0:
                j = words.index(pos)
                assert words[j - 2] == cols[sc["colour"][i, 0, k]]
                assert words[j - 1] == ("circle", "square", "triangle")[s]
                # the object stays in its half of the image
                assert not sc["masks"][i, k][:, (1 - k) * 12 + 1:(1 - k) * 12 + 11].any()
    pm = patch_masks(sc["masks"], 6)
    assert pm.shape == (60, 2, 16) and np.allclose(pm.mean(-1), sc["masks"].mean((2, 3)))


def test_grid_scenes_are_seeded_and_reject_bad_arguments():
    from paper_suite.synthimg import grid_scenes
    a, b = grid_scenes(5, 16, seed=0), grid_scenes(5, 16, seed=0)
    assert np.array_equal(a["images"], b["images"]) and a["captions"] == b["captions"]
    assert not np.array_equal(a["images"], grid_scenes(5, 16, seed=1)["images"])
    assert all(c == "nothing" for c in grid_scenes(4, 16, seed=0, p_empty=1.0)["captions"])
    with pytest.raises(ValueError, match="unknown colours"):
        grid_scenes(2, 16, seed=0, colours=("mauve",))
    with pytest.raises(ValueError, match="px per cell"):
        grid_scenes(2, 8, seed=0, grid=(3, 3))
