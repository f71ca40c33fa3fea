"""Fixtures: a throw-away book for testing the machinery."""
import shutil
from pathlib import Path

import pytest

from helpers import BOOM_BODY, MISMATCH_BODY, OK_BODY, ROOT, SEEDY_BODY, make_notebook


@pytest.fixture
def fake_book(tmp_path: Path) -> Path:
    """A minimal book root with chapters `ok`, `boom` (raises), `mismatch` (a claim not as expected), `seedy` (a claim
    that holds on even seeds) and `crashy` (like seedy, but raises on seed 2)."""
    shutil.copy(ROOT / "settings.ini", tmp_path / "settings.ini")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: index\n")
    for slug, body in (("ok", OK_BODY), ("boom", BOOM_BODY), ("mismatch", MISMATCH_BODY), ("seedy", SEEDY_BODY),
                       ("crashy", SEEDY_BODY)):
        make_notebook(tmp_path / "nbs" / "01_demo" / f"{slug}.ipynb", body.format(slug=slug))
    return tmp_path
