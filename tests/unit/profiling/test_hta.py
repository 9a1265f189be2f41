"""Tests of `perflab.profiling.hta`."""

from __future__ import annotations

import json

import pytest

from perflab.profiling import trace
from perflab.profiling.trace import synthetic_step


def test_hta_cross_check_skips_a_cpu_trace_and_says_why(tmp_path):
    from perflab.profiling import hta

    p = tmp_path / "cpu.json"
    p.write_text(json.dumps(trace.synthetic_step(None, steps=1)))
    out = hta.cross_check(p)
    assert out.skipped is not None and "no GPU kernels" in out.skipped
    assert out.perflab_idle is None and out.hta_idle is None and out.difference is None


@pytest.mark.parametrize("cause", ["host_sync", "launch_bound", "communication", "data_wait"])
def test_hta_cross_check_on_hand_built_gpu_traces(cause, tmp_path):
    pytest.importorskip("hta", reason="HolisticTraceAnalysis is not installed")
    from perflab.profiling import hta

    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(synthetic_step(cause, on_gpu=True)))
    r = hta.cross_check(path)
    if cause == "data_wait":
        # the idle before each step's first kernel is outside HTA's per-iteration kernel span
        assert r.hta_idle is not None and r.perflab_idle is not None and r.hta_idle < r.perflab_idle - 0.3
    else:  # idle inside the kernels' span: the two agree up to the step edges perflab counts
        assert r.difference is not None and abs(r.difference) < 0.1, r


def test_the_cross_check_line_says_why_it_skipped(tmp_path):
    import json

    from perflab.profiling import hta
    from perflab.profiling.trace import synthetic_step

    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(synthetic_step(None)))
    assert hta.cross_check_line(path).startswith("not on this trace: ")
