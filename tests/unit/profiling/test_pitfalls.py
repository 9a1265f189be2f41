"""Tests of `perflab.profiling.pitfalls`."""

from __future__ import annotations


def test_timing_pitfall_table_reads_each_method_with_units():
    from perflab.profiling import pitfalls

    rows = [pitfalls.Pitfall("no sync", 2e-6, "the launch only", 1.2e3),
            pitfalls.Pitfall("failed", None, "nothing")]
    t = pitfalls.pitfall_table(rows)
    assert t.to_dict("records") == [
        {"method": "no sync", "time": "2.00 µs", "TFLOP/s": "1,200", "what it measures": "the launch only"},
        {"method": "failed", "time": "—", "TFLOP/s": "—", "what it measures": "nothing"}]


def test_timing_pitfalls_on_this_device():
    from perflab.profiling import pitfalls

    rows = pitfalls.pitfalls(n=64, reps=3, device="cpu")
    assert [r.method for r in rows][0] == "wall clock, no sync" and len(rows) == 4
    assert rows[2].seconds is None and rows[2].tflops is None  # no CUDA events on a CPU
    assert all(r.seconds > 0 and r.tflops for r in rows if r.seconds is not None)
