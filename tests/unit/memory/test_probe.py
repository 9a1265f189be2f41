"""Tests of `perflab.memory.probe`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from perflab.core.errors import InputError
from perflab.memory import probe
from perflab.workload.models import preset

from .helpers import _gpu_report


def test_compare_shows_reserved_and_nvml_columns_for_gpu_rows():
    df = _gpu_report().compare()
    assert df["reserved (MiB)"].iloc[0] == 101 + 8 and df["NVML used (MiB)"].iloc[0] == 900
    assert "RSS (MiB)" not in df.columns and df["peak gap"].abs().max() == 0


def test_per_phase_counts_allocations_made_before_the_phase_as_its_start():
    tr = object.__new__(probe._CPUAllocations)  # its events, without starting a profiler
    tr.events = [(1, 100), (2, 50), (5, 30), (6, -20), (9, 7)]
    tr.ranges = [(4, 7, "perflab-phase:forward#1")]
    assert tr.per_phase() == [{"mark": "forward#1", "start_bytes": 150, "allocated_bytes": 160, "peak_bytes": 180}]


def test_nothing_saved_gives_an_empty_table():
    assert probe.SavedTensors(0, []).by_shape().empty


def test_tracemalloc_does_not_see_tensors():
    rep = probe.measure_step_phases(preset("tiny-gpt"), batch=4, device="cpu", iterations=1)
    fwd = next(r for r in rep.rows if r["phase"] == "forward")
    # tens of MB of activations, but Python's own heap moves by far less
    assert fwd["python_heap_peak_bytes"] < 0.05 * (fwd["peak_bytes"] - fwd["start_bytes"])
    assert rep.meta["loss"] > 0 and [r["phase"] for r in rep.rows] == ["build", "forward", "backward", "optimizer step",
                                                                         "zero_grad"]


def test_measure_bad_inputs():
    with pytest.raises(InputError, match="optimizers"):
        probe.measure_step_phases(preset("tiny-gpt"), batch=1, optimizer="lion", device="cpu")
    with pytest.raises(InputError, match="≥ 1"):
        probe.measure_step_phases(preset("tiny-gpt"), batch=0, device="cpu")
    with pytest.raises(InputError, match="precisions"):
        probe.measure_step_phases(preset("tiny-gpt"), batch=1, dtype="fp8", device="cpu")
    with pytest.raises(InputError, match="GiB"):
        probe.measure_step_phases(preset("gpt3-175b"), batch=64, device="cpu")


def test_a_cpu_measurement_keeps_the_profilers_lines_off_stderr_and_the_rest_on_it():
    code = ("import os, torch\nfrom perflab.memory.probe import allocated_during\nx = torch.ones(1000, 1000)\n"
            "def fn():\n    global x\n    x = None\n    os.write(2, b'kept line\\n')\n    return torch.ones(8)\n"
            "print(allocated_during(fn, 'cpu'))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert r.returncode == 0, r.stderr
    assert r.stderr == "kept line\n"  # no USDT line, no note about the block freed that predates the profiler
    assert "'kept_bytes': 32" in r.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_phases_on_gpu(dtype):
    """Ends within 3% (block rounding, cuBLAS workspaces); peaks within 15% (library workspaces and
    attention kernels' temporaries the model does not name)."""
    rep = probe.measure_step_phases(preset("small-gpt"), batch=4, dtype=dtype, device="cuda")
    for r, p in zip(rep.rows, rep.predicted):
        assert r["allocated_bytes"] == pytest.approx(p.end_bytes, rel=0.03), (r["phase"], r["iteration"])
        assert r["peak_bytes"] == pytest.approx(p.peak_bytes, rel=0.15), (r["phase"], r["iteration"])
        assert r["reserved_bytes"] >= r["allocated_bytes"]
        assert r["driver_used_bytes"] >= r["reserved_bytes"]


def test_a_gpu_report_reads_as_a_person_reads_it():
    rep = _gpu_report()
    assert rep.on_gpu and rep.steady_peak_bytes == rep.peak_bytes
    t = rep.compare_table()
    assert t["peak gap"].iloc[0] == "0 %" and t["reserved (MiB)"].iloc[0] == "109.0"
    a = rep.agreement()
    assert (a.device_kind, a.tolerance_end, a.tolerance_peak) == ("cuda", 0.03, 0.15) and a.holds
    assert a.text() == ("worst gap at a phase boundary: 0 % (tolerance 3.00 %); worst peak gap: 0 % (tolerance 15.0 %): "
                        "within both")
    out = rep.outside_table()
    assert list(out.columns) == ["phase", "allocated (MiB)", "peak (MiB)", "reserved (MiB)", "NVML used (MiB)",
                                 "driver used (MiB)"]
    assert out["NVML used (MiB)"].iloc[0] == "900.0" and out["driver used (MiB)"].iloc[0] == "–"
    rep.meta["library_workspace_bytes"] = 8 * 2**20
    assert rep.workspace_text() == "cuBLAS/cuBLASLt workspaces newly kept by the warm-up before the first phase: 8 MiB"
    rep.meta["library_workspace_bytes"] = 0
    assert "an earlier matmul in this process already took them" in (rep.workspace_text() or "")


def test_a_peak_off_its_prediction_is_named_outside_the_tolerance():
    rep = _gpu_report()
    rep.rows[5]["peak_bytes"] = int(rep.predicted[5].peak_bytes * 1.2)  # the second forward peaks 20 % higher
    a = rep.agreement()
    assert not a.holds and a.worst_peak == pytest.approx(0.2, rel=1e-6) and "outside the tolerance" in a.text()
    assert rep.steady_peak_bytes == max(r["peak_bytes"] for r in rep.rows if r["iteration"] == 2)


def test_a_cpu_step_is_exact_at_phase_boundaries_and_says_what_lies_outside_the_allocator():
    rep = probe.measure_step_phases(preset("tiny-gpt"), batch=2, device="cpu")  # lesson 03's smoke step
    assert not rep.on_gpu and rep.workspace_text() is None
    a = rep.agreement()
    assert a.device_kind == "cpu" and a.worst_end == 0 and a.holds, a.text()
    out = rep.outside_table()
    assert list(out.columns) == ["phase", "Δ allocated (MiB)", "Δ RSS (MiB)", "peak above start (MiB)",
                                 "Python heap peak above start, tracemalloc (MiB)"]
    assert list(out["phase"])[:2] == ["build 0", "forward 1"]
    last = max(r["iteration"] for r in rep.rows)
    assert rep.steady_peak_bytes == max(r["peak_bytes"] for r in rep.rows if r["iteration"] == last)
