"""The `perflab shard` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

import json

import pytest
from clirun import perflab


def _ok_job(target, nproc, results):
    from perflab.distributed.torchrun import BackendChoice, LaunchResult, RankOutcome

    return LaunchResult(target=target, nproc=nproc, nnodes=1, backend=BackendChoice("gloo", "cpu", "asked"),
                        commands=[["torchrun", "-m", target]], seconds=1.0, timeout_s=60.0, timed_out=False,
                        returncodes=[0], ranks=[RankOutcome(rank=r, status="ok", started=True, result=res)
                                                for r, res in enumerate(results)])


def test_shard_json_leaves_out_the_pipeline_timelines(monkeypatch):
    from perflab.distributed import torchrun

    # GPipe on 2 stages, one micro-batch, F = 1 s and B = 2 s: stage 1 waits for stage 0's forward, stage 0
    # for stage 1's backward; each stage is busy 3 s of 6 (bubble (p−1)/(m+p−1) = 1/2)
    events = [[("F", 0.0, 1.0), ("B", 4.0, 6.0)], [("F", 1.0, 2.0), ("B", 2.0, 4.0)]]
    results = [{"rank": r, "schedule": "gpipe",
                "runs": [{"m": 1, "wall_s": 6.0, "busy_s": 3.0, "idle_s": 3.0, "bubble": 0.5, "max_in_flight": 1,
                          "activation_bytes_per_microbatch": 1024, "activation_bytes_held": 1024,
                          "events": events[r], "t0": 0.0}]} for r in range(2)]
    monkeypatch.setattr(torchrun, "launch", lambda target, nproc, args, **kw: _ok_job(target, nproc, results))
    r = perflab("shard", "--strategy", "pp", "--nproc", "2", "--microbatches", "1", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    (run,) = d["details"]["runs"]
    assert "events" not in run and run["formula"] == 0.5 and run["replayed_bubble"] == pytest.approx(0.5)
    assert [row["bubble"] for row in d["rows"]] == [0.5, 0.5] and d["ok"]
