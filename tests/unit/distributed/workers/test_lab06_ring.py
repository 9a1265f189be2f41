"""Tests of `perflab.distributed.workers.lab06_ring`."""

from __future__ import annotations

from argparse import Namespace

import pytest

from perflab.distributed import ring
from perflab.distributed.workers import lab06_ring


@pytest.fixture
def ring_restored():
    """The worker disarms perflab's own ring in its process (a rank's, here pytest's): put it back after."""
    saved = {name: getattr(ring, name).__code__ for name in lab06_ring.RING_ANSWERS}
    try:
        yield
    finally:
        for name, code in saved.items():
            getattr(ring, name).__code__ = code


def test_lab06_worker_refuses_a_file_python_cannot_load(tmp_path):
    notes = tmp_path / "ring.txt"
    notes.write_text("def ring(x, rank, world_size): ...\n")
    with pytest.raises(ImportError, match="cannot load .*ring.txt as a Python module"):
        lab06_ring.load(str(notes), "ring")


def test_lab06_worker_reports_a_result_of_the_wrong_shape(one_rank, tmp_path, ring_restored):
    student = tmp_path / "student.py"
    student.write_text("def ring(x, rank, world_size):\n    return x[:1]\n")
    out = lab06_ring.body(one_rank, Namespace(file=str(student), name="ring", numels="8"))
    row = out["rows"][0]
    assert row["shape_ok"] is False and row["shape"] == [1] and row["max_rel_error"] is None
    with pytest.raises(SystemExit, match="perflab's ring was called: write the ring yourself"):
        ring.chunk_sizes(8, 2)  # disarmed while the learner's code runs
