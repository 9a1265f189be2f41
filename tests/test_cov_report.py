"""`perflab report --quick` parts the cheap-parts test leaves out: the wave sweep, the MAMF search
and the DataLoader sweep, each with real figures and units."""

from __future__ import annotations

import json

import pytest

from perflab.cli import main
from perflab.course import report as R


def test_wave_mamf_and_dataloader_parts_measure_real_figures(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path / "results"))
    rc = main(["report", "--quick", "--only", "waves", "mamf", "dataloader", "--out", str(tmp_path / "out"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["failed"] == [], doc["failed"]
    figs = R.figures_of(doc)
    dtype = "bf16" if doc["device"]["kind"] == "cuda" else "fp32"
    assert figs[f"mamf.{dtype}"]["value"] > 0 and figs[f"mamf.{dtype}"]["unit"] == "TFLOP/s"
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


def _ctx(quick):
    import torch

    from perflab.core.device import describe

    return R.Ctx(torch.device("cpu"), describe("cpu"), quick)


def test_one_dtype_failing_does_not_lose_the_others(monkeypatch):
    import perflab.core.measure as M

    real = M.measure_matmul

    def flaky(m, n, k, dtype, *a, **kw):
        if dtype != "fp32":
            raise RuntimeError(f"{dtype} kernel missing\nsecond line of a traceback")
        return real(m, n, k, dtype, *a, **kw)

    monkeypatch.setattr(M, "measure_matmul", flaky)
    out = R.part_matmul(_ctx(quick=True))
    assert [r["dtype"] for r in out["data"]["rows"]] == ["fp32"]
    assert "bf16: RuntimeError: bf16 kernel missing" in out["notes"]  # one line each, the traceback's tail dropped
    monkeypatch.setattr(M, "measure_matmul", lambda *a, **kw: (_ for _ in ()).throw(RuntimeError("no BLAS")))
    with pytest.raises(RuntimeError, match="no dtype could be measured: fp32: RuntimeError: no BLAS; bf16: "):
        R.part_matmul(_ctx(quick=True))


def test_the_full_numa_part_says_why_local_vs_remote_is_not_measured_on_one_node():
    from perflab.numa.topology import read_topology

    out = R.part_numa(_ctx(quick=False))
    nodes_with_cpus = [n for n in read_topology().nodes if n.cpus]
    if len(nodes_with_cpus) < 2:
        assert any(n.startswith("local vs remote memory: this machine has 1 NUMA node") for n in out["notes"])
    else:
        assert "local_vs_remote" in out["data"] or any("numactl" in n for n in out["notes"])
