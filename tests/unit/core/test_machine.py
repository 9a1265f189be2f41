"""Tests of `perflab.core.machine`: lesson 00's readings, typed, each with the machine's quietness."""

from __future__ import annotations

import pytest

from perflab.core import machine
from perflab.core.quietness import MadeUpLoad, Quietness, injected

QUIET = Quietness("quiet", 0.0, 1.0, 2, 0.0, 2, "")
BUSY = Quietness("disturbed", 0.6, 1.0, 2, 1.2, 2, "other programs used 60 % of 2 cores")
MIB = 2**20


def test_the_spec_table_has_units_in_its_columns_and_says_what_no_datasheet_gives():
    t = machine.spec_table()
    assert list(t.columns) == ["accelerator", "fp32 (TFLOP/s)", "tf32 (TFLOP/s)", "bf16 dense (TFLOP/s)",
                               "bf16 as printed, sparse (TFLOP/s)", "fp8 dense (TFLOP/s)", "memory (GB)",
                               "bandwidth (GB/s)", "SMs", "ridge bf16 (FLOP/byte)"]
    h100 = t[t["accelerator"].str.contains("H100 SXM")].iloc[0]
    assert h100["bf16 dense (TFLOP/s)"] == "989.4" and h100["bf16 as printed, sparse (TFLOP/s)"] == "1,979"
    assert h100["ridge bf16 (FLOP/byte)"] == "295"  # 989.4e12 / 3.35e12, to the digits the datasheets give
    v100 = t[t["accelerator"].str.contains("V100")].iloc[0]
    assert v100["bf16 dense (TFLOP/s)"] == "not on the datasheet"
    assert not t.isna().any().any()


def _mm(points):
    return machine.DtypeMatmuls(1024, tuple(points), "estimate")


def test_the_matmul_table_reads_in_units_and_marks_a_busy_row():
    mm = _mm([machine.MatmulPoint("fp32", 1024, 8.47e-3, 0.2535, 0.3328, 2.0e-7, QUIET),
              machine.MatmulPoint("bf16", 1024, 2.48e-7 * 1e4, 0.866, 5.3248, 1.7e-3, BUSY),
              machine.MatmulPoint("fp16", 1024, 0.5, 0.0043, None, 2.1e-4, QUIET)])
    t = mm.table()
    assert list(t.columns) == ["dtype", "size", "time per matmul", "TFLOP/s", "peak, estimate (TFLOP/s)",
                               "share of peak (%)", "error vs float64", "machine while measured"]
    assert t.iloc[0].tolist() == ["fp32", "1024³", "8.47 ms", "0.254", "0.333", "76.2", "2.0e-07", "quiet"]
    assert t.iloc[1]["machine while measured"] == "busy: other programs used 60 % of 2 cores"
    assert t.iloc[2]["peak, estimate (TFLOP/s)"] == "unknown" and t.iloc[2]["share of peak (%)"] == "–"
    assert mm.fp32_percent == pytest.approx(100 * 0.2535 / 0.3328) and mm.fp32_quietness is QUIET
    assert mm.figures()["bf16 1024³ matmul"] == "0.866 TFLOP/s (machine busy: not this device's)"
    assert _mm([mm.points[2]]).fp32_percent is None


def test_a_copy_sweep_measured_on_a_busy_machine_draws_no_conclusion():
    busy = machine.CopySweep((machine.CopyPoint(1 * MIB, 176.0, 1e-5, QUIET), machine.CopyPoint(256 * MIB, 11.0, 0.05, BUSY)),
                             32 * MIB)
    s = busy.sentence()
    assert s.startswith("Inconclusive: the machine was busy (other programs used 60 % of 2 cores): the fastest copy "
                        "(176 GB/s, 1 MiB) and the largest buffer's (11.0 GB/s, 256 MiB) may be the neighbours'"), s
    t = busy.table()
    assert list(t.columns) == ["buffer (MiB)", "copy bandwidth (GB/s, read + write)", "time per copy", "where it fits",
                               "machine while measured"]
    assert t["where it fits"].tolist() == ["fits in the last-level cache", "past the last-level cache"]
    quiet = machine.CopySweep(tuple(machine.CopyPoint(p.nbytes, p.gbps, p.median_s, QUIET) for p in busy.points), 32 * MIB)
    assert "largest buffer's: 11.0 GB/s" in quiet.sentence() and quiet.largest.nbytes == 256 * MIB


def test_the_summary_carries_each_figures_machine_and_no_raw_missing_value():
    mm = _mm([machine.MatmulPoint("fp32", 1024, 8.47e-3, 0.2535, 0.3328, 2.0e-7, BUSY)])
    cp = machine.CopySweep((machine.CopyPoint(1 * MIB, 176.0, 1e-5, QUIET), machine.CopyPoint(256 * MIB, 11.0, 0.05, QUIET)),
                           32 * MIB)
    t = machine.summary(mm, cp).table()
    assert list(t.columns) == ["quantity", "measured", "peak", "share of peak", "machine while measured"]
    assert t.iloc[0].tolist() == ["matmul fp32 1024³", "0.254 TFLOP/s", "0.333 TFLOP/s", "76.2 %",
                                  "busy: other programs used 60 % of 2 cores"]
    assert t.iloc[2]["quantity"] == "copy, largest buffer (256 MiB: memory)" and t.iloc[2]["peak"] == "none known"
    assert not t.isna().any().any()


def test_the_lessons_sweeps_run_here_and_carry_their_quietness(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    with injected(MadeUpLoad(0.9, own_cores=1.0)):  # other programs on 90 % of the cores throughout
        mm = machine.matmul_by_dtype(64, "cpu", rep_ms=200)
        cp = machine.copy_by_size([1], "cpu", rep_ms=200)  # windows long enough to judge
    # every point carries what the watch saw: never "quiet" under that load (a window too short to judge is unknown)
    assert {p.dtype for p in mm.points} >= {"fp32"} and any(p.quietness.disturbed for p in mm.points), mm.points
    assert not any(p.quietness.quiet for p in mm.points), mm.points
    assert cp.points and all(p.quietness.disturbed for p in cp.points), cp.points
    assert cp.sentence().startswith("Inconclusive: the machine was busy")
    assert "1 measured, 0 already in" in cp.note
    again = machine.matmul_by_dtype(64, "cpu", rep_ms=200)  # read back from the results file, quietness and all
    assert [p.quietness for p in again.points] == [p.quietness for p in mm.points] and "already in" in again.note
    assert repr(machine.host_to_device(8, "cpu")).startswith("No GPU here")
    r = machine.square_matmul(32, "fp32", device="cpu", rep_ms=2, warmup_ms=1)
    assert r.n == 32 and r.tflops > 0
