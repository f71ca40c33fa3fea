"""paper_suite.site: the toc against nbs/, the status page and provenance box from ledgers, the
assembled source. (The built book in a browser is tests/test_book.py.)"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
import yaml

from paper_suite.book import repo_root
from paper_suite.site import (GENERATED_PAGES, NOT_RE, RE, _fake_ledger, _fake_seeds, add_provenance, assemble_source,
                              claim_rows, md_cell, provenance_box, status_page, toc_entries, toc_problems)

ROOT = repo_root()


# -- a tiny book on disk ----------------------------------------------------------------------------
TOC = """format: jb-book
root: index
parts:
  - caption: At a glance
    chapters:
      - file: status
  - caption: Attribution
    numbered: true
    chapters:
      - file: 01_attribution/alpha
  - caption: Security
    chapters:
      - file: 07_security/beta
  - caption: Appendix
    chapters:
      - file: 00_toolkit/00_tools
"""


def notebook(title: str, *cells: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {title}\n\nThe claim."),
                                           *(nbformat.v4.new_code_cell(c) for c in cells)])


def write_book(root: Path, toc: str = TOC, pages=("01_attribution/alpha", "07_security/beta", "00_toolkit/00_tools")) -> Path:
    (root / "_toc.yml").write_text(toc)
    (root / "nbs").mkdir(parents=True, exist_ok=True)
    (root / "nbs" / "index.md").write_text("# Home\n\nSee the {doc}`status <status>`.\n")
    for p in pages:
        path = root / "nbs" / f"{p}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook(f"{Path(p).stem.title()}: a page"), path)
    return root


@pytest.fixture
def book(tmp_path) -> Path:
    return write_book(tmp_path)


# -- the toc and nbs/ -------------------------------------------------------------------------------
def test_repository_toc_agrees_with_nbs():
    assert toc_problems(ROOT) == []


def test_repository_toc_names_the_generated_pages_and_every_toolkit_notebook():
    files = [e.file for e in toc_entries(yaml.safe_load((ROOT / "_toc.yml").read_text()))]
    assert set(GENERATED_PAGES) <= set(files)
    assert all(f"00_toolkit/{p.stem}" in files for p in (ROOT / "nbs" / "00_toolkit").glob("*.ipynb"))


def test_agreeing_toc_has_no_problems(book):
    assert toc_problems(book) == []


def test_chapter_missing_from_toc_fails(book):
    nbformat.write(notebook("Gamma"), book / "nbs" / "07_security" / "gamma.ipynb")
    assert toc_problems(book) == ["nbs/07_security/gamma.ipynb is not in _toc.yml"]


def test_toolkit_notebook_missing_from_toc_fails(book):
    nbformat.write(notebook("Tools"), book / "nbs" / "00_toolkit" / "01_more.ipynb")
    assert toc_problems(book) == ["nbs/00_toolkit/01_more.ipynb is not in _toc.yml"]


def test_toc_naming_a_missing_file_fails(book):
    (book / "nbs" / "07_security" / "beta.ipynb").unlink()
    assert toc_problems(book) == ["_toc.yml names 07_security/beta, but neither nbs/07_security/beta.ipynb "
                                  "nor nbs/07_security/beta.md exists"]


def test_toc_naming_a_page_twice_fails(book):
    write_book(book, TOC.replace("      - file: 07_security/beta\n",
                                 "      - file: 07_security/beta\n      - file: 07_security/beta.ipynb\n"))
    assert toc_problems(book) == ["_toc.yml names 07_security/beta twice"]


def test_parts_out_of_book_order_fail(book):
    swapped = TOC.replace("01_attribution/alpha", "XX").replace("07_security/beta", "01_attribution/alpha") \
                 .replace("XX", "07_security/beta")
    write_book(book, swapped)
    assert any("out of the book's part order" in p for p in toc_problems(book))


def test_chapter_after_the_toolkit_appendix_fails(book):
    write_book(book, TOC + "  - caption: Late\n    chapters:\n      - file: 07_security/late\n",
               pages=("01_attribution/alpha", "07_security/beta", "07_security/late", "00_toolkit/00_tools"))
    assert toc_problems(book) == ["_toc.yml: 07_security/late comes after the toolkit appendix"]


def test_nested_sections_are_read():
    toc = {"format": "jb-book", "root": "index", "parts": [{"caption": "A", "chapters": [
        {"file": "01_a/x", "sections": [{"file": "01_a/y.ipynb", "sections": [{"file": "01_a/z"}]}]}]}]}
    assert [e.file for e in toc_entries(toc)] == ["index", "01_a/x", "01_a/y", "01_a/z"]


# -- status rows and page ---------------------------------------------------------------------------
LEDGERS = {"alpha": _fake_ledger("alpha", [True, True]), "beta": _fake_ledger("beta", [True, False], wall=75.0)}
CHAPTERS = {"alpha": ("Alpha: a page", "01_attribution/alpha"), "beta": ("Beta: a page", "07_security/beta"),
            "gamma": ("Gamma: never run", "07_security/gamma")}


def test_claim_rows_one_per_claim_with_verdict_device_and_wall_time():
    rows = claim_rows(LEDGERS)
    assert [(r["chapter"], r["claim"], r["mark"]) for r in rows] == [
        ("alpha", "c1", RE), ("alpha", "c2", RE), ("beta", "c1", RE), ("beta", "c2", NOT_RE)]
    beta2 = rows[-1]
    assert beta2["paper"] == "0.9" and beta2["measured"] == pytest.approx(0.41) and beta2["criterion"] == "measured > 0.8"
    assert (beta2["scale"], beta2["device"], beta2["wall_s"], beta2["note"]) == ("small", "cpu", 75.0, "needs the full scale")


def test_status_page_lists_every_chapter_with_links():
    page = status_page(LEDGERS, CHAPTERS, scale="small")
    assert page.startswith("# Reproduction status\n")
    assert "**Paper claims reproduced: 3 of 4** (no seed ledgers), across 2 of 3 chapters" in page
    assert "| [Alpha: a page](01_attribution/alpha.ipynb) | 2/2 | 2/2 | [Re] all |" in page
    assert "| [Beta: a page](07_security/beta.ipynb) | 1/2 | 1/2 | [Re] 1 · [¬Re] 1 |" in page
    assert "| [Gamma: never run](07_security/gamma.ipynb) | – | – | no ledger |" in page
    assert "{ref}`how it was made <provenance-beta>`" in page and "1 min 15 s" in page


def test_status_page_claim_table_has_every_column():
    page = status_page(LEDGERS, CHAPTERS)
    header = next(line for line in page.splitlines() if line.startswith("| chapter | claim |"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "chapter", "claim", "verdict", "seeds", "statement", "paper", "ours", "criterion", "scale", "device"]
    row = next(line for line in page.splitlines() if "claim 2 of beta" in line)
    assert "| `c2` | **[¬Re]** [^1] | – | claim 2 of beta | 0.9 | 0.41 | measured > 0.8 | small | cpu |" in row
    assert "[^1]: beta · c2: needs the full scale" in page


def test_status_page_environment_and_escaping():
    led = _fake_ledger("pipe", [True])
    led["claims"][0]["statement"] = "a | b\nc"
    page = status_page({"pipe": led}, {"pipe": ("P", "01_a/pipe")})
    assert "a \\| b c" in page and md_cell("x|y") == "x\\|y"
    env = page[page.index("## Environment"):]
    assert "| [pipe](01_a/pipe.ipynb) | 3.11.7 | 2.13.0+cpu | 2.4.6 | 0.0.1 | cpu | 1 | 0.5, 0.4, 0.3 | Linux |" in env


def test_status_page_without_ledgers_still_lists_chapters():
    page = status_page({}, CHAPTERS)
    assert "**Paper claims reproduced: 0 of 0** (no seed ledgers), across 0 of 3 chapters" in page
    assert page.count("| – | – | no ledger |") == 3 and "none yet" in page


def test_status_page_marks_claims_not_as_expected():
    led = _fake_ledger("odd", [True])
    led["claims"][0]["expected"] = False
    assert "**[Re]** (not as expected)" in status_page({"odd": led}, {})


def test_status_page_headline_counts_paper_claims_by_majority_over_seeds():
    led = _fake_ledger("mix", [True, True, False, True], kinds=["paper", "paper", "extension", "check"])
    seeds = {"mix": _fake_seeds(led, [3, 1, 0, 3])}           # c2 held on seed 0 only: majority not reproduced
    page = status_page({"mix": led}, {"mix": ("Mix: kinds", "01_a/mix")}, seeds=seeds, budgets={"small": 60})
    assert "**Paper claims reproduced: 1 of 2** (seed agreement: 1 of 2 unanimous)" in page
    assert "0 of 1 extension claims and 1 of 1 checks held" in page
    assert "| [Mix: kinds](01_a/mix.ipynb) | 1/2 | 2/4 | [Re] 2 · [¬Re] 2 | 3.0 s / 60 s |" in page
    paper = page[page.index("## Paper claims"):page.index("## Extensions")]
    assert "`c1`" in paper and "`c2`" in paper and "`c4`" not in paper
    assert "`c4`" in page[page.index("## Checks"):]
    assert "| `c2` | **[¬Re]** | 2/3 |" in paper


def test_status_page_marks_revised_claims_and_lists_the_revision():
    led = _fake_ledger("rev", [True])
    led["claims"][0]["revised"] = "measured > 0.95 gave False; changed because the paper rounds to 0.9"
    page = status_page({"rev": led}, {})
    assert "| `c1` | **[Re]** † |" in page
    revised = page[page.index("## Revised criteria"):]
    assert "measured > 0.95 gave False; changed because the paper rounds to 0.9" in revised
    assert "## Revised criteria" not in status_page({"a": _fake_ledger("a", [True])}, {})


def test_status_page_flags_cpu_over_budget():
    led = _fake_ledger("slow", [True], wall=90.5)
    assert "1 min 30 s / 60 s **over**" in status_page({"slow": led}, {}, budgets={"small": 60})


# -- provenance box ---------------------------------------------------------------------------------
def test_provenance_box_from_ledger():
    led = _fake_ledger("alpha", [True, False], wall=12.34)
    box = provenance_box("alpha", led, page_scale="small")
    assert box.startswith("(provenance-alpha)=\n:::{admonition} How this was made\n")
    for text in ("scale `small`", "device `cpu`", "seed `0`", "1 thread(s)", "12.3 s", "commit `0123456789`",
                 "Python 3.11.7", "torch 2.13.0+cpu", "`steps=10`, `n=5`", "1 of 2 reproduced",
                 "`paper-suite run alpha --scale small --seed 0`"):
        assert text in box, text
    assert box.rstrip().endswith(":::") and "Note" not in box


def test_provenance_box_notes_a_scale_mismatch_and_a_missing_ledger():
    assert "the ledger is from `full`" in provenance_box("a", _fake_ledger("a", [True], scale="full"), page_scale="small")
    assert "No claims ledger" in provenance_box("a", None)


def test_provenance_box_goes_right_after_the_title():
    nb = notebook("T", "x = 1")
    nb.cells.insert(0, nbformat.v4.new_code_cell("# injected"))
    add_provenance(nb, "BOX")
    assert [c.source for c in nb.cells] == ["# injected", "# T\n\nThe claim.", "BOX", "x = 1"]


# -- assembling the source --------------------------------------------------------------------------
def executed_copy(book: Path, page: str, executed: Path) -> None:
    nb = nbformat.read(book / "nbs" / f"{page}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("![plot](../../figures/alpha/plot.png)"))
    out = nbformat.v4.new_code_cell("print(1)")
    out.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    nb.cells.append(out)
    nb.metadata["papermill"] = {"parameters": {"scale": "small"}}
    (executed / "small" / page).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, executed / "small" / f"{page}.ipynb")


def test_assemble_source(book):
    executed, figures = book / "_build" / "executed", book / "figures"
    for page in ("01_attribution/alpha", "07_security/beta"):
        executed_copy(book, page, executed)
    (figures / "alpha").mkdir(parents=True)
    (figures / "alpha" / "claims.json").write_text(json.dumps(_fake_ledger("alpha", [True])))
    (figures / "alpha" / "plot.png").write_bytes(b"\x89PNG fake")
    src = assemble_source(book, "small", executed, figures, book / "_build" / "src")

    alpha = nbformat.read(src / "01_attribution" / "alpha.ipynb", as_version=4)
    assert alpha.cells[1].source.startswith("(provenance-alpha)=") and "1 of 1 reproduced" in alpha.cells[1].source
    assert "![plot](../figures/alpha/plot.png)" in [c.source for c in alpha.cells]
    assert (src / "figures" / "alpha" / "plot.png").read_bytes() == b"\x89PNG fake"
    beta = nbformat.read(src / "07_security" / "beta.ipynb", as_version=4)
    assert "No claims ledger" in beta.cells[1].source
    # toolkit pages are the notebooks themselves, unexecuted; the landing page is copied
    assert (src / "00_toolkit" / "00_tools.ipynb").read_bytes() == (book / "nbs" / "00_toolkit" / "00_tools.ipynb").read_bytes()
    assert (src / "index.md").read_text() == (book / "nbs" / "index.md").read_text()
    status = (src / "status.md").read_text()
    assert "Alpha: a page" in status and "Beta: a page" in status
    assert (src / "_extra" / "mathjax" / "tex-chtml.js").is_file() and (src / "_extra" / "favicon.svg").is_file()
    assert not list(src.rglob(".*")) and not list(src.rglob("_static"))


def test_assemble_source_refuses_unexecuted_chapters(book):
    executed = book / "_build" / "executed"
    executed_copy(book, "01_attribution/alpha", executed)
    with pytest.raises(FileNotFoundError, match=r"beta; run `paper-suite run beta --scale small` first"):
        assemble_source(book, "small", executed, book / "figures", book / "_build" / "src")


# -- the configuration ------------------------------------------------------------------------------
def test_config_renders_without_executing_and_offline():
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cfg["execute"]["execute_notebooks"] == "off"
    assert {".*", "**/.*"} <= set(cfg["exclude_patterns"])
    sphinx = cfg["sphinx"]["config"]
    assert sphinx["nb_render_markdown_format"] == "myst"
    assert "://" not in sphinx["mathjax_path"] and "_static" not in sphinx["mathjax_path"]
    assert sphinx["mathjax_path"].startswith("../mathjax/")
