"""Fixtures: a throw-away book for testing the machinery."""
import shutil
from pathlib import Path

import pytest

from helpers import BOOM_BODY, MISMATCH_BODY, OK_BODY, ROOT, make_notebook


@pytest.fixture
def fake_book(tmp_path: Path) -> Path:
    """A minimal book root with chapters `ok`, `boom` (raises) and `mismatch` (a claim not as expected)."""
    shutil.copy(ROOT / "settings.ini", tmp_path / "settings.ini")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: index\n")
    for slug, body in (("ok", OK_BODY), ("boom", BOOM_BODY), ("mismatch", MISMATCH_BODY)):
        make_notebook(tmp_path / "nbs" / "01_demo" / f"{slug}.ipynb", body.format(slug=slug))
    return tmp_path
