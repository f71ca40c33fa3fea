"""Every chapter in the toc, executed once at `small` on the CPU: it runs, within budget, with every claim as
expected; the committed ledger is not stale; and a second run of one chapter gives identical claims."""
import json

import pytest

from helpers import ROOT, TEST_BUILD, budget, execute_once, toc_chapters
from paper_suite.runner import discover, run_chapter

SLUGS = toc_chapters()
pytestmark = pytest.mark.chapter


def test_toc_lists_chapters():
    assert SLUGS, "no chapter in _toc.yml"


@pytest.mark.parametrize("slug", [pytest.param(s, marks=pytest.mark.xdist_group(s)) for s in SLUGS])
def test_chapter_runs_as_expected(slug):
    r = execute_once(slug)
    assert r.status == "ok", f"{slug}: {r.status}: {r.error} (executed notebook: {r.executed})"
    # the budget is compute on one core: the kernel's CPU time, which a busy machine does not stretch;
    # the wall time gets a loose bound only, since CI runs two chapters on its two cores
    assert 0 < r.cpu_s <= budget("small"), f"{slug} used {r.cpu_s:.0f} s of CPU at small"
    assert r.wall_s <= 3 * budget("small"), f"{slug} took {r.wall_s:.0f} s wall at small"


@pytest.mark.parametrize("slug", [pytest.param(s, marks=pytest.mark.xdist_group(s)) for s in SLUGS])
def test_committed_ledger_is_not_stale(slug):
    committed = ROOT / "figures" / slug / "claims.json"
    assert committed.exists(), f"figures/{slug}/claims.json is not committed: run `paper-suite run {slug}`"
    r = execute_once(slug)
    assert r.status == "ok", f"{slug} did not run cleanly ({r.error})"
    fresh = json.loads((TEST_BUILD / "figures" / slug / "claims.json").read_text())
    old = json.loads(committed.read_text())
    verdicts = lambda led: {c["id"]: (c["holds"], c["expected"]) for c in led["claims"]}
    assert verdicts(old) == verdicts(fresh), f"rerun `paper-suite run {slug}` and commit figures/{slug}/"
    assert old["scale"] == "small" and old["seed"] == 0
    assert {f["file"] for f in old["figures"]} == {f["file"] for f in fresh["figures"]}


DETERMINISM = "weight_drift"


@pytest.mark.xdist_group(DETERMINISM)
@pytest.mark.skipif(DETERMINISM not in SLUGS, reason="chapter not in the toc")
def test_same_seed_same_claims_and_figures(tmp_path):
    first = execute_once(DETERMINISM)
    assert first.status == "ok"
    again = run_chapter(discover(ROOT)[DETERMINISM], scale="small", device="cpu", seed=0, root=ROOT,
                        figures=tmp_path / "figs", executed=tmp_path / "exec")
    assert again.status == "ok", again.error
    a = json.loads((TEST_BUILD / "figures" / DETERMINISM / "claims.json").read_text())
    b = json.loads((tmp_path / "figs" / DETERMINISM / "claims.json").read_text())
    assert a["claims"] == b["claims"]
    for f in a["figures"]:
        assert (TEST_BUILD / "figures" / DETERMINISM / f["file"]).read_bytes() == \
               (tmp_path / "figs" / DETERMINISM / f["file"]).read_bytes(), f["file"]
