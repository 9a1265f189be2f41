"""The `perflab report` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

import json

from clirun import perflab

from perflab.cli import main
from perflab.course import report as R


def test_report_interrupted_keeps_what_it_wrote_and_exits_130(monkeypatch, tmp_path):
    from perflab.course import report as R

    def stop(ctx):
        raise KeyboardInterrupt  # the person presses Ctrl-C during the part

    monkeypatch.setitem(R.PARTS, "numa", ("NUMA topology", stop))
    r = perflab("report", "--only", "numa", "--out", str(tmp_path), env={"PERFLAB_RESULTS": str(tmp_path / "res")})
    assert r.returncode == 130, r.stderr
    assert "interrupted: what was measured is kept in" in r.stderr
    assert r.stdout.strip().splitlines()[-1] == f"wrote {tmp_path / 'report.json'} and {tmp_path / 'report.html'}"


def test_wave_mamf_and_dataloader_parts_measure_real_figures(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path / "results"))
    rc = main(["report", "--quick", "--only", "waves", "mamf", "dataloader", "--out", str(tmp_path / "out"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["failed"] == [], doc["failed"]
    figs = R.figures_of(doc)
    dtype = "bf16" if doc["device"]["kind"] == "cuda" else "fp32"
    assert (figs[f"mamf.{dtype}"].value or 0) > 0 and figs[f"mamf.{dtype}"].unit == "TFLOP/s"
    waves = doc["parts"]["waves"]["data"]
    assert waves["dim"] == "n" and len(waves["rows"]) >= 3 and all(r["tflops"] > 0 for r in waves["rows"])
    if doc["device"]["kind"] == "cpu":  # no SMs: the wave model is not drawn, and the part says why
        assert any("a CPU has no SMs" in n for n in doc["parts"]["waves"]["notes"])
    dl = doc["parts"]["dataloader"]["data"]
    assert [r["workers"] for r in dl["rows"]] == [0, 1, 2]
    assert all(r["step_s"] > 0 and 0 <= r["wait_fraction"] <= 1 for r in dl["rows"])


def test_collectives_part_measures_an_all_reduce_and_says_what_it_measures(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path / "results"))
    rc = main(["report", "--quick", "--only", "collectives", "--out", str(tmp_path / "out"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["failed"] == [], doc["failed"]
    part = doc["parts"]["collectives"]
    data = part["data"]
    assert data["op"] == "all_reduce" and data["nproc"] >= 2 and [r["bytes"] for r in data["rows"]] == [2**16, 2**20]
    assert data["factor"] == 2 * (data["nproc"] - 1) / data["nproc"]  # nccl-tests' bus factor for all-reduce
    (fig,) = part["figures"]
    assert fig["unit"] == "GB/s" and fig["value"] == max(r["busbw_gbps"] for r in data["rows"]) > 0
    if doc["device"]["kind"] == "cpu":
        assert any("not of a network or NVLink" in n for n in part["notes"])
