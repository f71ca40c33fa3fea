"""Every notebook against the book's contract, and the notebooks against the generated library."""
import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from papermill.iorw import load_notebook_node
from papermill.parameterize import parameterize_notebook

from helpers import ROOT
from paper_suite.runner import chapter_params, discover, parameters_cell

CHAPTERS = discover(ROOT)
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("slug", list(CHAPTERS))
def test_chapter_follows_the_contract(slug):
    info = CHAPTERS[slug]
    nb = nbformat.read(info.path, as_version=4)
    cell = parameters_cell(nb)
    assert "#| export" not in cell.source, "the parameters cell must not be exported"
    params = chapter_params(info.path)
    assert params["scale"] == "small" and params["device"] == "auto" and params["seed"] == 0
    src = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert f'#| default_exp {info.part.split("_", 1)[1]}.{slug}' in src
    assert f'open_chapter("{slug}"' in src and "ch.finish()" in src and "plt.savefig" not in src
    assert info.title and ":" in info.title, "title: '# Method name: what it does'"
    # the open_chapter call follows the parameters cell, so injected values are the ones used
    idx = nb.cells.index(cell)
    later = "\n".join(c.source for c in nb.cells[idx + 1:])
    assert "open_chapter(" in later


@pytest.mark.parametrize("slug", list(CHAPTERS))
def test_papermill_injects_right_after_the_parameters_cell(slug):
    nb = load_notebook_node(str(CHAPTERS[slug].path))   # how papermill reads it
    pnb = parameterize_notebook(nb, {"scale": "full", "seed": 5})
    i = next(k for k, c in enumerate(pnb.cells) if "parameters" in c.metadata.get("tags", []))
    injected = pnb.cells[i + 1]
    assert "injected-parameters" in injected.metadata.get("tags", [])
    assert 'scale = "full"' in injected.source and "seed = 5" in injected.source


def test_nbdev_export_and_clean_change_nothing(tmp_path):
    """The committed library is what the notebooks export, and the notebooks are clean (tags kept)."""
    for name in ("pyproject.toml", "settings.ini", "_toc.yml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "nbs", tmp_path / "nbs")
    shutil.copytree(ROOT / "paper_suite", tmp_path / "paper_suite",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for cmd in ("nbdev-export", "nbdev-clean"):
        r = subprocess.run([str(BIN / cmd)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    diffs = []
    for sub in ("nbs", "paper_suite"):
        for p in sorted((ROOT / sub).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".ipynb", ".md"):
                q = tmp_path / p.relative_to(ROOT)
                if not q.exists() or not filecmp.cmp(p, q, shallow=False):
                    diffs.append(str(p.relative_to(ROOT)))
        for q in sorted((tmp_path / sub).rglob("*.py")):
            if "__pycache__" not in q.parts and not (ROOT / q.relative_to(tmp_path)).exists():
                diffs.append(f"{q.relative_to(tmp_path)} (not committed)")
    assert not diffs, f"run `make export` and commit: {diffs}"
    for slug, info in CHAPTERS.items():   # nbdev-clean kept the parameters tag
        parameters_cell(nbformat.read(tmp_path / info.path.relative_to(ROOT), as_version=4))
