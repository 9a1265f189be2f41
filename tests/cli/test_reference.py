"""The `perflab reference` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

from clirun import perflab


def test_reference_record_refuses_cpu_and_records_with_allow_cpu(tmp_path):
    import torch

    if not torch.cuda.is_available():
        r = perflab("reference", "record", "--what", "waves", "--smoke")
        assert r.returncode == 2 and "GPU" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    env = {"PERFLAB_RESULTS": str(tmp_path / "results")}
    r = perflab("reference", "record", "--what", "heads", "--smoke", "--allow-cpu", "--device", "cpu", "--out",
                str(tmp_path), "--json", env=env)
    assert r.returncode == 0, r.stderr
    path = json.loads(r.stdout)["written"][0]["file"]
    assert os.path.exists(path)
    listed = json.loads(perflab("reference", "list", "--out", str(tmp_path), "--json").stdout)["references"]
    assert [x["kind"] for x in listed] == ["heads"]


def test_reference_record_prints_each_file_written(tmp_path):
    r = perflab("reference", "record", "--what", "heads", "--smoke", "--allow-cpu", "--device", "cpu",
                "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip().splitlines()[-1]
    assert line.startswith("heads: wrote ") and Path(line.removeprefix("heads: wrote ")).is_file()
