"""Tests of `perflab.course.report_parts`: each part of `perflab report` on its own (measurements
faked where the test is about the part's logic), and the figures it returns."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from perflab.core.device import DeviceInfo, describe
from perflab.core.readout import NOISY_SPREAD
from perflab.course import report_parts as R

CPU = torch.device("cpu")


def _cpu_ctx(quick: bool) -> R.Ctx:
    return R.Ctx(CPU, DeviceInfo("cpu", "test cpu"), quick)


_ctx = _cpu_ctx


def _ctx_report(quick: bool) -> R.Ctx:
    return R.Ctx(CPU, describe("cpu"), quick)


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


def test_full_size_runs_pick_the_gpu_size_only_on_a_gpu():
    assert _cpu_ctx(quick=False).pick(quick=1, cpu=2, gpu=3) == 2
    gpu = R.Ctx(torch.device("cuda"), None, quick=False)
    assert gpu.pick(quick=1, cpu=2, gpu=3) == 3 and gpu.pick(quick=1, cpu=2) == 2


def test_the_collectives_part_fails_when_no_size_was_measured(monkeypatch):
    from perflab.distributed import busbw

    run = SimpleNamespace(backend="gloo", rows=[{"bytes": 65536, "status": "failed", "reason": "timeout"}],
                          report=lambda: "all_reduce gloo × 2: 0 of 1 sizes measured")
    monkeypatch.setattr(busbw, "measure", lambda *a, **kw: run)
    with pytest.raises(RuntimeError, match=r"^all_reduce measured no size: all_reduce gloo × 2: 0 of 1 sizes"):
        R.part_collectives(_cpu_ctx(quick=True))


def test_the_dataloader_part_notes_failed_worker_counts_and_fails_without_any(monkeypatch):
    from perflab.dataloading import compute, loader

    ok = {"status": "ok", "params": {"workers": 0}, "step_s": 0.02, "data_wait_s": 0.004, "wait_fraction": 0.2,
          "predicted_wait_s": 0.004, "first_wait_s": 0.01}
    bad = [{"status": "failed", "params": {"workers": w}, "reason": "worker died"} for w in (1, 2)]
    rows = [ok, *bad]
    monkeypatch.setattr(compute, "calibrate", lambda *a, **kw: "step")
    monkeypatch.setattr(loader, "sweep_workers", lambda workers, **kw: SimpleNamespace(rows=rows))
    out = R.part_dataloader(_cpu_ctx(quick=True))
    assert out.notes == ["1 workers: worker died", "2 workers: worker died"]
    assert [r["workers"] for r in out.data["rows"]] == [0]
    rows = bad
    with pytest.raises(RuntimeError, match=r"^no worker count could be measured: 1 workers: worker died; 2 workers"):
        R.part_dataloader(_cpu_ctx(quick=True))


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
    noisy = [n for n in out.notes if n.startswith("fp32: noisy: ")]
    assert len(noisy) == 1 and "measure again before trusting it" in noisy[0]
    assert all(not n.startswith(("bf16", "fp16")) for n in out.notes)  # their spreads are under the threshold
    assert [r["spread"] for r in out.data["rows"] if r["dtype"] == "fp32"] == [0.5]


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
        assert any(n.startswith("local vs remote memory: this machine has 1 NUMA node") for n in out.notes)
    else:
        assert "local_vs_remote" in out.data or any("numactl" in n for n in out.notes)


def test_the_report_part_summarises_the_ladder(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    monkeypatch.setattr(R, "QUICK_TUNE_RUNGS", "baseline,numa")
    out = R.part_tune(R.Ctx(CPU, describe(CPU), quick=True))
    figs = {f.key: f for f in out.figures}
    assert (figs["tune.speedup"].value or 0) > 0 and figs["tune.baseline_tokens_per_s"].unit == "tokens/s"
    assert [r["rung"] for r in out.data["rows"]] == ["baseline", "numa"] and "smoke preset" in out.summary
