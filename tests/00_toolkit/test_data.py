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
