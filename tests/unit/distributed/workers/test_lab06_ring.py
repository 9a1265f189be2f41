"""Tests of `perflab.distributed.workers.lab06_ring`."""

from __future__ import annotations

import pytest


def test_lab06_worker_refuses_a_file_python_cannot_load(tmp_path):
    from perflab.distributed.workers import lab06_ring

    notes = tmp_path / "ring.txt"
    notes.write_text("def ring(x, rank, world_size): ...\n")
    with pytest.raises(ImportError, match="cannot load .*ring.txt as a Python module"):
        lab06_ring.load(str(notes), "ring")
