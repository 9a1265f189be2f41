"""Tests of `perflab.flops.rates`: lesson 01's roofline run, its table and its sentences."""

from __future__ import annotations

from types import SimpleNamespace

from perflab.core.quietness import UNKNOWN, Quietness
from perflab.core.roofline import Roofline
from perflab.flops import rates
from perflab.flops.sizes import RATES

QUIET = Quietness("quiet", 0.0, 1.0, 2, 0.0, 2, "")
BUSY = Quietness("disturbed", 0.6, 1.0, 2, 1.2, 2, "other programs used 60 % of 2 cores")


def _run(copy_q=QUIET, add_q=QUIET, point_q=QUIET, roof=True):
    pts = (rates.RooflinePoint(64, 10.67, 6.2e-5, 0.0085, 0.026, QUIET),
           rates.RooflinePoint(2048, 341.3, 0.07, 0.245, 0.74, point_q))
    add = SimpleNamespace(numel=2**24, median_s=2e-3, tflops=8.4e-3, gbps=100.7, intensity=1 / 12, quietness=add_q)
    copy = SimpleNamespace(gbps=46.7, quietness=copy_q)
    r = Roofline(0.3328e12, 46.7e9) if roof else None
    return rates.RooflineRun("fp32", pts, add, copy, r, "estimate peak 0.333 TFLOP/s; measured copy bandwidth 46.7 GB/s")


def test_a_quiet_run_places_each_kernel_against_the_ridge():
    run = _run()
    assert run.add_bound == "memory-bound" and run.largest.n == 2048 and run.best_tflops == 0.245
    assert run.sentences().splitlines() == [
        "roofline inputs: estimate peak 0.333 TFLOP/s; measured copy bandwidth 46.7 GB/s",
        "ridge point: 7.13 FLOPs/byte; a + b at 0.0833 FLOPs/byte is memory-bound; the 2048³ matmul at 341 FLOPs/byte "
        "is compute-bound",
        "a + b reached 101 GB/s (bytes read + written per second)"]
    t = run.table()
    assert list(t.columns) == ["kernel", "intensity (FLOP/byte)", "time per call", "TFLOP/s", "share of peak",
                               "side of the ridge", "machine while measured"]
    assert t["side of the ridge"].tolist() == ["compute-bound", "compute-bound", "memory-bound"]
    assert t["kernel"].tolist()[-1] == "a + b (16,777,216 elements)" and not t.isna().any().any()
    assert run.frame()["label"].tolist() == ["64³", "2048³", "a + b"]


def test_a_roof_measured_on_a_busy_machine_places_nothing():
    run = _run(copy_q=BUSY, add_q=BUSY, point_q=BUSY)
    text = run.sentences()
    assert "inconclusive: the machine was busy (other programs used 60 % of 2 cores): the copy that set the memory " \
           "roof ran on a busy machine" in text and "is compute-bound" not in text
    assert "a + b reached 101 GB/s, measured on a busy machine (other programs used 60 % of 2 cores)" in text
    assert run.roof_quietness is BUSY and str(run.table()["side of the ridge"].iloc[0]).endswith("(roof measured on a busy machine)")
    assert run.frame()["disturbed"].tolist() == [False, True, True]


def test_without_a_peak_there_is_no_roof_to_land_on():
    run = _run(roof=False)
    assert run.add_bound is None and run.sentences() == run.no_roof() and set(run.table()["side of the ridge"]) == {
        "no roofline"}
    spec = rates.RooflineRun("fp32", run.points, run.add, run.copy, Roofline(1e12, 1e12), "spec peak; spec bandwidth 1000 GB/s")
    assert spec.roof_quietness is UNKNOWN  # a datasheet's bandwidth was not measured here


def test_the_run_measures_at_a_row_of_the_size_table(monkeypatch, tmp_path):
    from perflab.core.device import describe
    from perflab.core.hardware import peaks_for

    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    info = describe("cpu")
    run = rates.roofline_run(RATES["smoke"], "fp32", "cpu", info, peaks_for(info))
    assert [p.n for p in run.points] == list(RATES["smoke"].sweep_n) and run.add.numel == RATES["smoke"].add_numel
    assert run.copy.nbytes == RATES["smoke"].copy_bytes and run.roof is not None
