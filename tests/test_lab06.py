"""Lab 06 checks: kind to stubs (nothing is launched), strict with wrong answers.

The correct ring all-reduce is checked on 4 ranks by the solution notebook (tests/test_notebooks.py).
"""

import time

import pytest
import torch  # noqa: F401  (the learner's functions below use torch and dist, as in the notebook)
import torch.distributed as dist  # noqa: F401

from perflab.core import grading
from perflab.core.grading import LabCheckError
from perflab.distributed import lab06 as lab


def stub(x, rank, world_size):
    raise NotImplementedError


def uses_a_collective(x, rank, world_size):
    out = x.clone()
    dist.all_reduce(out)
    return out


def test_stub_is_not_done_and_starts_no_rank(monkeypatch):
    import perflab.distributed.torchrun

    def no_launch(*a, **k):
        raise AssertionError("a stub must not start any rank")

    monkeypatch.setattr(perflab.distributed.torchrun, "launch", no_launch)
    grading.reset()
    t0 = time.time()
    assert not lab.check_ring_all_reduce(stub)
    assert time.time() - t0 < 5
    assert grading.summary()["ring_all_reduce on 4 ranks"] == "not done"


def test_traffic_and_busbw_checks():
    grading.reset()
    assert lab.check_ring_bytes(lambda numel, world_size, itemsize: 2 * (world_size - 1) * numel / world_size * itemsize)
    with pytest.raises(LabCheckError, match="ring bytes per rank"):
        lab.check_ring_bytes(lambda numel, world_size, itemsize: 2 * numel * itemsize)  # the large-N limit, not exact
    with pytest.raises(LabCheckError, match="bus bandwidth"):
        lab.check_busbw(lambda op, nbytes, seconds, ranks: nbytes / seconds / 1e9)  # algbw, not busbw
    assert lab.check_busbw(lambda op, nbytes, seconds, ranks: nbytes / seconds / 1e9 * {
        "all_reduce": 2 * (ranks - 1) / ranks, "broadcast": 1.0}.get(op, (ranks - 1) / ranks))


@pytest.mark.slow
def test_a_ring_made_of_all_reduce_is_refused():
    with pytest.raises(LabCheckError, match="called all_reduce: build the ring from point-to-point sends"):
        lab.check_ring_all_reduce(uses_a_collective, nproc=2)
