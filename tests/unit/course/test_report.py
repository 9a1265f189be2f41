"""Tests of `perflab.course.report`."""

from __future__ import annotations

import json
import math
import re

import pytest

from perflab.cli import main
from perflab.core.errors import InputError
from perflab.core.jsonable import to_json
from perflab.course import report as R


@pytest.fixture
def results(tmp_path, monkeypatch):
    """Each test resumes only from its own results folder."""
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path / "results"))
    return tmp_path


def run_json(capsys, *argv) -> tuple[int, dict]:
    rc = main(["report", *argv, "--json"])
    cap = capsys.readouterr()
    run_json.err = cap.err  # the progress lines
    return rc, json.loads(cap.out)


def _hand_built(path, name, matmul, wait_ms, extra=None, quick=False):
    parts = {
        "matmul": {"title": "Matmul", "status": "ok", "figures": [
            R.figure("matmul.fp32", "matmul fp32", matmul, "TFLOP/s")]},
        "dataloader": {"title": "DataLoader", "status": "ok", "figures": [
            R.figure("dataloader.wait.2w", "data wait, 2 workers", wait_ms, "ms", "lower")]},
        "numa": {"title": "NUMA", "status": "ok", "figures": [R.figure("numa.nodes", "NUMA nodes", 2, "", None)]},
    }
    if extra:
        parts["memory"] = {"title": "Memory", "status": "ok", "figures": [R.figure(*extra)]}
    doc = {"perflab_report": 1, "host": name, "device": {"kind": "cuda", "name": name}, "quick": quick, "parts": parts}
    path.write_text(json.dumps(to_json(doc)))
    return path


def test_json_gets_null_for_what_is_not_finite():
    assert R.clean({"a": [1.0, float("inf")], 2: (math.nan,)}) == {"a": [1.0, None], "2": [None]}


def test_figures_are_found_by_key_in_a_report_or_in_its_json():
    fig = R.figure("numa.nodes", "NUMA nodes", 1, "", None)
    doc = R.Report(parts={"numa": R.PartEntry("NUMA", "ok", figures=[fig]),
                          "matmul": R.PartEntry("Matmul", "failed", reason="error: no BLAS")})
    assert R.figures_of(doc) == R.figures_of(json.loads(json.dumps(doc.to_json()))) == {"numa.nodes": fig}


def test_a_report_file_that_is_not_json_is_refused_in_one_line(tmp_path):
    from perflab.course import report as R

    (tmp_path / "report.json").write_text("{broken")
    with pytest.raises(InputError, match=r"report\.json: not JSON \(Expecting property name enclosed in double quotes"):
        R.load_report(tmp_path / "report.json")


def test_parts_are_chosen_by_name_and_a_wrong_name_is_one_line(capsys):
    assert R.select_parts(only=["numa,device"]) == ["device", "numa"]  # report order, commas allowed
    assert R.select_parts(skip=["collectives", "mamf"]) == [p for p in R.PARTS if p not in ("collectives", "mamf")]
    with pytest.raises(InputError, match="unknown part 'gpuz'"):
        R.select_parts(only=["gpuz"])
    with pytest.raises(InputError, match="no part"):
        R.select_parts(only=["numa"], skip=["numa"])
    assert main(["report", "--only", "gpuz"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown part 'gpuz'" in err and "Traceback" not in err


def test_cheap_parts_measure_real_figures_and_write_a_standalone_page(results, capsys):
    out = results / "out"
    rc, doc = run_json(capsys, "--quick", "--only", "device", "matmul", "memory", "numa", "--out", str(out))
    assert rc == 0 and doc["failed"] == []
    assert list(doc["parts"]) == ["device", "matmul", "memory", "numa"]
    figs = R.figures_of(doc)
    value = {k: f.value or 0 for k, f in figs.items()}  # None (not measured) fails as 0 would
    assert value["matmul.fp32"] > 0 and figs["matmul.fp32"].unit == "TFLOP/s"
    assert value["copy.largest"] > 0 and figs["copy.largest"].unit == "GB/s"
    assert value["numa.nodes"] >= 1 and value["numa.cpus"] >= value["numa.affinity"] >= 1
    dev = doc["parts"]["device"]["data"]
    assert "fp32" in dev["supported_dtypes"] and dev["device"]["name"] == doc["device"]["name"]
    if dev["device"]["kind"] == "cpu":
        note = doc["parts"]["memory"]["notes"]
        assert any("host→device: not measured" in n for n in note)  # said, not silently missing
    # the files: the JSON as printed, the page with one embedded figure per measured part that draws one
    saved = json.loads((out / "report.json").read_text())
    assert saved["parts"].keys() == doc["parts"].keys()
    page = (out / "report.html").read_text()
    imgs = re.findall(r"<img [^>]*src='([^']*)'", page)
    assert len(imgs) == 3 and all(s.startswith("data:image/png;base64,") and len(s) > 2000 for s in imgs)
    assert not re.search(r"(src|href)=['\"]https?:", page)  # nothing fetched from the network
    assert "figure not drawn" not in page and "table not drawn" not in page
    assert doc["device"]["name"] in page
    assert "[1/4] device" in run_json.err and "[4/4] numa" in run_json.err  # progress, on stderr


def test_a_failing_part_is_recorded_the_rest_go_on_and_a_rerun_resumes(results, capsys, monkeypatch):
    real = R.PARTS["numa"]

    def broken(ctx):
        raise RuntimeError("cannot read /sys/devices/system/node")

    monkeypatch.setitem(R.PARTS, "numa", (real[0], broken))
    rc = main(["report", "--quick", "--only", "numa", "device", "--out", str(results / "a")])
    err = capsys.readouterr().err
    assert rc == 1
    assert "[1/2] device" in err and "[2/2] numa" in err and "FAILED" in err
    doc = json.loads((results / "a" / "report.json").read_text())
    assert doc["failed"] == ["numa"]
    assert doc["parts"]["numa"]["status"] == "failed"
    assert "cannot read /sys/devices/system/node" in doc["parts"]["numa"]["reason"]
    assert doc["parts"]["device"]["status"] == "ok" and doc["parts"]["device"]["figures"]
    assert "This part failed and the others went on" in (results / "a" / "report.html").read_text()

    # fixed: the failed part is measured again, the one that worked is read back, not re-measured
    monkeypatch.setitem(R.PARTS, "numa", real)
    rc, doc2 = run_json(capsys, "--quick", "--only", "numa", "device", "--out", str(results / "b"))
    assert rc == 0 and doc2["failed"] == []
    assert doc2["parts"]["device"]["resumed"] is True
    assert doc2["parts"]["device"]["measured"] == doc["parts"]["device"]["measured"]
    assert doc2["parts"]["numa"]["resumed"] is False and doc2["parts"]["numa"]["status"] == "ok"
    assert "1 taken from an earlier run" in run_json.err and "--fresh" in run_json.err  # says so, and how to redo it
    assert "device" in run_json.err and "served from results saved 20" in run_json.err  # with the date it was measured
    # --fresh measures again
    rc, doc3 = run_json(capsys, "--quick", "--only", "device", "--fresh", "--out", str(results / "c"))
    assert rc == 0 and doc3["parts"]["device"]["resumed"] is False


def test_compare_puts_two_machines_side_by_side_with_ratios(tmp_path, capsys):
    a = _hand_built(tmp_path / "a.json", "box-a", 100.0, 8.0, extra=("h2d.pinned", "host→device pinned", 25.0, "GB/s"))
    b = _hand_built(tmp_path / "b.json", "box-b", 250.0, 2.0)
    rows = {r.key: r for r in R.compare(R.load_report(a), R.load_report(b))}
    assert rows["matmul.fp32"].ratio == pytest.approx(2.5) and rows["matmul.fp32"].b_better is True
    assert rows["dataloader.wait.2w"].ratio == pytest.approx(0.25)
    assert rows["dataloader.wait.2w"].b_better is True  # a shorter wait is better
    assert rows["numa.nodes"].ratio == 1 and rows["numa.nodes"].b_better is None  # a fact, not a score
    assert rows["h2d.pinned"].b is None and rows["h2d.pinned"].ratio is None  # only a measured it
    assert rows["h2d.pinned"].part == "memory" and rows["matmul.fp32"].part == "matmul"

    def one(value):
        return R.Report(parts={"m": R.PartEntry("m", "ok", figures=[R.figure("x", "x", value, "GB/s")])})

    (near,) = R.compare(one(100.0), one(103.0))
    assert near.ratio == pytest.approx(1.03) and near.b_better is None  # within noise: no verdict
    # the same through the command line, as JSON and as a table
    assert main(["report", "--compare", str(a), str(b), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["key"] for r in out["rows"]] == ["matmul.fp32", "dataloader.wait.2w", "numa.nodes", "h2d.pinned"]
    assert out["a"]["device"]["name"] == "box-a" and out["b"]["host"] == "box-b"
    assert main(["report", "--compare", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("matmul fp32"))
    assert "100" in line and "250" in line and "2.5×" in line and "b better" in line


def test_compare_refuses_what_is_not_a_report(tmp_path, capsys):
    good = _hand_built(tmp_path / "a.json", "box-a", 1.0, 1.0)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rows": []}))
    assert main(["report", "--compare", str(good), str(bad)]) == 2
    assert "not a report" in capsys.readouterr().err
    assert main(["report", "--compare", str(good), str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["report", "--compare", str(good), str(good), "--quick"]) == 2
