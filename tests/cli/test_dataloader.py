"""The `perflab dataloader` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

from clirun import perflab


def test_dataloader_reports_a_worker_that_hangs():
    r = perflab("dataloader", "--workers", "1", "--io-ms", "200", "--timeout", "0.05", "--batches", "2", "--batch", "1",
                "--compute-ms", "1", "--device", "cpu")
    assert r.returncode == 1, r.stderr
    row = r.stdout.splitlines()[2]
    assert row.split()[:2] == ["1", "failed:"] and "no batch within timeout=0.05 s" in row
