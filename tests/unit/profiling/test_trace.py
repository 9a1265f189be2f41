"""Tests of `perflab.profiling.trace`."""

from __future__ import annotations

import json
import math
import shutil

import pytest
from clirun import perflab

from perflab.core.errors import InputError
from perflab.profiling import diagnose, ops, trace
from perflab.profiling.diagnose import tiny_runs
from perflab.profiling.trace import gaps, load, synthetic_step
from perflab.tune import waterfall

from .helpers import TRACES


def one_clean_line(r) -> bool:
    return r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_a_trace_without_a_schedule_gets_its_steps_from_the_optimizer_calls():
    # plain `profile()` around 4 training steps: no ProfilerStep ranges in the export, 4 optimizer steps
    d = diagnose.diagnose(TRACES / "no_schedule_no_steps.json")
    assert d.steps == 3 and "optimizer steps" in d.step_source and d.per_step
    whole = load(TRACES / "no_schedule_no_steps.json")
    span = max(e.end for e in whole.events) - min(e.start for e in whole.events)
    # a step is a third of the three optimizer-to-optimizer stretches, far from the whole trace
    assert d.step_s < 0.5 * span
    assert math.isclose(d.step_s * 3, sum(s.dur for s in whole.steps))


def test_a_folder_of_several_traces_diagnoses_each_and_names_the_unusable(tmp_path):
    shutil.copy(TRACES / "data_wait.json", tmp_path / "a.json")
    shutil.copy(TRACES / "exported_after_schedule.json", tmp_path / "b.json")
    r = perflab("profile", "--trace", str(tmp_path), "--json")
    assert r.returncode == 0 and len(json.loads(r.stdout)) == 1
    assert "b.json" in r.stderr and "Traceback" not in r.stderr
    with pytest.raises(InputError, match="holds 2 traces"):
        load(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert one_clean_line(perflab("profile", "--trace", str(empty)))


def test_a_gemm_of_zero_duration_is_left_out():
    raw = trace.synthetic_step(None, steps=1)
    base = next(e for e in raw["traceEvents"] if e.get("name") == "aten::mm")
    raw["traceEvents"].append({**base, "ts": base["ts"] + 1, "dur": 0.0, "args": {"Input Dims": [[3, 5], [5, 7]]}})
    raw["traceEvents"].append({**base, "ts": base["ts"] + 2, "dur": 4.0, "args": {"Input Dims": [[3, 5], [5, 9]]}})
    shapes = [r.shape for r in ops.gemm_shapes(trace.load(raw))]
    assert "3×5×9" in shapes and "3×5×7" not in shapes


def test_a_folder_given_as_a_trace_file_is_one_line(tmp_path):
    with pytest.raises(InputError, match=f"^cannot read {tmp_path.name} as a JSON trace \\(IsADirectoryError\\): "
                                         "pass a file written by torch.profiler"):
        trace.read_raw(tmp_path)


def test_broken_trace_files_are_one_line(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(InputError, match="broken gzip"):
        trace.read_raw(p)
    q = tmp_path / "t.json"
    q.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(InputError, match="not UTF-8 text"):
        trace.read_raw(q)
    cut = tmp_path / "cut.json"
    cut.write_text('[{"ph": "X", "name": "a", "ts": 1, "dur": 2},')  # a profiler killed mid-write
    assert trace.read_raw(cut) == [{"ph": "X", "name": "a", "ts": 1, "dur": 2}]
    cut.write_text('[{"ph": "X", "name": "a", "ts": 1, "du')
    with pytest.raises(InputError, match="invalid JSON at line 1"):
        trace.read_raw(cut)


def test_nested_optimizer_spans_never_make_the_parts_exceed_the_step():

    raw = synthetic_step("data_wait", steps=2)
    # an optimizer that wraps another (ZeroRedundancyOptimizer around AdamW): two nested
    # Optimizer.step# spans per step, most of the step long, so the spans add up to more than the step
    for s in range(2):
        for name, ts, dur in (("Optimizer.step#ZeroRedundancyOptimizer.step", 1_000.0, 8_500.0),
                              ("Optimizer.step#AdamW.step", 1_100.0, 8_300.0)):
            raw["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1,
                                       "ts": s * 10_000.0 + ts, "dur": dur})
    bd = waterfall.breakdown_of_trace(raw, step_s=0.010)
    assert sum(bd.values()) == pytest.approx(0.010) and all(v >= 0 for v in bd.values())
    assert bd["compute"] == pytest.approx(0.0, abs=1e-12) and bd["optimizer"] > 0.008


def test_bad_traces_are_one_line_input_errors(tmp_path):
    from perflab.core.errors import InputError

    with pytest.raises(InputError, match="not found"):
        load(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(InputError, match="JSON"):
        load(tmp_path / "x.json")
    with pytest.raises(InputError, match="traceEvents"):
        load({"events": []})
    with pytest.raises(InputError, match="no complete"):
        load({"traceEvents": [{"ph": "M", "name": "x"}]})
    # what export_chrome_trace writes after a schedule's active window has passed: only the
    # profiler's own span (a plain script that steps 6 times through wait=1, warmup=1, active=3)
    empty_window = {"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1},
                                    {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "ts": 0, "dur": 5,
                                     "pid": "Spans", "tid": "PyTorch Profiler"}]}
    with pytest.raises(InputError, match="on_trace_ready"):
        load(empty_window)


def test_gaps_and_tiny_runs():
    from perflab.profiling.trace import Interval

    ops = [Interval(0, 1, "a"), Interval(2, 3, "b"), Interval(2.5, 4, "c")]
    assert gaps(ops, 0, 5) == [(1, 2, 1), (4, 5, 3)]
    assert tiny_runs([Interval(0, 0.1, "t")] * 3 + [Interval(1, 2, "big")], 0.5) == [3, 3, 3, 0]
