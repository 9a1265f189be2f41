"""Tests of `perflab.course.report`."""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import pytest
import torch

from perflab.cli import main
from perflab.core.device import DeviceInfo, describe
from perflab.core.errors import InputError
from perflab.core.readout import NOISY_SPREAD
from perflab.course import report as R


# ----------------------------------------------------------------------------- the report
def _cpu_ctx(quick: bool):
    import torch

    from perflab.core.device import DeviceInfo
    from perflab.course import report as R

    return R.Ctx(torch.device("cpu"), DeviceInfo("cpu", "test cpu"), quick)


CPU = torch.device("cpu")


def _ctx(quick: bool, info=None) -> R.Ctx:
    return R.Ctx(CPU, info if info is not None else DeviceInfo("cpu", "test cpu"), quick)


# ----------------------------------------------------------------------------- report: waves
def _fake_sweep(monkeypatch, seen, time_of=None):
    from perflab.gemm import shapes

    def sweep(dim, values, fixed, dtype, device, **kw):
        seen.append((dim, list(values), dict(fixed), dtype))
        rows = []
        for n in values:
            if time_of is None:
                rows.append({"params": {"n": n}, "status": "failed", "reason": "RuntimeError: no kernel"})
                continue
            t = time_of(n, fixed)
            rows.append({"params": {"n": n}, "status": "ok", "median_s": t,
                         "tflops": 2 * fixed["m"] * n * fixed["k"] / t / 1e12})
        return SimpleNamespace(rows=rows, failed=sum(r["status"] != "ok" for r in rows))

    monkeypatch.setattr(shapes, "sweep_dimension", sweep)


def _ctx_report(quick):
    import torch


    return R.Ctx(torch.device("cpu"), describe("cpu"), quick)


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
    path.write_text(json.dumps(doc))
    return path


def test_full_size_runs_pick_the_gpu_size_only_on_a_gpu():
    import torch

    from perflab.course import report as R

    assert _cpu_ctx(quick=False).pick(quick=1, cpu=2, gpu=3) == 2
    gpu = R.Ctx(torch.device("cuda"), None, quick=False)
    assert gpu.pick(quick=1, cpu=2, gpu=3) == 3 and gpu.pick(quick=1, cpu=2) == 2


def test_a_figure_that_is_not_finite_has_no_value_and_json_gets_null():
    from perflab.course import report as R

    assert R.figure("k", "label", float("nan"), "GB/s")["value"] is None
    assert R.figure("k", "label", float("inf"), "GB/s")["value"] is None
    assert R.clean({"a": [1.0, float("inf")], 2: (math.nan,)}) == {"a": [1.0, None], "2": [None]}


def test_the_collectives_part_fails_when_no_size_was_measured(monkeypatch):
    from perflab.course import report as R
    from perflab.distributed import busbw

    run = SimpleNamespace(backend="gloo", rows=[{"bytes": 65536, "status": "failed", "reason": "timeout"}],
                          report=lambda: "all_reduce gloo × 2: 0 of 1 sizes measured")
    monkeypatch.setattr(busbw, "measure", lambda *a, **kw: run)
    with pytest.raises(RuntimeError, match=r"^all_reduce measured no size: all_reduce gloo × 2: 0 of 1 sizes"):
        R.part_collectives(_cpu_ctx(quick=True))


def test_the_dataloader_part_notes_failed_worker_counts_and_fails_without_any(monkeypatch):
    from perflab.course import report as R
    from perflab.dataloading import compute, loader

    ok = {"status": "ok", "params": {"workers": 0}, "step_s": 0.02, "data_wait_s": 0.004, "wait_fraction": 0.2,
          "predicted_wait_s": 0.004, "first_wait_s": 0.01}
    bad = [{"status": "failed", "params": {"workers": w}, "reason": "worker died"} for w in (1, 2)]
    rows = [ok, *bad]
    monkeypatch.setattr(compute, "calibrate", lambda *a, **kw: "step")
    monkeypatch.setattr(loader, "sweep_workers", lambda workers, **kw: SimpleNamespace(rows=rows))
    out = R.part_dataloader(_cpu_ctx(quick=True))
    assert out["notes"] == ["1 workers: worker died", "2 workers: worker died"]
    assert [r["workers"] for r in out["data"]["rows"]] == [0]
    rows = bad
    with pytest.raises(RuntimeError, match=r"^no worker count could be measured: 1 workers: worker died; 2 workers"):
        R.part_dataloader(_cpu_ctx(quick=True))


def test_a_report_file_that_is_not_json_is_refused_in_one_line(tmp_path):
    from perflab.course import report as R

    (tmp_path / "report.json").write_text("{broken")
    with pytest.raises(InputError, match=r"report\.json: not JSON \(Expecting property name enclosed in double quotes"):
        R.load_report(tmp_path / "report.json")


def test_a_matmul_whose_spread_passes_the_noise_threshold_gets_a_noisy_note(monkeypatch):
    """Whether a real timing is noisy depends on the machine's load at that moment, so the note's
    line is run here with a made-up spread rather than left to chance."""
    from perflab.core import measure as M

    def matmul(m, n, k, dtype, device, *, rep_ms, warmup_ms):
        spread = 0.5 if dtype == "fp32" else NOISY_SPREAD / 2
        return SimpleNamespace(tflops=0.1, median_s=2e-3, spread=spread, peak_tflops=None, peak_fraction=None,
                               rel_error=1e-6)

    monkeypatch.setattr(M, "measure_matmul", matmul)
    out = R.part_matmul(_ctx(quick=True))
    noisy = [n for n in out["notes"] if n.startswith("fp32: noisy: ")]
    assert len(noisy) == 1 and "measure again before trusting it" in noisy[0]
    assert all(not n.startswith(("bf16", "fp16")) for n in out["notes"])  # their spreads are under the threshold
    assert [r["spread"] for r in out["data"]["rows"] if r["dtype"] == "fp32"] == [0.5]


def test_the_wave_part_fails_when_no_point_of_the_sweep_is_measured(monkeypatch):
    seen = []
    _fake_sweep(monkeypatch, seen)
    with pytest.raises(RuntimeError, match="^no point of the wave sweep could be measured$"):
        R.part_waves(_ctx(quick=True))
    assert seen == [("n", list(range(64, 513, 64)), {"m": 256, "k": 256}, "fp32")]


def test_the_full_numa_part_says_why_local_vs_remote_is_not_measured_on_one_node():
    from perflab.numa.topology import read_topology

    out = R.part_numa(_ctx_report(quick=False))
    nodes_with_cpus = [n for n in read_topology().nodes if n.cpus]
    if len(nodes_with_cpus) < 2:
        assert any(n.startswith("local vs remote memory: this machine has 1 NUMA node") for n in out["notes"])
    else:
        assert "local_vs_remote" in out["data"] or any("numactl" in n for n in out["notes"])


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
    assert "device" in run_json.err and "served from results saved 20" in run_json.err  # with the date it was measured
    # --fresh measures again
    rc, doc3 = run_json(capsys, "--quick", "--only", "device", "--fresh", "--out", str(results / "c"))
    assert rc == 0 and doc3["parts"]["device"]["resumed"] is False


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


def test_the_report_part_summarises_the_ladder(monkeypatch, tmp_path):
    from perflab.course import report as R

    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    monkeypatch.setattr(R, "QUICK_TUNE_RUNGS", "baseline,numa")
    assert "tune" in R.select_parts()
    out = R.part_tune(R.Ctx(CPU, describe(CPU), quick=True))
    figs = {f["key"]: f for f in out["figures"]}
    assert figs["tune.speedup"]["value"] > 0 and figs["tune.baseline_tokens_per_s"]["unit"] == "tokens/s"
    assert [r["rung"] for r in out["data"]["rows"]] == ["baseline", "numa"] and "smoke preset" in out["summary"]
