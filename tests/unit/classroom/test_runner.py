"""Tests of `perflab.classroom.runner`: one submission run in its kernel (a fake runner process
here), its limits, and the end of every process it started."""

from __future__ import annotations

import resource
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from perflab.classroom import runner as R
from perflab.classroom.submissions import Lab, Submission
from tests.unit.course.helpers import _notebook

pytest.importorskip("papermill")


def _fake_launch(executed: str | None, text: str, predictions: str = "") -> R.Launch:
    """grade_one's runner process, replaced: it writes `text` to its log and (unless None) `executed`
    as the executed notebook, and `predictions` into the submission's results folder."""
    def start(cmd, *, cwd, env, log):
        log.write(text.encode())
        if executed is not None:
            Path(cmd[4]).write_text(executed)
        if predictions:
            (Path(env["PERFLAB_RESULTS"]) / "predictions.jsonl").write_text(predictions)
        return SimpleNamespace(wait=lambda timeout=None: 0)

    return R.Launch(start=start, stop=lambda proc: None)


def _submission(tmp_path) -> Submission:
    path = _notebook(tmp_path / "alice" / "01_flops.ipynb", "lab.check_flops(1)")
    return Submission("alice", Lab("01", "01_flops", path, ("check_flops",), predicts=True), path)


# ----------------------------------------------------------------------------- limits
def _fake_limits(monkeypatch, refuse=()):
    """resource.getrlimit/setrlimit on a table of this test's own: the test process keeps its limits."""
    table = {resource.RLIMIT_AS: (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
             resource.RLIMIT_DATA: (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
             resource.RLIMIT_CPU: (resource.RLIM_INFINITY, 500),
             resource.RLIMIT_FSIZE: (resource.RLIM_INFINITY, resource.RLIM_INFINITY)}
    set_calls = []

    def setrlimit(which, limits):
        if which in refuse:
            raise ValueError("current limit exceeds maximum limit")
        set_calls.append((which, limits))
        table[which] = limits

    monkeypatch.setattr(resource, "getrlimit", lambda which: table[which])
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    return set_calls


def test_a_runner_that_leaves_a_half_written_notebook_is_an_error_with_its_log(tmp_path):
    launch = _fake_launch("{half a notebo", "starting\nOSError: no kernel named python3\n",
                          predictions='{"lesson": "01", "key": "k", "predicted": 1.0}\n{broken\n')
    rec = R.grade_one(_submission(tmp_path), timeout=5, limits=R.Limits(), launch=launch)
    assert rec.outcome == "error"
    assert rec.message == "the kernel could not run the notebook: OSError: no kernel named python3"
    assert [p["key"] for p in rec.predictions] == ["k"]


def test_predictions_are_recorded_only_for_a_lab_that_asks_for_them(tmp_path, monkeypatch):
    launch = _fake_launch("{half a notebo", "OSError: no kernel\n",
                          predictions='{"lesson": "07", "key": "k", "predicted": 1.0}\n')
    sub = _submission(tmp_path)
    sub.lab = Lab("07", "07_shuffle", sub.path, ("check_index",), predicts=False)
    assert R.grade_one(sub, timeout=5, limits=R.Limits(), launch=launch).predictions == []


def test_a_notebook_cut_short_names_the_runners_last_error_and_the_likely_limit(tmp_path):
    executed = _notebook(tmp_path / "executed.ipynb", "lab.check_flops(1)",
                         [nbformat.v4.new_output("stream", text="measuring\n")]).read_text()
    launch = _fake_launch(executed, "running cell 1\nMemoryError\nshutting down\n")
    rec = R.grade_one(_submission(tmp_path), timeout=5, limits=R.Limits(), launch=launch)
    assert (rec.outcome, rec.message) == ("error", "MemoryError (memory or CPU-time limit?)")


def test_killing_the_runner_survives_a_child_that_is_already_gone(monkeypatch):
    import psutil

    runner = subprocess.Popen(["sleep", "30"])
    gone = subprocess.Popen(["true"])
    ghost = psutil.Process(gone.pid)
    gone.wait()
    monkeypatch.setattr(psutil.Process, "children", lambda self, recursive=False: [ghost])
    R.kill_tree(runner)
    assert runner.returncode == -signal.SIGKILL and not ghost.is_running()


def test_a_limit_switched_off_is_left_as_it_is(monkeypatch):
    set_calls = _fake_limits(monkeypatch)
    R.Limits(memory_bytes=None, cpu_s=None, file_bytes=None).apply(cpu_s=120, nvidia=False)
    assert set_calls == [(resource.RLIMIT_CPU, (120, 120))]  # only the CPU time, from the timeout
    set_calls.clear()
    R.Limits(memory_bytes=None, cpu_s=900, file_bytes=None).apply(cpu_s=120, nvidia=False)
    assert set_calls == [(resource.RLIMIT_CPU, (120, 120))]  # the hard limit (120 now) is never raised


def test_a_limit_the_system_refuses_is_reported_and_the_others_still_apply(monkeypatch, capsys):
    set_calls = _fake_limits(monkeypatch, refuse=(resource.RLIMIT_AS,))
    R.Limits(memory_bytes=2**30, cpu_s=None, file_bytes=2**20).apply(cpu_s=60, nvidia=False)
    assert capsys.readouterr().out == ("perflab grade: this system does not take that limit "
                                       "(current limit exceeds maximum limit); running without it\n")
    assert set_calls == [(resource.RLIMIT_CPU, (60, 60)), (resource.RLIMIT_FSIZE, (2**20, 2**20))]
