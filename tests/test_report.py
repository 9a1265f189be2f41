"""`perflab report`: parts measured into report.json + a standalone report.html, a failing part
recorded while the others go on, a re-run resuming, and two reports compared figure by figure.

The measuring tests run the cheap parts in quick mode (seconds); the whole `--quick` report
(under a minute on a 2-core CPU) is left to the command line.
"""

from __future__ import annotations

import json
import re

import pytest

from perflab.cli import main
from perflab.core.errors import InputError
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
    assert figs["matmul.fp32"]["value"] > 0 and figs["matmul.fp32"]["unit"] == "TFLOP/s"
    assert figs["copy.largest"]["value"] > 0 and figs["copy.largest"]["unit"] == "GB/s"
    assert figs["numa.nodes"]["value"] >= 1 and figs["numa.cpus"]["value"] >= figs["numa.affinity"]["value"] >= 1
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
    # --fresh measures again
    rc, doc3 = run_json(capsys, "--quick", "--only", "device", "--fresh", "--out", str(results / "c"))
    assert rc == 0 and doc3["parts"]["device"]["resumed"] is False


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
    path.write_text(json.dumps(doc))
    return path


def test_compare_puts_two_machines_side_by_side_with_ratios(tmp_path, capsys):
    a = _hand_built(tmp_path / "a.json", "box-a", 100.0, 8.0, extra=("h2d.pinned", "host→device pinned", 25.0, "GB/s"))
    b = _hand_built(tmp_path / "b.json", "box-b", 250.0, 2.0)
    rows = {r["key"]: r for r in R.compare(R.load_report(a), R.load_report(b))}
    assert rows["matmul.fp32"]["ratio"] == pytest.approx(2.5) and rows["matmul.fp32"]["b_better"] is True
    assert rows["dataloader.wait.2w"]["ratio"] == pytest.approx(0.25)
    assert rows["dataloader.wait.2w"]["b_better"] is True  # a shorter wait is better
    assert rows["numa.nodes"]["ratio"] == 1 and rows["numa.nodes"]["b_better"] is None  # a fact, not a score
    assert rows["h2d.pinned"]["b"] is None and rows["h2d.pinned"]["ratio"] is None  # only a measured it
    near = R.compare({"parts": {"m": {"figures": [R.figure("x", "x", 100.0, "GB/s")]}}},
                     {"parts": {"m": {"figures": [R.figure("x", "x", 103.0, "GB/s")]}}})[0]
    assert near["ratio"] == pytest.approx(1.03) and near["b_better"] is None  # within noise: no verdict
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


def test_the_page_draws_the_gpu_only_figures_from_a_reports_data():
    """The GPU branches of the page (host→device bars, the wave model and its cliffs, NCCL rows)
    drawn from a hand-built report's data: a CPU run never reaches them."""
    from perflab.course.report_html import render

    ok = {"status": "ok", "summary": "", "notes": [], "wall_s": 1.0, "measured": "2026-01-01T00:00:00"}
    ns = list(range(256, 4097, 256))
    parts = {
        "memory": {**ok, "title": "Memory", "figures": [R.figure("h2d.pinned", "host→device pinned", 25.0, "GB/s")],
                   "data": {"copy": [{"nbytes": 2**20 * s, "gbps": 100.0 * s, "spec_gbps": 3350.0} for s in (1, 16, 256)],
                            "h2d": [{"kind": "pinned", "nbytes": 2**26, "gbps": 25.0},
                                    {"kind": "pageable", "nbytes": 2**26, "gbps": 9.0}]}},
        "waves": {**ok, "title": "Waves", "figures": [],
                  "data": {"dim": "n", "fixed": {"m": 2304, "k": 4096}, "dtype": "bf16",
                           "rows": [{"n": n, "tflops": 100.0 + n / 100, "median_s": 1e-4} for n in ns],
                           "model": {"sms": 132, "tile": "256x128", "predicted_tflops": [120.0] * len(ns),
                                     "cliffs": [1664, 3328]}}},
        "collectives": {**ok, "title": "Collectives", "figures": [],
                        "data": {"op": "all_reduce", "nproc": 8, "backend": "nccl", "factor": 1.75,
                                 "rows": [{"bytes": 2**20 * s, "seconds": 1e-4 * s, "algbw_gbps": 10.0 * s,
                                           "busbw_gbps": 17.5 * s} for s in (1, 16)]}},
        "mamf": {**ok, "title": "MAMF", "figures": [],
                 "data": {"dtype": "bf16", "best": {"m": 4096, "n": 4096, "k": 4096, "tflops": 700.0}, "evaluated": 3,
                          "grid_points": 64, "peak_tflops": 989.0, "stored_ceiling": 720.0,
                          "points": [{"m": 2048 * i, "n": 4096, "k": 4096, "tflops": 600.0 + i} for i in (1, 2, 3)]}},
        "dataloader": {**ok, "title": "DataLoader", "figures": [],
                       "data": {"io_ms": 5.0, "compute_ms": 20.0, "cores": 16, "rows": [
                           {"workers": w, "step_s": 0.02, "data_wait_s": 0.01 / (w + 1), "wait_fraction": 0.5 / (w + 1),
                            "predicted_wait_s": 0.01 / (w + 1), "first_wait_s": 0.05} for w in (0, 1, 2)]}},
    }
    page = render({"device": {"name": "a GPU"}, "host": "box", "parts": parts})
    assert "figure not drawn" not in page and "table not drawn" not in page
    assert page.count("data:image/png;base64,") == len(parts)
