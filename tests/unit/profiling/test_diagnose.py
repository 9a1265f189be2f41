"""Tests of `perflab.profiling.diagnose`."""

from __future__ import annotations

import json
import math

import pytest
from clirun import perflab
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from perflab.cli import main
from perflab.profiling import diagnose
from perflab.profiling.diagnose import CAUSES, NONE_THRESHOLD
from perflab.profiling.faults import EXPECTED
from perflab.profiling.trace import synthetic_step

from .helpers import SETTINGS, TRACES


def _gpu_step(kernels, host):
    """A one-step GPU trace (1 ms): kernels [(ts, dur)] on a stream, host events [(name, cat, ts, dur)]."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 1000.0}]
    ev += [{"ph": "X", "cat": "kernel", "name": "kernel_mm", "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": {}}
           for ts, dur in kernels]
    ev += [{"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur} for name, cat, ts, dur in host]
    return {"traceEvents": ev}


pytest.importorskip("hypothesis", reason="hypothesis is not installed: pip install -e '.[test]'")


@st.composite
def planted_traces(draw):
    """A CPU trace of 1-4 ProfilerStep ranges, each a row of compute ops (100 µs - 3 ms) with idle gaps
    planted between them: under a DataLoader fetch, under an `aten::item` sync, or under nothing."""
    n_steps = draw(st.integers(1, 4))
    ev, t = [], 0
    planted = {"data_wait": 0.0, "host_sync": 0.0, "none": 0.0}
    for s in range(n_steps):
        start = t
        body = []
        for _ in range(draw(st.integers(2, 12))):
            dur = draw(st.integers(100, 3000))
            body.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": dur})
            t += dur
            kind = draw(st.sampled_from(["none", "data_wait", "host_sync", None, None]))
            if kind is not None:
                gap = draw(st.integers(50, 5000))
                name = {"data_wait": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                        "host_sync": "aten::item"}.get(kind)
                if name:
                    body.append({"ph": "X", "cat": "user_annotation" if kind == "data_wait" else "cpu_op",
                                 "name": name, "pid": 1, "tid": 1, "ts": t, "dur": gap})
                planted[kind] += gap * 1e-6
                t += gap
                dur = draw(st.integers(100, 3000))  # a step ends on an op: every gap sits between two ops
                body.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": dur})
                t += dur
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 1}", "pid": 1, "tid": 1,
                   "ts": start, "dur": t - start})
        ev += body
        t += draw(st.integers(0, 2000))  # time between steps is outside every step
    return {"traceEvents": ev}, n_steps, planted


def test_a_trace_with_no_steps_at_all_says_its_figures_are_per_trace():
    d = diagnose.diagnose(TRACES / "inference_no_steps.json")
    assert not d.per_step and d.steps == 1 and "whole trace" in d.summary()
    assert d.as_json()["per_step"] is False


def test_the_array_form_and_gzip_bytes_under_json_give_the_same_answer_as_the_plain_file():
    plain = diagnose.diagnose(TRACES / "no_schedule_steps.json").as_json()
    for name in ("json_array.json", "gzip_bytes_named.json"):
        other = diagnose.diagnose(TRACES / name).as_json()
        assert other["step_s"] == plain["step_s"] and other["device_busy"] == plain["device_busy"], name


def test_an_unterminated_array_is_read_as_the_chrome_format_allows(tmp_path):
    text = (TRACES / "json_array.json").read_text().rstrip()
    f = tmp_path / "open.json"
    f.write_text(text[:-1].rstrip() + ",\n")  # no closing bracket, a trailing comma
    assert diagnose.diagnose(f).step_s == diagnose.diagnose(TRACES / "json_array.json").step_s


def test_tensorboard_handler_folders_plain_and_gzip():
    for folder in ("tb_handler", "tb_handler_gz"):
        d = diagnose.diagnose(next((TRACES / folder).iterdir()))
        assert d.steps == 2 and d.step_source == "ProfilerStep markers"
        r = perflab("profile", "--trace", str(TRACES / folder), "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["steps"] == 2


def test_the_planted_data_wait_of_a_plain_script_is_named():
    d = diagnose.diagnose(TRACES / "data_wait.json")
    # the script's DataLoader sleeps 2 ms per sample, 8 samples a batch: at least 16 ms per step
    assert d.top is not None and d.top.cause == "data_wait" and d.top.seconds >= 0.016
    assert d.steps == 3


def test_a_wait_that_ended_before_the_gap_is_not_its_evidence():
    # the device idles 100-800 µs; a long sync covers it, a short item() inside it ended long before
    d = diagnose.diagnose(_gpu_step([(0, 100), (800, 200)], [("cudaStreamSynchronize", "cuda_runtime", 0, 900),
                                                               ("aten::item", "cpu_op", 10, 10)]))
    assert [(c.cause, round(c.seconds * 1e6, 6)) for c in d.causes] == [("host_sync", 700.0)]
    assert d.causes[0].evidence == [diagnose.Evidence("cudaStreamSynchronize", pytest.approx(7e-4), 1)]


def test_a_wait_that_only_touches_the_gap_still_names_it():
    # the sync starts the instant the device resumes: no overlap, but the only wait at the gap
    d = diagnose.diagnose(_gpu_step([(0, 100), (800, 200)], [("aten::item", "cpu_op", 800, 50)]))
    assert [(c.cause, round(c.seconds * 1e6, 6)) for c in d.causes] == [("host_sync", 700.0)]
    assert d.unattributed_s == 0.0


@pytest.mark.parametrize("on_gpu", [False, True], ids=["cpu", "gpu"])
@pytest.mark.parametrize("cause", [None, *CAUSES])
def test_diagnose_names_the_cause_of_a_hand_built_trace(cause, on_gpu):
    d = diagnose.diagnose(synthetic_step(cause, on_gpu=on_gpu))
    assert d.steps == 2 and math.isclose(d.step_s, 0.010)
    if cause is None:
        assert d.significant() == [] and d.device_busy > 0.85
    else:
        assert d.top.cause == cause and d.top.share > 0.25, d.summary()
        assert d.device_busy < 0.7
        assert d.top.evidence and d.top.evidence[0].seconds > 0


def test_gpu_host_sync_gap_starts_where_the_sync_returns():
    # on a GPU the device idles *after* cudaStreamSynchronize returns: no overlap, still host_sync
    d = diagnose.diagnose(synthetic_step("host_sync", on_gpu=True))
    names = {e.op for e in d.top.evidence}
    assert "cudaStreamSynchronize" in names or "aten::item" in names


@pytest.mark.parametrize("fault", ["none", "loader", "sync", "launch"])
def test_each_planted_fault_is_the_top_cause(fault, tmp_path, capsys):
    trace = tmp_path / f"{fault}.json"
    assert main(["profile", "--fault", fault, "--steps", "2", "--trace-out", str(trace), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trace_file"] == str(trace) and trace.is_file()
    causes = out["causes"]
    if fault == "none":  # nothing worth chasing: no cause above the stated threshold (10% of the step)
        assert all(c["share"] < NONE_THRESHOLD for c in causes), causes
    else:
        assert causes[0]["cause"] == EXPECTED[fault] and causes[0]["share"] >= NONE_THRESHOLD, causes


@SETTINGS
@given(planted_traces())
def test_planted_idle_gaps_are_diagnosed_within_tolerance(case):
    trace, n_steps, planted = case
    d = diagnose.diagnose(trace)
    assert d.steps == n_steps
    got = {c.cause: c.seconds for c in d.causes}
    tol = 1e-6  # the trace's timestamps are whole microseconds
    for cause in ("data_wait", "host_sync"):
        assert math.isclose(got.get(cause, 0.0), planted[cause] / n_steps, abs_tol=tol), (cause, got, planted)
    assert math.isclose(d.unattributed_s, planted["none"] / n_steps, abs_tol=tol)
    assert math.isclose(d.idle_s, sum(planted.values()) / n_steps, abs_tol=tol)


def test_a_tiny_op_is_under_20_us_on_a_cpu_and_10_us_on_a_gpu():
    """Lesson 09: on a CPU, runs of ops shorter than 20 µs are the dispatcher's time, not compute."""
    from perflab.profiling.diagnose import default_tiny_s

    assert default_tiny_s(on_gpu=False) == 20e-6 and default_tiny_s(on_gpu=True) == 10e-6


def _steps(shapes):
    """A CPU trace of 10 ms steps; each step is [(kind, µs)] in order: 'mm' compute, 'data' a DataLoader
    wait, 'sync' an item() wait (the device idles under each wait)."""
    ev, t = [], 0.0
    names = {"data": ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation"),
             "sync": ("aten::item", "cpu_op"), "mm": ("aten::mm", "cpu_op")}
    for i, parts in enumerate(shapes):
        start = t
        for kind, us in parts:
            name, cat = names[kind]
            ev.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": t, "dur": us})
            t += us
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": 100.0})
        t += 100.0
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i + 1}", "pid": 1, "tid": 1,
                   "ts": start, "dur": t - start})
    return {"traceEvents": ev}


LOADER = [("mm", 4000.0), ("data", 5000.0), ("mm", 900.0)]
SYNC = [("mm", 4000.0), ("sync", 5000.0), ("mm", 900.0)]


def test_the_same_cause_in_every_profiled_step_is_stable():
    d = diagnose.diagnose(_steps([LOADER] * 5))
    assert d.top.cause == "data_wait" and d.stable and d.top_by_step == ["data_wait"] * 5
    assert d.top.median_share == pytest.approx(0.5) and d.stability().startswith("stable: data_wait leads in 5 of 5")
    assert "stable: data_wait" in d.summary() and d.as_json()["stable"] is True


def test_one_disturbed_step_moves_neither_the_median_share_nor_the_verdict():
    d = diagnose.diagnose(_steps([LOADER, LOADER, SYNC, LOADER, LOADER]))
    dw = next(c for c in d.causes if c.cause == "data_wait")
    assert d.top.cause == "data_wait" and d.stable and dw.median_share == pytest.approx(0.5)
    assert dw.share == pytest.approx(0.4)  # the average does move


def test_a_cause_that_flips_between_steps_is_not_stable_and_one_step_cannot_tell():
    d = diagnose.diagnose(_steps([LOADER, SYNC, SYNC, LOADER]))
    assert not d.stable and d.stability().startswith("not stable: the leading cause changed from step to step")
    one = diagnose.diagnose(_steps([LOADER]))
    assert not one.stable and one.stability().startswith("one profiled step")


def test_a_profiled_step_unlike_the_timed_ones_is_said_so():
    d = diagnose.diagnose(_steps([LOADER] * 3))
    assert d.step_s == pytest.approx(0.01) and d.versus_timed(0.0098) is None
    slow = d.versus_timed(0.002)
    assert slow and slow.startswith("the profiled step took 10") and "(5.00×)" in slow
    # ops on several threads add up to more than the step: 645 ms of ops inside a 48 ms step
    both = diagnose.profiled_versus_timed(0.048, 0.048, ops_s=0.645)
    assert both and both.startswith("the profiled ops add up to 645 ms inside a 48") and "threads" in both
    assert diagnose.profiled_versus_timed(0.048, 0.047, ops_s=0.040) is None
