"""paper_suite.book: parameter checks, atomic artifacts, the ledger and its failure modes."""
import json
import os

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from paper_suite.book import (KINDS, SEEDS_FILE, ClaimMismatch, claims_table_rows, short_value, check_choice, check_seed, open_chapter, png_bytes, resolve_device,
                              SCALES)

PRESETS = {"small": {"n": 3}, "full": {"n": 30}}


def test_unknown_scale_names_allowed_values(tmp_path):
    with pytest.raises(ValueError, match=r"unknown scale 'huge'; allowed: small, full"):
        open_chapter("demo", "huge", "cpu", 0, PRESETS, out=tmp_path)
    assert not any(tmp_path.iterdir())          # nothing half-written


@pytest.mark.parametrize("seed", [-1, 1.5, "3", True, None])
def test_bad_seed(seed, tmp_path):
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        open_chapter("demo", "small", "cpu", seed, PRESETS, out=tmp_path)


def test_unknown_device():
    with pytest.raises(ValueError, match="allowed: auto, cpu, cuda"):
        resolve_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="machine has a GPU")
def test_cuda_without_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="no CUDA GPU is available"):
        resolve_device("cuda")
    assert resolve_device("auto") == "cpu"


def test_presets_must_cover_every_scale(tmp_path):
    with pytest.raises(ValueError, match="presets lack scale"):
        open_chapter("demo", "small", "cpu", 0, {"small": {}}, out=tmp_path)


def test_preset_attribute_error_lists_settings(tmp_path):
    ch = open_chapter("demo", "full", "cpu", 0, PRESETS, out=tmp_path)
    assert ch.preset.n == 30
    with pytest.raises(AttributeError, match="it has: n"):
        ch.preset.m


def test_seeding_is_reproducible(tmp_path):
    open_chapter("demo", "small", "cpu", 7, PRESETS, out=tmp_path)
    a = (np.random.rand(), torch.rand(1).item())
    open_chapter("demo", "small", "cpu", 7, PRESETS, out=tmp_path)
    assert a == (np.random.rand(), torch.rand(1).item())


def _good_run(out, value=1.0):
    ch = open_chapter("demo", "small", "cpu", 0, PRESETS, out=out)
    fig, ax = plt.subplots(); ax.plot([0, value])
    ch.figure(fig, "fig", "a caption")
    ch.table([{"a": 1, "b": value}], "tab")
    ch.claim("c1", "s", "p", value, True, kind="paper", criterion="always")
    return ch


def test_finish_writes_ledger_with_provenance(tmp_path):
    led = _good_run(tmp_path).finish()
    files = sorted(os.listdir(tmp_path / "demo"))
    assert files == ["claims.json", "fig.png", "tab.csv"]
    disk = json.loads((tmp_path / "demo" / "claims.json").read_text())
    assert disk["claims"] == led["claims"] and disk["claims"][0]["verdict"] == "reproduced"
    prov = disk["provenance"]
    assert {"commit", "dirty", "python", "packages", "wall_time_s", "cpu_time_s", "threads"} <= set(prov)
    assert prov["packages"]["torch"] == torch.__version__ and prov["packages"]["numpy"] == np.__version__
    assert prov["cpu_time_s"] >= 0 and prov["threads"] == 1
    assert disk["figures"] == [{"name": "fig", "file": "fig.png", "caption": "a caption"}]


def test_nothing_visible_before_finish_and_no_stage_left(tmp_path):
    ch = _good_run(tmp_path)
    assert not (tmp_path / "demo").exists()
    ch.finish()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".demo")] == []


def test_failed_run_keeps_previous_artifacts(tmp_path):
    _good_run(tmp_path, 1.0).finish()
    before = {p.name: p.read_bytes() for p in (tmp_path / "demo").iterdir()}
    # a run that raises midway never finishes
    ch = _good_run(tmp_path, 2.0)
    del ch
    # a run whose claim does not come out as expected
    ch = open_chapter("demo", "small", "cpu", 0, PRESETS, out=tmp_path)
    fig, ax = plt.subplots(); ax.plot([0, 5])
    ch.figure(fig, "fig", "another")
    ch.claim("c1", "s", "p", 0, False, kind="paper", criterion="c")
    with pytest.raises(ClaimMismatch, match="c1"):
        ch.finish()
    after = {p.name: p.read_bytes() for p in (tmp_path / "demo").iterdir()}
    assert after == before
    failed = json.loads((tmp_path / ".failed" / "demo" / "claims.json").read_text())
    assert failed["claims"][0]["holds"] is False


def test_expected_false_claim_is_not_a_failure(tmp_path):
    ch = open_chapter("demo", "small", "cpu", 0, PRESETS, out=tmp_path)
    ch.claim("c1", "s", "p", 0, False, kind="paper", criterion="c", expected=False, note="out of reach at this scale")
    led = ch.finish()
    assert led["claims"][0]["verdict"] == "not reproduced"
    # ...but a claim expected to fail that holds is a surprise, and fails the run
    ch = open_chapter("demo", "small", "cpu", 0, PRESETS, out=tmp_path)
    ch.claim("c1", "s", "p", 1, True, kind="paper", criterion="c", expected=False)
    with pytest.raises(ClaimMismatch):
        ch.finish()


def test_claim_validation(tmp_path):
    ch = open_chapter("demo", "small", "cpu", 0, PRESETS, out=tmp_path)
    with pytest.raises(ValueError, match="criterion"):
        ch.claim("c", "s", "p", 1, True, kind="paper", criterion="")
    with pytest.raises(TypeError, match="bool"):
        ch.claim("c", "s", "p", 1, 1, kind="paper", criterion="x")
    ch.claim("c", "s", "p", np.float32(0.5), np.bool_(True), kind="paper", criterion="x")
    with pytest.raises(ValueError, match="twice"):
        ch.claim("c", "s", "p", 1, True, kind="paper", criterion="x")
    with pytest.raises(ValueError, match="at least one claim"):
        open_chapter("demo2", "small", "cpu", 0, PRESETS, out=tmp_path).finish()


def test_png_bytes_are_deterministic():
    def draw():
        fig, ax = plt.subplots(); ax.plot([3, 1, 2]); ax.set_title("t")
        b = png_bytes(fig); plt.close(fig); return b
    a, b = draw(), draw()
    assert a == b and b"tIME" not in a and b"Software" not in a


def test_small_scale_runs_on_one_thread(tmp_path):
    ch = open_chapter("demo", "small", "cpu", 0, PRESETS, out=tmp_path)
    assert ch.threads == 1 and torch.get_num_threads() == 1


def test_choices_and_seed_helpers():
    assert check_choice("scale", "full", SCALES) == "full"
    assert check_seed(np.int32(4)) == 4


def test_claim_kinds_are_validated_and_recorded(tmp_path):
    ch = open_chapter("demo", "small", "cpu", 0, PRESETS, out=tmp_path)
    with pytest.raises(ValueError, match="unknown kind 'theorem'; allowed: paper, extension, check"):
        ch.claim("c", "s", "p", 1, True, kind="theorem", criterion="x")
    with pytest.raises(TypeError):
        ch.claim("c", "s", "p", 1, True, criterion="x")            # kind is required
    with pytest.raises(TypeError, match="revised"):
        ch.claim("c", "s", "p", 1, True, kind="paper", criterion="x", revised=True)
    for kind in KINDS:
        ch.claim(kind, "s", "p", 1, True, kind=kind, criterion="x")
    led = ch.finish()
    assert [c["kind"] for c in led["claims"]] == list(KINDS) and all(c["revised"] == "" for c in led["claims"])


def test_claims_table_has_kind_seeds_and_revision_mark(tmp_path):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / SEEDS_FILE).write_text(json.dumps({"claims": [{"id": "a", "agreement": "2/3"}]}))
    ch = open_chapter("demo", "small", "cpu", 0, PRESETS, out=tmp_path)
    ch.claim("a", "s", "0.9", 0.91, True, kind="paper", criterion="x > 0.8",
             revised="x > 0.95 gave False; changed because the paper's 0.9 is rounded")
    ch.claim("b", "s", "-", 1, False, kind="check", criterion="x == 2", expected=False)
    df = ch.claims_table()
    assert list(df.columns) == ["id", "kind", "statement", "paper", "ours", "criterion", "verdict", "seeds", "revised"]
    assert df.to_dict("records")[0]["seeds"] == "2/3" and df.to_dict("records")[0]["revised"] == "†"
    assert df.to_dict("records")[1]["seeds"] == "–" and df.to_dict("records")[1]["verdict"] == "[¬Re]"
    ch.finish()
    # the seed ledger is carried over by a plain run, and the table is saved
    assert (tmp_path / "demo" / SEEDS_FILE).is_file() and (tmp_path / "demo" / "claims.csv").is_file()
    assert set(ch.elapsed()) == {"wall_s", "cpu_s"}


def test_claims_table_rows_shorten_values():
    rows = claims_table_rows([{"id": "c", "kind": "extension", "statement": "s", "paper": "p",
                               "measured": {"x": 0.123456789, "v": list(range(20))}, "criterion": "k",
                               "holds": True, "expected": False}])
    assert rows[0]["ours"] == "x=0.1235, v=[0, 1, 2, 3, 4, 5, …]" and rows[0]["verdict"] == "[Re] (unexpected)"
    assert short_value("a" * 300, 10) == "a" * 9 + "…"
