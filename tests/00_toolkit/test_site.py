"""paper_suite.site: the toc against nbs/, the status page, its figure and the provenance box from ledgers,
what the pages leave out, the assembled source, and a small book built and read back with html.parser.
(The repository's own book, built and opened in a browser, is tests/test_book.py.)"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest
import yaml

from paper_suite.book import repo_root
from paper_suite.book import png_bytes
from paper_suite.site import (GENERATED_PAGES, NOT_RE, OUTSIDE_TOC, RE, STATUS_FIGURE, _fake_ledger, _fake_seeds,
                              add_provenance, assemble_source, build_book, chapter_parts, claim_rows, md_cell,
                              page_problems, provenance_box, read_page, split_directives, status_figure, status_grid,
                              status_page, strip_machinery, toc_entries, toc_problems)

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
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {title}\n\nThe claim."),
                                         *(nbformat.v4.new_code_cell(c) for c in cells)])
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    return nb


def write_book(root: Path, toc: str = TOC, pages=("01_attribution/alpha", "07_security/beta", "00_toolkit/00_tools")) -> Path:
    (root / "_toc.yml").write_text(toc)
    (root / "nbs").mkdir(parents=True, exist_ok=True)
    (root / "nbs" / "index.md").write_text("# Home\n\nSee the {doc}`status <status>`.\n")
    for p in pages:
        path = root / "nbs" / f"{p}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        code = (f"#| default_exp {Path(p).stem[3:]}", "#| export\ndef f(): pass") if p.startswith("00_") else ()
        nbformat.write(notebook(f"{Path(p).stem.title()}: a page", *code), path)
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


PARTS = {"alpha": "Attribution", "beta": "Security", "gamma": "Security"}


def test_status_page_lists_chapters_part_by_part_with_claim_counts():
    page = status_page(LEDGERS, CHAPTERS, parts=PARTS)
    chapters = page[page.index("## Chapters"):page.index("## Paper claims")]
    assert chapters.index("### Attribution") < chapters.index("Alpha: a page") < chapters.index("### Security") \
        < chapters.index("Beta: a page") < chapters.index("Gamma: never run")
    assert "### Attribution\n\n1 chapter: 2 of 2 paper claims reproduced, 2 of 2 claims in all." in chapters
    assert "### Security\n\n2 chapters (1 with a ledger): 1 of 2 paper claims reproduced, 1 of 2 claims in all." \
        in chapters
    # without captions, the folder names the part; a ledger outside the toc is listed last
    page = status_page({**LEDGERS, "stray": _fake_ledger("stray", [True])}, CHAPTERS)
    assert "### Attribution\n" in page and "### Security\n" in page
    assert page.index(f"### {OUTSIDE_TOC}") > page.index("### Security") and "| `stray` | 1/1 |" in page


def test_status_page_opens_with_its_figure():
    page = status_page(LEDGERS, CHAPTERS, parts=PARTS, figure="status.png")
    assert page.index("**Paper claims reproduced") < page.index("```{figure} status.png") < page.index("## Chapters")
    assert "```{figure}" not in status_page(LEDGERS, CHAPTERS)


def test_status_grid_one_row_per_chapter_by_part_with_majority_verdicts():
    led = _fake_ledger("alpha", [True, True, True], kinds=["paper", "extension", "check"])
    seeds = {"alpha": _fake_seeds(led, [3, 1, 2])}           # the extension held on one seed of three
    grid = status_grid({"alpha": led, "beta": LEDGERS["beta"], "stray": _fake_ledger("stray", [False])},
                       CHAPTERS, seeds, PARTS)
    assert [(r.part, r.slug) for r in grid] == [("Attribution", "alpha"), ("Security", "beta"),
                                                ("Security", "gamma"), (OUTSIDE_TOC, "stray")]
    assert grid[0].claims == (("paper", "reproduced"), ("extension", "not reproduced"), ("check", "check"))
    assert grid[1].paper == (1, 2) and not grid[2].has_ledger and grid[3].claims == (("paper", "not reproduced"),)
    assert [r.label for r in grid[:3]] == ["Alpha", "Beta", "Gamma"]


def test_status_figure_has_one_row_per_chapter_and_is_deterministic():
    chapters = {f"ch{i}": (f"Chapter {i}: a method", f"0{1 + i % 3}_part{i % 3}/ch{i}") for i in range(57)}
    ledgers = {s: _fake_ledger(s, [i % 2 == 0, True, i % 3 == 0]) for i, s in enumerate(chapters) if i % 5}
    grid = status_grid(ledgers, chapters)
    assert len(grid) == 57
    ax = status_figure(grid).axes[0]
    assert len(ax.get_yticks()) == 57
    assert [t.get_text() for t in ax.get_yticklabels()] == [r.label for r in grid]
    marks = [ln for ln in ax.lines if ln.get_linestyle() == "None"]
    assert len(marks) == sum(len(r.claims) for r in grid) == 3 * len(ledgers)
    png = png_bytes(status_figure(grid))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png == png_bytes(status_figure(status_grid(ledgers, chapters)))


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


def test_provenance_box_gives_the_rerun_commands_the_module_and_the_page_parameters():
    box = provenance_box("alpha", _fake_ledger("alpha", [True]), "small", module="paper_suite.attribution.alpha",
                         page_params={"scale": "small", "device": "auto", "seed": 0})
    assert "`paper-suite run alpha --scale small --seeds 0 1 2`" in box
    assert "`import paper_suite.attribution.alpha`" in box
    assert "executed with `scale='small'`, `device='auto'`, `seed=0`" in box
    none = provenance_box("alpha", None, module="paper_suite.attribution.alpha")
    assert "`paper-suite run alpha --scale small --seeds 0 1 2`" in none and "paper_suite.attribution.alpha" in none


def test_provenance_box_notes_a_scale_mismatch_and_a_missing_ledger():
    assert "the ledger is from `full`" in provenance_box("a", _fake_ledger("a", [True], scale="full"), page_scale="small")
    assert "No claims ledger" in provenance_box("a", None)


def test_provenance_box_goes_right_after_the_title():
    nb = notebook("T", "x = 1")
    nb.cells.insert(0, nbformat.v4.new_code_cell("# injected"))
    add_provenance(nb, "BOX")
    assert [c.source for c in nb.cells] == ["# injected", "# T", "BOX", "The claim.", "x = 1"]


# -- what pages leave out ----------------------------------------------------------------------------
def tagged(source: str, tag: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = [tag]
    return cell


def test_split_directives_takes_only_the_leading_ones():
    assert split_directives("#| export\n# | exporti\n\ndef f(): pass") == (["export", "exporti"], "def f(): pass")
    assert split_directives("x = 1\n#| export") == ([], "x = 1\n#| export")
    assert split_directives("s = '#| export'") == ([], "s = '#| export'")


def test_strip_machinery_drops_directives_default_exp_hide_and_the_injected_parameters():
    nb = notebook("T", "#| default_exp attribution.alpha", "#| export\nimport math", "#| hide\nx = 1", "y = 2")
    nb.cells[3:3] = [tagged('scale = "small"\nseed = 0', "parameters"),
                     tagged('# Parameters\nscale = "full"\nseed = 1\n', "injected-parameters")]
    strip_machinery(nb)
    assert [c.source for c in nb.cells] == ["# T\n\nThe claim.", "import math", 'scale = "small"\nseed = 0', "y = 2"]
    assert nb.cells[2].metadata["tags"] == ["parameters"]


def test_strip_machinery_keeps_a_cell_whose_directives_hid_code_but_that_has_output():
    cell = nbformat.v4.new_code_cell("#| echo: false")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="shown\n")]
    nb = strip_machinery(nbformat.v4.new_notebook(cells=[cell]))
    assert [(c.source, len(c.outputs)) for c in nb.cells] == [("", 1)]


# -- assembling the source --------------------------------------------------------------------------
def executed_copy(book: Path, page: str, executed: Path) -> None:
    """A copy of `page` shaped like papermill's output: nbdev's cells, both parameters cells, a figure, a stream."""
    nb = nbformat.read(book / "nbs" / f"{page}.ipynb", as_version=4)
    nb.cells[1:1] = [nbformat.v4.new_code_cell(f"#| default_exp {page.split('/')[0][3:]}.{Path(page).name}"),
                     nbformat.v4.new_code_cell("#| export\nimport math"),
                     tagged('scale = "small"\ndevice = "auto"\nseed = 0', "parameters"),
                     tagged('# Parameters\nscale = "small"\ndevice = "cpu"\nseed = 0\n', "injected-parameters")]
    nb.cells.append(nbformat.v4.new_markdown_cell("$$e^{i\\pi} + 1 = 0$$\n\n![plot](../../figures/alpha/plot.png)"))
    out = nbformat.v4.new_code_cell("print(1)")
    out.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    nb.cells.append(out)
    nb.metadata["papermill"] = {"parameters": {"scale": "small", "device": "cpu", "seed": 0}}
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
    box = alpha.cells[1].source
    assert box.startswith("(provenance-alpha)=") and "1 of 1 reproduced" in box
    assert "`import paper_suite.attribution.alpha`" in box and "--seeds 0 1 2" in box
    assert "executed with `scale='small'`, `device='cpu'`, `seed=0`" in box
    assert "$$e^{i\\pi} + 1 = 0$$\n\n![plot](../figures/alpha/plot.png)" in [c.source for c in alpha.cells]
    # nbdev's directives and cells and papermill's injected cell are gone; the notebook's parameters cell stays
    code = [c for c in alpha.cells if c.cell_type == "code"]
    assert [c.source for c in code] == ["import math", 'scale = "small"\ndevice = "auto"\nseed = 0', "print(1)"]
    assert not any("#|" in c.source for c in alpha.cells if c.cell_type == "code")
    assert (src / "figures" / "alpha" / "plot.png").read_bytes() == b"\x89PNG fake"
    beta = nbformat.read(src / "07_security" / "beta.ipynb", as_version=4)
    assert "No claims ledger" in beta.cells[1].source
    # toolkit pages are the notebooks themselves, unexecuted and stripped; the landing page is copied
    tools = nbformat.read(src / "00_toolkit" / "00_tools.ipynb", as_version=4)
    assert [c.source for c in tools.cells] == ["# 00_Tools: a page\n\nThe claim.", "def f(): pass"]
    assert "#| export" in (book / "nbs" / "00_toolkit" / "00_tools.ipynb").read_text()      # the notebook keeps it
    assert (src / "index.md").read_text() == (book / "nbs" / "index.md").read_text()
    status = (src / "status.md").read_text()
    assert "Alpha: a page" in status and "Beta: a page" in status
    assert f"```{{figure}} {STATUS_FIGURE}" in status and (src / STATUS_FIGURE).read_bytes()[:4] == b"\x89PNG"
    assert "### Attribution" in status and "### Security" in status          # the toc's captions
    assert chapter_parts(book) == {"alpha": "Attribution", "beta": "Security"}
    assert (src / "_extra" / "mathjax" / "tex-chtml.js").is_file() and (src / "_extra" / "favicon.svg").is_file()
    assert not list(src.rglob(".*")) and not list(src.rglob("_static"))


def test_assemble_source_refuses_unexecuted_chapters(book):
    executed = book / "_build" / "executed"
    executed_copy(book, "01_attribution/alpha", executed)
    with pytest.raises(FileNotFoundError, match=r"beta; run `paper-suite run beta --scale small` first"):
        assemble_source(book, "small", executed, book / "figures", book / "_build" / "src")


# -- the small book, built and read back ---------------------------------------------------------------
@pytest.mark.book
def test_small_book_builds_with_clean_pages(book, tmp_path):
    """jupyter-book on the small book: every page built, none showing nbdev's or papermill's machinery, each
    chapter naming its rerun command and module, the status page opening with its figure."""
    from matplotlib.figure import Figure
    shutil.copy2(ROOT / "_config.yml", book / "_config.yml")
    executed, figures = book / "_build" / "executed", book / "figures"
    for page in ("01_attribution/alpha", "07_security/beta"):
        executed_copy(book, page, executed)
    (figures / "alpha").mkdir(parents=True)
    (figures / "alpha" / "claims.json").write_text(json.dumps(_fake_ledger("alpha", [True, False])))
    fig = Figure(figsize=(2, 1))
    fig.add_subplot().plot([0, 1])
    (figures / "alpha" / "plot.png").write_bytes(png_bytes(fig))
    html = build_book("small", executed, figures, tmp_path / "html", root=book)

    assert "WARNING" not in (tmp_path / "book-small" / "build.log").read_text()
    modules = {"alpha": "paper_suite.attribution.alpha", "beta": "paper_suite.security.beta"}
    for e in toc_entries(yaml.safe_load((book / "_toc.yml").read_text())):
        slug = Path(e.file).name if e.file[:2] in ("01", "07") else None
        assert page_problems(html, e.file, slug, modules.get(slug)) == []
    alpha = read_page(html / "01_attribution" / "alpha.html")
    assert [t for t in alpha.cell_tags if t] == [["parameters"]]             # the notebook's own cell, once
    assert "import math" in alpha.code[0] and "scale='small'" in alpha.text and "device='cpu'" in alpha.text
    status = read_page(html / "status.html")
    assert any(Path(src).name == "status.png" for src in status.images)
    assert status.text.index("Paper claims reproduced") < status.text.index("Every claim of the book") \
        < status.text.index("1 chapter: 1 of 2 paper claims reproduced")
    assert "01_attribution/alpha.html" in " ".join(status.links) and "07_security/beta.html" in " ".join(status.links)


def test_page_problems_catch_what_a_page_must_not_show(tmp_path):
    (tmp_path / "mathjax").mkdir()
    (tmp_path / "mathjax" / "tex-chtml.js").write_text("")
    cell = ('<div class="cell tag_{tag} docutils container"><div class="highlight"><pre>{code}</pre></div></div>')
    body = (cell.format(tag="parameters", code="scale = 1") + cell.format(tag="parameters", code="seed = 0")
            + cell.format(tag="injected-parameters",
            code="# Parameters\nscale = 2") + cell.format(tag="x", code="#| export\ndef f(): pass"))
    (tmp_path / "ch.html").write_text(f'<html><head><script src="mathjax/tex-chtml.js"></script>'
                                      f'<script src="https://cdn.example/x.js"></script></head><body>'
                                      f'<article>{body}<p>How this was made</p></article></body></html>')
    assert page_problems(tmp_path, "ch", "ch", "paper_suite.a.ch") == [
        "ch: nbdev directive shown: '#| export'", "ch: papermill's injected-parameters cell shown",
        "ch: more than one parameters cell", "ch: fetched from outside the site: https://cdn.example/x.js",
        "ch: the header does not say 'paper-suite run ch'", "ch: the header does not say 'import paper_suite.a.ch'"]


# -- the configuration ------------------------------------------------------------------------------
def test_config_renders_without_executing_and_offline():
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cfg["execute"]["execute_notebooks"] == "off"
    assert {".*", "**/.*"} <= set(cfg["exclude_patterns"])
    sphinx = cfg["sphinx"]["config"]
    assert sphinx["nb_render_markdown_format"] == "myst"
    assert "://" not in sphinx["mathjax_path"] and "_static" not in sphinx["mathjax_path"]
    assert sphinx["mathjax_path"].startswith("../mathjax/")
