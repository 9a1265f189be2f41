"""The `perflab busbw` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import perflab

from .helpers import _timed_out_job


def test_busbw_reports_sizes_a_stopped_job_did_not_reach(monkeypatch):
    from perflab.distributed import torchrun

    def launch(target, nproc, args, *, timeout, backend, **kw):
        out = Path(args[args.index("--out") + 1])  # rank 0 wrote the first size before the job was stopped
        out.write_text(json.dumps({"bytes": 4096, "seconds": 1e-4, "iters": 10, "correct": True, "algbw_gbps": 0.04096,
                                   "busbw_gbps": 0.04096, "backend": "gloo", "device": "cpu"}) + "\n")
        return _timed_out_job(target, nproc, backend)

    monkeypatch.setattr(torchrun, "launch", launch)
    r = perflab("busbw", "--nproc", "2", "--backend", "gloo", "--sizes", "4K", "256K")
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert lines[2].split()[:2] == ["4", "KiB"] and lines[2].endswith("✓")
    assert lines[3].split()[:2] == ["256", "KiB"] and "not measured: " in lines[3] and "did not finish within 9 s" in lines[3]
    assert lines[4].startswith("rank 0 (last step 'all_reduce 262144 B')") and "--- rank 1: timeout" in r.stdout
