"""Helpers shared by the tests: the book's root, one execution per chapter, a throw-away book."""
from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path

import nbformat
import pytest

from paper_suite.book import read_settings
from paper_suite.runner import RunResult, discover, run_chapter

ROOT = Path(__file__).resolve().parents[1]
# executed notebooks and ledgers of the test run; the browser test builds the book from these
TEST_BUILD = ROOT / "_build" / "test"


def toc_chapters() -> list[str]:
    """Slugs of the chapters named in _toc.yml (parts 01..09), in book order."""
    import yaml
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc.get("parts", []) for c in part.get("chapters", [])]
    return [Path(f).name for f in files if re.match(r"0[1-9]_[a-z]+/", f)]


_RUNS: dict[str, RunResult] = {}


def execute_once(slug: str) -> RunResult:
    """Run chapter `slug` at small on the CPU into _build/test/ once per test process."""
    if slug not in _RUNS:
        info = discover(ROOT)[slug]
        _RUNS[slug] = run_chapter(info, scale="small", device="cpu", seed=0, root=ROOT,
                                  figures=TEST_BUILD / "figures", executed=TEST_BUILD / "executed")
    return _RUNS[slug]


# ---- a throw-away book for testing the machinery -------------------------------------------------

def make_notebook(path: Path, body: str, params: str = 'scale = "small"\ndevice = "auto"\nseed = 0',
                  title: str = "Demo chapter: a test") -> Path:
    """A chapter notebook: title, a `parameters` cell, then `body` (code)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}
    p = nbformat.v4.new_code_cell(params)
    p.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {title}"), p,
                nbformat.v4.new_code_cell(textwrap.dedent(body))]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


OK_BODY = """
from paper_suite.book import open_chapter
import matplotlib.pyplot as plt
ch = open_chapter("{slug}", scale, device, seed, presets={{"small": {{"n": 3}}, "full": {{"n": 30}}}})
fig, ax = plt.subplots(); ax.plot(range(ch.preset.n)); ax.set_xlabel("i"); ax.set_ylabel("i")
ch.figure(fig, "line", "A line.")
ch.claim("scale", "the scale reaches the chapter", "-", scale, True, kind="check", criterion="recorded")
ch.claim("n", "the preset follows the scale", "-", ch.preset.n, ch.preset.n == (3 if scale == "small" else 30), kind="paper",
         criterion="n matches the scale")
ch.finish()
"""

BOOM_BODY = """
from paper_suite.book import open_chapter
ch = open_chapter("{slug}", scale, device, seed, presets={{"small": {{}}, "full": {{}}}})
raise RuntimeError("boom")
"""

MISMATCH_BODY = """
from paper_suite.book import open_chapter
ch = open_chapter("{slug}", scale, device, seed, presets={{"small": {{}}, "full": {{}}}})
ch.claim("c", "one is two", "-", 1, 1 == 2, kind="paper", criterion="equality")
ch.finish()
"""

# a claim that holds on even seeds only (seed 1: not as expected, recorded), and a crash on seed 2
SEEDY_BODY = """
from paper_suite.book import open_chapter
ch = open_chapter("{slug}", scale, device, seed, presets={{"small": {{}}, "full": {{}}}})
ch.claim("even", "the seed is even", "-", seed, seed % 2 == 0, kind="paper", criterion="seed % 2 == 0")
ch.claim("one", "one is one", "-", 1, True, kind="check", criterion="equality")
if seed == 2 and "{slug}" == "crashy":
    raise RuntimeError("seed 2 crashes")
ch.claims_table()
ch.finish()
"""


def read_ledger(figures: Path, slug: str) -> dict:
    return json.loads((figures / slug / "claims.json").read_text())


def budget(scale: str) -> float:
    return read_settings(ROOT).getfloat("budget", scale)
