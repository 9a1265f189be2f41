"""The `perflab collectives` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

import json

from clirun import perflab


def _timed_out_job(target, nproc, backend):
    """What perflab.distributed.torchrun.launch returns when every rank is still in its second step at the timeout."""
    from perflab.distributed.torchrun import BackendChoice, LaunchResult, RankOutcome

    ranks = [RankOutcome(rank=r, status="timeout", step="all_reduce 262144 B", started=True, stdout="timing")
             for r in range(nproc)]
    return LaunchResult(target=target, nproc=nproc, nnodes=1, backend=BackendChoice(backend or "gloo", "cpu", "asked"),
                        commands=[["torchrun", "-m", target]], seconds=9.0, timeout_s=9.0, timed_out=True,
                        returncodes=[None], ranks=ranks)


def test_collectives_reports_a_job_that_did_not_finish(monkeypatch):
    from perflab.distributed import torchrun

    monkeypatch.setattr(torchrun, "launch", lambda target, nproc, args, **kw: _timed_out_job(target, nproc, kw["backend"]))
    r = perflab("collectives", "--nproc", "2", "--backend", "gloo")
    assert r.returncode == 1
    assert "did not finish within 9 s" in r.stdout.splitlines()[0] and "--- rank 0: timeout" in r.stdout
    assert r.stderr.startswith("perflab collectives: not every check passed: ") and r.stderr.count("\n") == 1
    d = json.loads(perflab("collectives", "--nproc", "2", "--backend", "gloo", "--json").stdout)
    assert d["ok"] is False and d["primitives"] == []
