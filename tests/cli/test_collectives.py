"""The `perflab collectives` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

import json

from clirun import perflab

from .helpers import _timed_out_job


def test_collectives_reports_a_job_that_did_not_finish(monkeypatch):
    from perflab.distributed import torchrun

    monkeypatch.setattr(torchrun, "launch", lambda target, nproc, args, **kw: _timed_out_job(target, nproc, kw["backend"]))
    r = perflab("collectives", "--nproc", "2", "--backend", "gloo")
    assert r.returncode == 1
    assert "did not finish within 9 s" in r.stdout.splitlines()[0] and "--- rank 0: timeout" in r.stdout
    assert r.stderr.startswith("perflab collectives: not every check passed: ") and r.stderr.count("\n") == 1
    d = json.loads(perflab("collectives", "--nproc", "2", "--backend", "gloo", "--json").stdout)
    assert d["ok"] is False and d["primitives"] == []
