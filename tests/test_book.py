"""The built book, checked twice: as HTML files read with Python, and in a real browser.

The book is built from the notebooks the chapter execution tests already produced
(`_build/test/executed/small/` and `_build/test/figures/`), so `make test` executes no chapter twice;
a chapter missing there (or older than its notebook) is executed first.

Build checks (no browser; they always run under `-m book`): jupyter-book builds every page of the toc
with no warning; no page shows an nbdev directive, papermill's injected-parameters cell or a second
parameters cell, loads anything from outside the site or refers to a file the site lacks; every page
with math loads the MathJax the site serves itself; each chapter's header gives its rerun command and
module; the status page opens with its figure (one row per chapter) and lists every chapter and
every ledger.

Browser checks (headless Chromium, driven over the Chrome DevTools protocol; skipped with one line
when there is none, failing when CI is set): every page loads with no console error, fetches nothing
from outside localhost, shows every image, has its math typeset, and leaves no raw `$$` or Markdown
table markup in its text. Screenshots of the status page and of one chapter go to `_build/screens/`.
"""
from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from paper_suite.book import png_bytes, repo_root
from paper_suite.runner import discover, load_ledgers, load_seed_ledgers, run_chapter
from paper_suite.site import (STATUS_FIGURE, build_book, chapter_pages, chapter_parts, page_problems, read_page,
                              read_toc, status_figure, status_grid, toc_entries)

pytestmark = [pytest.mark.book, pytest.mark.xdist_group("book")]

ROOT = repo_root()
SCALE = "small"
EXECUTED = ROOT / "_build" / "test" / "executed"
FIGURES = ROOT / "_build" / "test" / "figures"
SCREENS = ROOT / "_build" / "screens"
PAGES = [e.file for e in toc_entries(read_toc(ROOT))]
CHAPTERS = {f"{c.part}/{c.slug}": c for c in discover(ROOT).values()}        # toc page -> ChapterInfo
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync",
                  "--disable-default-apps", "--disable-extensions", "--window-size=1280,1000"]


def find_chromium() -> str | None:
    """Debian's chromium (or $CHROMIUM); None when there is none."""
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


# -- a small DevTools protocol client -------------------------------------------------------------
class Browser:
    """One headless Chromium with a fresh profile, one tab, spoken to over its DevTools websocket."""

    def __init__(self, exe: str, profile: Path):
        import websocket  # websocket-client
        self.proc = subprocess.Popen([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                      "--remote-debugging-port=0", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=open(profile.parent / "chromium.log", "wb"))
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and port_file.read_text().count("\n") >= 1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start; see {profile.parent / 'chromium.log'}")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)
        self.next_id, self.events = 0, []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")

    def _recv(self) -> dict:
        return json.loads(self.ws.recv())

    def send(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = self._recv()
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def evaluate(self, expression: str):
        r = self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"script failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def visit(self, url: str, timeout: float = 60) -> dict:
        """Open `url`, wait for the load event, images and MathJax; report what a reader would see."""
        self.events.clear()
        self.send("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load in {timeout} s")
            self.events.append(self._recv())
        report = self.evaluate(PAGE_REPORT_JS)
        time.sleep(0.2)                       # let late console messages arrive
        self.send("Runtime.evaluate", expression="0")
        report["errors"] = console_errors(self.events, url)
        report["requests"] = [e["params"]["request"]["url"] for e in self.events
                              if e.get("method") == "Network.requestWillBeSent"]
        return report

    def screenshot(self, path: Path, width: int = 1280, max_height: int = 8000) -> Path:
        """A PNG of the whole page (up to `max_height` pixels), laid out at `width`."""
        height = min(int(self.evaluate("document.documentElement.scrollHeight")), max_height)
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        try:
            shot = self.send("Page.captureScreenshot", format="png")
        finally:
            self.send("Emulation.clearDeviceMetricsOverride")
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


PAGE_REPORT_JS = r"""(async () => {
  const within = (p, ms) => Promise.race([p, new Promise(r => setTimeout(r, ms))]);
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await within(MathJax.startup.promise, 30000);
  const imgs = Array.from(document.images);
  imgs.forEach(i => { i.loading = "eager"; });
  await within(Promise.all(imgs.map(i => i.complete ? null :
      new Promise(r => { i.addEventListener("load", r); i.addEventListener("error", r); }))), 20000);
  const main = document.querySelector("main") || document.body;
  const prose = main.cloneNode(true);
  prose.querySelectorAll("pre, code, script, style, mjx-container, .highlight").forEach(e => e.remove());
  const text = prose.textContent;
  const math = Array.from(document.querySelectorAll(".math"));
  return {
    title: document.title,
    text: main.innerText,
    links: Array.from(main.querySelectorAll("a[href]")).map(a => a.getAttribute("href")),
    math: math.length,
    mjx: document.querySelectorAll("mjx-container").length,
    untypeset: math.filter(m => !m.querySelector("mjx-container")).map(m => m.textContent.slice(0, 80)),
    mathjax_src: Array.from(document.scripts).map(s => s.src).filter(s => /tex-chtml/.test(s)),
    raw_dollars: text.includes("$$"),
    raw_tables: text.split("\n").filter(l => /^\s*\|.*\|\s*$/.test(l) && /-{3}/.test(l)).length,
    bad_images: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
    images: imgs.length,
    provenance: main.innerText.includes("How this was made"),
  };
})()"""


def console_errors(events: list[dict], url: str) -> list[str]:
    """Every error a reader's console would show: exceptions, console.error, failed or 4xx/5xx loads."""
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            out.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console.error: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"]))
        elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
            out.append(f"log: {p['entry']['text']} {p['entry'].get('url', '')}")
        elif m == "Network.loadingFailed" and not p.get("canceled"):
            out.append(f"load failed: {p.get('errorText')} ({p.get('type')})")
        elif m == "Network.responseReceived" and p["response"]["status"] >= 400:
            out.append(f"HTTP {p['response']['status']}: {p['response']['url']}")
    return out


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


# -- fixtures ---------------------------------------------------------------------------------------
def _needs_run(info) -> bool:
    """Not executed by the chapter tests (or executed before its notebook last changed)."""
    nb = EXECUTED / SCALE / info.part / f"{info.slug}.ipynb"
    return not nb.is_file() or nb.stat().st_mtime < info.path.stat().st_mtime


@pytest.fixture(scope="session")
def chromium() -> str:
    exe = find_chromium()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("no Chromium found and CI is set: install Debian's `chromium` (apt-get install -y chromium)")
        pytest.skip("no Chromium found (apt-get install -y chromium, or set $CHROMIUM); the browser checks are skipped, the build checks still run")
    try:
        import websocket  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("websocket-client is not installed; the browser checks are skipped, the build checks still run")
    return exe


@pytest.fixture(scope="session")
def book(tmp_path_factory) -> Path:
    """The book built from the chapter tests' executed notebooks (executing any that are missing)."""
    for info in discover(ROOT).values():
        if _needs_run(info):
            run_chapter(info, scale=SCALE, device="cpu", figures=FIGURES, executed=EXECUTED)
    t0 = time.perf_counter()
    html = build_book(SCALE, executed=EXECUTED, figures=FIGURES, out=tmp_path_factory.mktemp("book") / "html")
    print(f"book built in {time.perf_counter() - t0:.1f} s: {html}")
    return html


@pytest.fixture(scope="session")
def site(book):
    handler = functools.partial(QuietHandler, directory=str(book))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser(chromium, tmp_path_factory):
    d = tmp_path_factory.mktemp("chromium")
    b = Browser(chromium, d / "profile")
    yield b
    b.close()


@pytest.fixture(scope="session")
def visits(site, browser) -> dict[str, dict]:
    """Every page of the toc, visited once: page -> report."""
    return {page: browser.visit(site + page + ".html") for page in PAGES}


@pytest.fixture(scope="session")
def shots() -> Path:
    SCREENS.mkdir(parents=True, exist_ok=True)
    return SCREENS


# -- build checks: the HTML files, read with Python ---------------------------------------------------
def test_build_has_no_warning(book):
    log = (book.parent / f"book-{SCALE}" / "build.log").read_text()
    assert "WARNING" not in log and "ERROR" not in log, log[-2000:]


@pytest.mark.parametrize("page", PAGES)
def test_page_is_built_clean(page, book):
    info = CHAPTERS.get(page)
    assert page_problems(book, page, info and info.slug, info and info.module) == []


def test_chapter_header_gives_rerun_and_module(book):
    for page, info in CHAPTERS.items():
        text = read_page(book / f"{page}.html").text
        head = text[text.index("How this was made"):][:4000]          # the box, and what follows it
        for needed in (f"paper-suite run {info.slug} --scale {SCALE} --seeds 0 1 2", f"import {info.module}",
                       "scale", "device", "seed"):
            assert needed in head, f"{page}: the header does not give {needed!r}"


def test_math_is_served_by_the_site_itself(book):
    with_math = {p: read_page(book / f"{p}.html") for p in PAGES}
    with_math = {p: pg for p, pg in with_math.items() if pg.math}
    assert with_math, "no page of the book has math"
    assert (book / "mathjax" / "tex-chtml.js").is_file()
    for p, pg in with_math.items():
        assert [s for s in pg.scripts if "tex-chtml" in s and "://" not in s], f"{p}: no local MathJax"


# Sphinx typesets straight quotes as curly ones ("probe's" becomes "probe’s"): compare titles as a reader would
_STRAIGHT_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def plain(text: str) -> str:
    """`text` with typographic quotes made straight."""
    return text.translate(_STRAIGHT_QUOTES)


def test_plain_straightens_typographic_quotes():
    assert plain("a probe\u2019s \u201cboundary\u201d") == 'a probe\'s "boundary"'


def test_status_page_opens_with_its_figure_and_lists_every_chapter_and_ledger(book):
    status = read_page(book / "status.html")
    status.text = plain(status.text)
    chapters = chapter_pages(ROOT)
    assert chapters, "the toc names no chapter"
    for slug, (title, page) in chapters.items():
        assert title in status.text, f"status page does not list {slug} ({title})"
        assert any(h.split("#")[0].endswith(f"{page}.html") for h in status.links), f"no link to {page}"
    for slug in load_ledgers(FIGURES):
        title = chapters.get(slug, ("", ""))[0]
        assert (title or slug) in status.text, f"the ledger of {slug} is not on the status page"
    assert "claims reproduced" in status.text and "Environment" in status.text
    figure = [src for src in status.images if Path(src).name == STATUS_FIGURE]
    assert figure, "the status page has no figure"
    assert (book / figure[0]).read_bytes()[:4] == b"\x89PNG"
    assert status.text.index("claims reproduced") < status.text.index("Every claim of the book") \
        < status.text.index("Chapters")
    for part in dict.fromkeys(chapter_parts(ROOT).values()):
        assert part in status.text, f"the status page has no section for {part}"


def test_status_figure_has_one_row_per_chapter(book):
    shown = [src for src in read_page(book / "status.html").images if Path(src).name == STATUS_FIGURE]
    chapters = chapter_pages(ROOT)
    ledgers = load_ledgers(FIGURES)
    grid = status_grid(ledgers, chapters, load_seed_ledgers(FIGURES), chapter_parts(ROOT))
    assert [r.slug for r in grid][:len(chapters)] == list(chapters)
    assert len(grid) == len(chapters) + len(set(ledgers) - set(chapters))
    fig = status_figure(grid)
    assert len(fig.axes[0].get_yticks()) == len(grid)
    assert shown and png_bytes(fig) == (book / shown[0]).read_bytes()      # the very figure the page shows


# -- browser checks ---------------------------------------------------------------------------------
# One test function, parametrized over the checks, so that without Chromium the summary says why in one line.
def page_renders(page: str, visits: dict, site: str) -> None:
    r = visits[page]
    assert r["errors"] == [], f"{page}: console errors: {r['errors']}"
    outside = [u for u in r["requests"] if not u.startswith((site, "data:", "blob:"))]
    assert outside == [], f"{page}: fetched from outside the site: {outside}"
    assert r["bad_images"] == [], f"{page}: images that did not load: {r['bad_images']}"
    assert r["untypeset"] == [], f"{page}: math left untypeset: {r['untypeset']}"
    assert r["mjx"] >= r["math"]
    assert not r["raw_dollars"], f"{page}: raw $$ in the page's text"
    assert r["raw_tables"] == 0, f"{page}: Markdown table markup left as text"


def math_is_typeset_by_the_site(visits: dict, site: str) -> None:
    typeset = {p: r["mjx"] for p, r in visits.items() if r["mjx"]}
    assert typeset, "no page of the book has typeset math"
    for p, r in visits.items():
        for src in r["mathjax_src"]:
            assert src.startswith(site + "mathjax/"), f"{p}: MathJax loaded from {src}"


def status_page_shows(visits: dict, browser: Browser, site: str, shots: Path) -> None:
    r = visits["status"]
    for slug, (title, page) in chapter_pages(ROOT).items():
        assert title in plain(r["text"]), f"status page does not list {slug} ({title})"
        assert any(h.split("#")[0].endswith(f"{page}.html") for h in r["links"]), f"no link to {page}"
    assert "claims reproduced" in r["text"] and "Environment" in r["text"] and r["images"] >= 1
    browser.visit(site + "status.html")
    assert browser.screenshot(shots / "status.png").read_bytes()[:4] == b"\x89PNG"


def chapter_pages_show_provenance(visits: dict, browser: Browser, site: str, shots: Path) -> None:
    chapters = chapter_pages(ROOT)
    for slug, (_, page) in chapters.items():
        assert visits[page]["provenance"], f"{page}: no 'How this was made' box"
    first = next(iter(chapters.values()))[1]
    browser.visit(site + first + ".html")
    assert browser.screenshot(shots / f"{Path(first).name}.png").read_bytes()[:4] == b"\x89PNG"


BROWSER_CHECKS = [("renders", page) for page in PAGES] + [("math", ""), ("status", ""), ("provenance", "")]


@pytest.mark.parametrize("check, page", BROWSER_CHECKS, ids=[f"{c}:{p}" if p else c for c, p in BROWSER_CHECKS])
def test_in_the_browser(check, page, visits, browser, site, shots):
    if check == "renders":
        page_renders(page, visits, site)
    elif check == "math":
        math_is_typeset_by_the_site(visits, site)
    elif check == "status":
        status_page_shows(visits, browser, site, shots)
    else:
        chapter_pages_show_provenance(visits, browser, site, shots)
