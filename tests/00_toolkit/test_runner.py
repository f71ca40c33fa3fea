"""The runner and the CLI on a throw-away book: outcomes, failure isolation, parameter injection."""
import json

import pytest

from helpers import read_ledger
from paper_suite.cli import main
from paper_suite.runner import (chapter_params, discover, find_chapter, results_table, run_chapter, run_chapters,
                                status_rows, load_ledgers)

pytestmark = pytest.mark.xdist_group("fake_book")


def test_discover_and_params(fake_book):
    chs = discover(fake_book)
    assert list(chs) == ["boom", "mismatch", "ok"]
    assert chs["ok"].title == "Demo chapter: a test" and chs["ok"].module == "paper_suite.demo.ok"
    assert chapter_params(chs["ok"].path) == {"scale": "small", "device": "auto", "seed": 0}
    with pytest.raises(ValueError, match="unknown chapter 'nope'; allowed: "):
        find_chapter("nope", chs)


def test_injected_full_scale_reaches_the_chapter(fake_book):
    figs = fake_book / "figs"
    r = run_chapter(discover(fake_book)["ok"], scale="full", device="cpu", seed=3, root=fake_book,
                    figures=figs, executed=fake_book / "exec")
    assert r.status == "ok", r.error
    led = read_ledger(figs, "ok")
    claims = {c["id"]: c for c in led["claims"]}
    assert led["scale"] == "full" and led["seed"] == 3 and led["preset"] == {"n": 30}
    assert claims["scale"]["measured"] == "full" and claims["n"]["holds"]
    assert (fake_book / "exec" / "full" / "01_demo" / "ok.ipynb").exists()


def test_failing_chapters_keep_previous_figures_and_keep_going(fake_book):
    figs = fake_book / "figs"
    for slug in ("boom", "mismatch"):
        (figs / slug).mkdir(parents=True)
        (figs / slug / "claims.json").write_text('{"claims": []}')
        (figs / slug / "fig.png").write_bytes(b"previous good figure")
    chs = discover(fake_book)
    kw = dict(scale="small", device="cpu", seed=0, root=fake_book, figures=figs, executed=fake_book / "exec",
              progress=False)
    stopped = run_chapters([chs["boom"], chs["ok"]], keep_going=False, **kw)
    assert [r.slug for r in stopped] == ["boom"] and stopped[0].status == "error"
    assert "RuntimeError: boom" in stopped[0].error
    rs = run_chapters([chs["boom"], chs["mismatch"], chs["ok"]], keep_going=True, **kw)
    assert [r.status for r in rs] == ["error", "claims", "ok"]
    assert (rs[1].held, rs[1].total) == (0, 1) and (rs[2].held, rs[2].total) == (2, 2)
    for slug in ("boom", "mismatch"):
        assert (figs / slug / "fig.png").read_bytes() == b"previous good figure"
        assert json.loads((figs / slug / "claims.json").read_text()) == {"claims": []}
    table = results_table(rs)
    assert "claims not as expected" in table and "error: RuntimeError: boom" in table


def test_cli_errors_are_one_line(fake_book, monkeypatch, capsys):
    monkeypatch.chdir(fake_book)
    for argv, msg in ((["run", "nope"], "unknown chapter 'nope'; allowed: boom, mismatch, ok"),
                      (["run", "ok", "--scale", "huge"], "invalid choice: 'huge'"),
                      (["run", "ok", "--device", "tpu"], "invalid choice: 'tpu'"),
                      (["run", "ok", "--seed", "-1"], "seed must be a non-negative integer"),
                      (["run", "ok", "--jobs", "0"], "jobs must be a positive integer"),
                      (["run"], "give chapter slugs or --all"),
                      (["params", "nope"], "unknown chapter 'nope'")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and msg in err and err.startswith("paper-suite: error: ")
    assert not (fake_book / "figures").exists() and not (fake_book / "_build").exists()


def test_cli_run_exit_status_and_status(fake_book, monkeypatch, capsys):
    monkeypatch.chdir(fake_book)
    out = fake_book / "out"
    assert main(["run", "ok", "--device", "cpu", "--out", str(out)]) == 0
    assert (out / "ok" / "claims.json").exists()
    assert main(["run", "mismatch", "ok", "--device", "cpu", "--keep-going", "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "mismatch" in printed and "claims not as expected" in printed
    rows = status_rows(load_ledgers(out))
    assert {r["claim"] for r in rows} == {"scale", "n"} and all(r["as_expected"] for r in rows)


def test_cli_list_and_params(fake_book, monkeypatch, capsys):
    monkeypatch.chdir(fake_book)
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "ok" in out and "Demo chapter: a test" in out and "60" in out and "600" in out
    assert main(["params", "ok"]) == 0
    assert "scale = 'small'  (str)" in capsys.readouterr().out
