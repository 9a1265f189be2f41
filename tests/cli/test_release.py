"""The `perflab release` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import perflab


def test_release_writes_a_folder_and_a_zip(tmp_path):
    r = perflab("release", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert Path(d["zip"]).stat().st_size == d["zip_bytes"] > 0
    assert d["labs"] and all(name.endswith(".ipynb") for name in d["labs"])
    assert not (Path(d["folder"]) / "labs" / "solutions").exists()
    text = perflab("release", str(tmp_path)).stdout
    assert f"{len(d['labs'])} labs, no solutions, outputs cleared" in text and "MiB)" in text
