"""The runner and the CLI on a throw-away book: outcomes, failure isolation, parameter injection."""
import json

import pytest

from helpers import read_ledger
from paper_suite.cli import main
from paper_suite.book import SEEDS_FILE
from paper_suite.runner import (chapter_params, discover, find_chapter, load_ledgers, load_seed_ledgers, results_table,
                                run_chapter, run_chapters, run_seeds, seeds_table, status_rows)

pytestmark = pytest.mark.xdist_group("fake_book")


def test_discover_and_params(fake_book):
    chs = discover(fake_book)
    assert list(chs) == ["boom", "crashy", "mismatch", "ok", "seedy"]
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
    for argv, msg in ((["run", "nope"], "unknown chapter 'nope'; allowed: boom, crashy, mismatch, ok, seedy"),
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


# -- verdicts over seeds -----------------------------------------------------------------------------
def test_run_seeds_writes_the_seed_ledger_with_majority_and_agreement(fake_book):
    figs = fake_book / "figs"
    res = run_seeds(discover(fake_book)["seedy"], [0, 1, 2], device="cpu", root=fake_book, figures=figs,
                    executed=fake_book / "exec")
    assert res.ok, res.error
    doc = json.loads((figs / "seedy" / SEEDS_FILE).read_text())
    assert doc["seeds"] == [0, 1, 2] and doc == res.ledger
    even, one = doc["claims"]
    assert (even["held"], even["verdict"], even["agreement"], even["kind"]) == (2, "reproduced", "2/3", "paper")
    assert even["per_seed"]["1"] == {"holds": False, "measured": 1, "as_expected": False}
    assert (one["verdict"], one["agreement"]) == ("reproduced", "3/3")
    # seed 0's run is the chapter's figures, and its claims table shows the agreement
    assert read_ledger(figs, "seedy")["seed"] == 0
    assert "2/3" in (figs / "seedy" / "claims.csv").read_text()
    table = seeds_table(res)
    assert "¬Re!" in table and "2/3" in table
    # a plain run afterwards keeps the seed ledger
    assert run_chapter(discover(fake_book)["seedy"], device="cpu", seed=0, root=fake_book, figures=figs,
                       executed=fake_book / "exec").ok
    assert json.loads((figs / "seedy" / SEEDS_FILE).read_text()) == doc


def test_a_tie_over_seeds_is_not_reproduced(fake_book):
    res = run_seeds(discover(fake_book)["seedy"], [0, 1], device="cpu", root=fake_book, figures=fake_book / "f",
                    executed=fake_book / "exec")
    even = res.ledger["claims"][0]
    assert (even["verdict"], even["agreement"], even["tie"]) == ("not reproduced", "1/2", True)


def test_a_failed_seed_writes_nothing(fake_book):
    figs = fake_book / "figs"
    (figs / "crashy").mkdir(parents=True)
    (figs / "crashy" / SEEDS_FILE).write_text('{"old": true}')
    (figs / "crashy" / "claims.json").write_text('{"claims": []}')
    res = run_seeds(discover(fake_book)["crashy"], [0, 1, 2], device="cpu", root=fake_book, figures=figs,
                    executed=fake_book / "exec")
    assert not res.ok and "seed 2" in res.error and "RuntimeError" in res.error
    assert (figs / "crashy" / SEEDS_FILE).read_text() == '{"old": true}'
    assert (figs / "crashy" / "claims.json").read_text() == '{"claims": []}'
    assert not [p for p in figs.iterdir() if p.name.startswith(".seeds")]     # no scratch left behind


def test_cli_seeds_errors_are_one_line(fake_book, monkeypatch, capsys):
    monkeypatch.chdir(fake_book)
    for argv, msg in ((["run", "seedy", "--seeds", "0", "0"], "seeds must be distinct"),
                      (["run", "seedy", "--seeds", "0", "x"], "seed must be a non-negative integer"),
                      (["run", "seedy", "--seeds"], "expected at least one argument"),
                      (["run", "seedy", "--seed", "1", "--seeds", "2"], "not allowed with argument"),
                      (["run", "seedy", "--seeds", "0", "--jobs", "2"], "drop --jobs"),
                      (["bench", "nope"], "unknown chapter 'nope'")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and msg in err, (argv, err)
    assert not (fake_book / "figures").exists()


def test_cli_seeds_and_status_show_agreement(fake_book, monkeypatch, capsys):
    monkeypatch.chdir(fake_book)
    assert main(["run", "seedy", "--seeds", "0", "1", "2", "--device", "cpu"]) == 0
    assert main(["run", "crashy", "--seeds", "0", "1", "2", "--device", "cpu"]) == 1
    capsys.readouterr()
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "paper claims reproduced: 1 of 1 (seed agreement: 0 of 1 unanimous)" in out
    rows = status_rows(load_ledgers(fake_book / "figures"), load_seed_ledgers(fake_book / "figures"))
    assert {(r["claim"], r["agreement"]) for r in rows} == {("even", "2/3"), ("one", "3/3")}


def test_cli_bench_reports_cpu_against_budget_and_leaves_figures_alone(fake_book, monkeypatch, capsys):
    monkeypatch.chdir(fake_book)
    assert main(["bench", "ok", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "cpu/budget" in out and "load average" in out and "total:" in out
    assert not (fake_book / "figures").exists()
    assert main(["bench", "boom", "--device", "cpu"]) == 1
