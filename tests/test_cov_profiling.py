"""Profiling's edges: `perflab profile --fault comm` on its default launcher (torchrun), the
launcher refusal, GEMM shapes of batched matmuls and of events without usable shapes, thread names,
and the readers' refusals of broken traces and numbers."""

from __future__ import annotations

import copy
import json

import pytest
from clirun import perflab

from perflab.core.errors import InputError
from perflab.profiling import ettr, faults, ops, trace


@pytest.mark.slow
def test_profile_comm_on_torchrun_finds_the_all_reduces():
    r = perflab("profile", "--fault", "comm", "--steps", "2", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    comm = next(c for c in d["causes"] if c["cause"] == "communication")
    assert comm["seconds"] > 0 and any(ev["op"].startswith("c10d::allreduce") for ev in comm["evidence"])


def test_an_unknown_launcher_is_refused():
    with pytest.raises(InputError, match="launcher must be 'torchrun' or 'fork' \\(got 'mpirun'\\)"):
        faults.profile_step(fault="comm", launcher="mpirun")


def _with_gemms(dims_by_op):
    raw = trace.synthetic_step(None, steps=1)
    base = next(e for e in raw["traceEvents"] if e.get("name") == "aten::mm")
    for i, (name, dims) in enumerate(dims_by_op):
        e = copy.deepcopy(base)
        e.update(name=name, ts=base["ts"] + 1 + i, dur=50.0, args={"Input Dims": dims})
        raw["traceEvents"].append(e)
    raw["traceEvents"].append({"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "pt_autograd_0"}})
    return trace.load(raw)


def test_gemm_shapes_of_batched_matmuls_and_unusable_shapes():
    t = _with_gemms([("aten::bmm", [[4, 8, 16], [4, 16, 32]]),
                     ("aten::baddbmm", [[4, 8, 32], [4, 8, 16], [4, 16, 32]]),
                     ("aten::bmm", [[8, 16]]),  # a shape list the op cannot have: skipped, not a crash
                     ("aten::addmm", "not dims")])
    rows = [r for r in ops.gemm_shapes(t) if r["op"] in ("aten::bmm", "aten::baddbmm", "aten::addmm")]
    assert [(r["op"], r["shape"], r["flops"]) for r in rows] == [("aten::bmm", "4×8×16×32", 2.0 * 4 * 8 * 16 * 32),
                                                                  ("aten::baddbmm", "4×8×16×32", 2.0 * 4 * 8 * 16 * 32)]
    assert t.threads() == {1: "main thread", 7: "pt_autograd_0"}


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


@pytest.mark.parametrize("v, words", [("soon", "must be a number (got 'soon')"), (float("nan"), "> 0 and finite"),
                                      (-1, "> 0 and finite (got -1)")])
def test_ettr_inputs_must_be_positive_numbers(v, words):
    with pytest.raises(InputError) as e:
        ettr._pos("hours", v)
    assert words in str(e.value)


def test_missing_build_tools_are_said(monkeypatch):
    from perflab.profiling import kernel

    monkeypatch.setattr(kernel.shutil, "which", lambda name: None)
    assert kernel.compiler_missing() == "no C++ compiler on PATH (install g++ or clang)"
    assert kernel.build().skip == "no C++ compiler on PATH (install g++ or clang)"
    monkeypatch.setattr(kernel.shutil, "which", lambda name: None if name == "ninja" else f"/usr/bin/{name}")
    monkeypatch.setattr(kernel.importlib.util, "find_spec", lambda name: None)
    assert kernel.compiler_missing() == "ninja is not installed (torch.utils.cpp_extension needs it)"


def test_ettr_refusals_name_the_models_and_the_gpu_count():
    with pytest.raises(InputError, match="model must be one of exact, first_order \\(got 'linear'\\)"):
        ettr.optimal_interval(1.0, 5.0, 100.0, model="linear")
    with pytest.raises(InputError, match="model must be one of exact, first_order"):
        ettr.sweep_intervals(8, 1000.0, 1.0, 5.0, [10, 20], model="linear")
    with pytest.raises(InputError, match="gpus must be a whole number ≥ 1 \\(got 2.5\\)"):
        ettr.ettr(24, 2.5, 1000.0, 1.0, 5.0)
    given = ettr.ettr(24, 8, 1000.0, 1.0, 5.0, interval_minutes=30)
    assert 0 < given.ettr < 1


def test_lab09_fix_quiz_refuses_unknown_causes_and_letters():
    from perflab.core.grading import LabCheckError
    from perflab.profiling import lab09

    right = lab09.right_fix("alice")
    with pytest.raises(LabCheckError, match="unknown cause\\(s\\) \\['gremlins'\\]"):
        lab09.check_fixes({**dict.fromkeys(right, "?"), "gremlins": "a"}, learner="alice")
    with pytest.raises(LabCheckError, match="'zz' for .* is not one of"):
        lab09.check_fixes({**right, next(iter(right)): "zz"}, learner="alice")


def test_hta_cross_check_skips_a_cpu_trace_and_says_why(tmp_path):
    from perflab.profiling import hta

    p = tmp_path / "cpu.json"
    p.write_text(json.dumps(trace.synthetic_step(None, steps=1)))
    out = hta.cross_check(p)
    assert set(out) == {"skipped"} and "no GPU kernels" in out["skipped"]


def test_the_sync_faults_check_stops_on_non_finite_activations():
    import torch

    faults._host_check_hook(None, None, torch.ones(4))  # finite: reads back and goes on
    with pytest.raises(FloatingPointError, match="non-finite activations"):
        faults._host_check_hook(None, None, torch.tensor([1.0, float("nan")]))


def test_timing_pitfall_table_reads_each_method_with_units():
    from perflab.profiling import pitfalls

    rows = [{"method": "no sync", "seconds": 2e-6, "TFLOP/s": 1.2e3, "what it measures": "the launch only"},
            {"method": "failed", "seconds": None, "TFLOP/s": None, "what it measures": "nothing"}]
    t = pitfalls.pitfall_table(rows)
    assert t.to_dict("records") == [
        {"method": "no sync", "time": "2.00 µs", "TFLOP/s": "1,200", "what it measures": "the launch only"},
        {"method": "failed", "time": "—", "TFLOP/s": "—", "what it measures": "nothing"}]
