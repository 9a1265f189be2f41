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
