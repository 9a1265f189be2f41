"""Tests of `perflab.core.results`."""

from __future__ import annotations

import json
from argparse import Namespace

import pytest
import torch

from perflab.core import (
    results,
)
from perflab.core.errors import InputError
from perflab.core.results import (
    classify_failure,
    jsonable,
    load_rows,
    point_key,
    run_sweep,
    sweep_path,
)


def test_an_installed_copy_has_no_course_checkout(monkeypatch, tmp_path):
    monkeypatch.setattr(results, "__file__", str(tmp_path / "site-packages" / "perflab" / "core" / "results.py"))
    assert results.course_checkout() is None


def test_run_sweep_reports_each_new_row_to_on_point(tmp_path):
    seen = []
    res = results.run_sweep("cb", [{"n": 1}, {"n": 2}], lambda p: {"sq": p["n"] ** 2}, path=tmp_path / "cb.jsonl",
                            progress=False, on_point=seen.append)
    assert [(r["params"], r["sq"]) for r in seen] == [({"n": 1}, 1), ({"n": 2}, 4)]
    assert seen == res.rows
    seen.clear()
    results.run_sweep("cb", [{"n": 1}], lambda p: {"sq": 0}, path=tmp_path / "cb.jsonl", progress=False,
                      on_point=seen.append)
    assert seen == []  # a point already in the file is not measured, so not reported


def test_sweep_summary_says_how_to_resume_and_torn_lines_are_skipped(tmp_path):
    from perflab.core.results import SweepResult, jsonable, load_rows

    s = SweepResult(tmp_path / "x.jsonl", [], measured=2, skipped=1, failed=0, interrupted=True)
    assert s.summary().endswith("interrupted: run the same sweep again to resume")
    p = tmp_path / "rows.jsonl"
    p.write_text('{"a": 1}\n{"a": 2\n\n{"a": 3}\n')  # a line torn by a crash mid-write
    assert load_rows(p) == [{"a": 1}, {"a": 3}]
    assert jsonable(torch.tensor(2.5)) == 2.5 and jsonable(torch.device("cpu")) == "cpu" and jsonable(torch.zeros(2)) == [0.0, 0.0]


def test_results_go_to_the_checkout_or_the_users_cache(monkeypatch, tmp_path):
    from perflab.core import results

    monkeypatch.delenv("PERFLAB_RESULTS", raising=False)
    checkout = results.course_checkout()
    assert checkout is not None and results.results_root() == checkout / "results"
    monkeypatch.setattr(results, "course_checkout", lambda: None)  # an installed copy
    monkeypatch.setenv("HOME", str(tmp_path))
    assert results.results_root() == tmp_path / ".cache" / "perflab" / "results"


# ----------------------------------------------------------------------------- runtime
def test_results_of_any_type_become_json():
    import numpy as np

    text = json.dumps({"t": torch.tensor([1.0, 2.0]), "f": np.float32(0.5), "o": Namespace(a=1), "d": 3 + 0j},
                      default=jsonable)
    assert json.loads(text) == {"t": [1.0, 2.0], "f": 0.5, "o": "Namespace(a=1)", "d": "(3+0j)"}


def test_point_key_ignores_order():
    assert point_key({"a": 1, "b": 2}) == point_key({"b": 2, "a": 1})


def test_path_keyed_by_host_and_device(tmp_path):
    p = sweep_path("mm", device_slug="cuda-nvidia h100", host="node/1", root=tmp_path)
    assert p.parent.name == "cuda-nvidia-h100" and p.parent.parent.name == "node-1" and p.name == "mm.jsonl"


def test_each_point_written_as_measured_and_resumed(tmp_path):
    path = tmp_path / "s.jsonl"
    lines_seen = []

    def measure(p):
        lines_seen.append(len(load_rows(path)))  # how many points were on disk before this one
        return {"y": p["x"] ** 2}

    pts = [{"x": i} for i in range(4)]
    r = run_sweep("s", pts, measure, path=path, progress=False)
    assert lines_seen == [0, 1, 2, 3]
    assert r.measured == 4 and r.skipped == 0 and [row["y"] for row in r.rows] == [0, 1, 4, 9]
    calls = []
    r2 = run_sweep("s", pts + [{"x": 9}], lambda p: calls.append(p) or {"y": 0}, path=path, progress=False)
    assert calls == [{"x": 9}] and r2.skipped == 4 and r2.measured == 1
    assert list(r2.frame["x"]) == [0, 1, 2, 3, 9]


def test_failures_recorded_and_sweep_goes_on(tmp_path):
    path = tmp_path / "f.jsonl"

    def measure(p):
        if p["x"] == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        if p["x"] == 2:
            raise InputError("m must be ≥ 1 (got 0)")
        if p["x"] == 3:
            raise RuntimeError("boom")
        return {"y": 1}

    r = run_sweep("f", [{"x": i} for i in range(5)], measure, path=path, progress=False)
    status = [row["status"] for row in r.rows]
    assert status == ["ok", "oom", "invalid", "error", "ok"]
    assert r.failed == 3 and r.measured == 2
    assert "80.00 GiB" in r.rows[1]["reason"]
    # failed points are not retried unless asked
    again = run_sweep("f", [{"x": 1}], lambda p: {"y": 2}, path=path, progress=False)
    assert again.skipped == 1 and again.rows[0]["status"] == "oom"
    retried = run_sweep("f", [{"x": 1}], lambda p: {"y": 2}, path=path, progress=False, retry_failed=True)
    assert retried.measured == 1 and retried.rows[0]["status"] == "ok"


def test_ctrl_c_keeps_what_was_measured(tmp_path):
    path = tmp_path / "k.jsonl"

    def measure(p):
        if p["x"] == 2:
            raise KeyboardInterrupt
        return {"y": p["x"]}

    r = run_sweep("k", [{"x": i} for i in range(5)], measure, path=path, progress=False)
    assert r.interrupted and r.measured == 2
    assert len(load_rows(path)) == 2
    r2 = run_sweep("k", [{"x": i} for i in range(5)], lambda p: {"y": p["x"]}, path=path, progress=False)
    assert r2.skipped == 2 and r2.measured == 3 and not r2.interrupted


def test_torn_last_line_is_ignored(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"params": {"x": 0}, "status": "ok", "y": 0}) + "\n" + '{"params": {"x": 1}, "sta')
    r = run_sweep("t", [{"x": 0}, {"x": 1}], lambda p: {"y": 5}, path=path, progress=False)
    assert r.skipped == 1 and r.measured == 1


def test_classify():
    assert classify_failure(MemoryError()) == "oom"
    assert classify_failure(RuntimeError("DefaultCPUAllocator: can't allocate memory")) == "oom"
    assert classify_failure(InputError("bad")) == "invalid"
    assert classify_failure(ValueError("other")) == "error"


def test_default_root_respects_env(tmp_path, monkeypatch):
    from perflab.core.results import results_root

    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    assert results_root() == tmp_path
    p = sweep_path("abc")
    assert str(p).startswith(str(tmp_path)) and p.name == "abc.jsonl"


@pytest.mark.parametrize("bad", [0, -1])
def test_sweep_records_invalid_shapes(tmp_path, bad):
    from perflab.core.measure import measure_matmul

    r = run_sweep("mm", [{"n": 8}, {"n": bad}], lambda p: {"s": measure_matmul(p["n"], p["n"], p["n"], rep_ms=2).median_s},
                  path=tmp_path / "mm.jsonl", progress=False)
    assert [row["status"] for row in r.rows] == ["ok", "invalid"]
    assert "≥ 1" in r.rows[1]["reason"]


def test_results_set_aside_are_renamed_not_deleted(tmp_path):
    from perflab.core.results import set_aside

    f = tmp_path / "sweep.jsonl"
    assert set_aside(f) is None
    f.write_text("{}\n")
    new = set_aside(f)
    assert new is not None and not f.exists() and new.read_text() == "{}\n" and new.name.startswith("sweep.2")
