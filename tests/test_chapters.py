"""Every chapter in the toc, executed once at `small` on the CPU: it runs with every claim as expected and no
runaway; the committed ledger and seed ledger are not stale; and a second run of one chapter gives identical
claims. The budget itself (CPU seconds against settings.ini) is measured by `paper-suite bench`, not here: CPU
time on a shared machine depends on what else it runs, and a verdict must not."""
import json

import pytest

from helpers import ROOT, TEST_BUILD, budget, execute_once, toc_chapters
from paper_suite.book import KINDS, SEEDS_FILE
from paper_suite.runner import discover, majority, run_chapter

SLUGS = toc_chapters()
RUNAWAY = 3          # times the budget
pytestmark = pytest.mark.chapter


def test_toc_lists_chapters():
    assert SLUGS, "no chapter in _toc.yml"


@pytest.mark.parametrize("slug", [pytest.param(s, marks=pytest.mark.xdist_group(s)) for s in SLUGS])
def test_chapter_runs_as_expected(slug):
    r = execute_once(slug)
    assert r.status == "ok", f"{slug}: {r.status}: {r.error} (executed notebook: {r.executed})"
    # a runaway guard only, that no plausible load trips (the budget is `paper-suite bench`'s to check)
    assert 0 < r.cpu_s <= RUNAWAY * budget("small"), f"{slug} used {r.cpu_s:.0f} s of CPU at small (runaway)"
    assert r.wall_s <= 2 * RUNAWAY * budget("small"), f"{slug} took {r.wall_s:.0f} s wall at small (runaway)"


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
    assert all(c.get("kind") in KINDS for c in fresh["claims"]), f"{slug}: every claim needs a kind"


@pytest.mark.parametrize("slug", [pytest.param(s, marks=pytest.mark.xdist_group(s)) for s in SLUGS])
def test_committed_seed_ledger_is_not_stale(slug):
    path = ROOT / "figures" / slug / SEEDS_FILE
    assert path.exists(), f"figures/{slug}/{SEEDS_FILE} is not committed: run `paper-suite run {slug} --seeds 0 1 2`"
    seeds = json.loads(path.read_text())
    assert seeds["scale"] == "small" and seeds["seeds"] == [0, 1, 2]
    r = execute_once(slug)
    assert r.status == "ok", f"{slug} did not run cleanly ({r.error})"
    fresh = json.loads((TEST_BUILD / "figures" / slug / "claims.json").read_text())
    assert [c["id"] for c in seeds["claims"]] == [c["id"] for c in fresh["claims"]], \
        f"{slug}: the seed ledger checks other claims; rerun `paper-suite run {slug} --seeds 0 1 2`"
    seed0 = {c["id"]: c["per_seed"]["0"]["holds"] for c in seeds["claims"]}
    assert seed0 == {c["id"]: c["holds"] for c in fresh["claims"]}, \
        f"{slug}: seed 0 of the seed ledger disagrees with a fresh run; rerun `paper-suite run {slug} --seeds 0 1 2`"
    for c in seeds["claims"]:     # the aggregation is what the runner's rule says it is
        assert (c["verdict"], c["agreement"]) == majority(c["held"], c["runs"])


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
