"""Tests of `perflab.numa.sizes`: lesson 08's table, read as the lesson reads it."""

import torch

from perflab.core.sizes import for_run
from perflab.numa.sizes import SIZES


def test_smoke_skips_the_launch_and_copies_less():
    smoke, full = for_run(SIZES, True, torch.device("cpu")), for_run(SIZES, False, torch.device("cpu"))
    assert not smoke.bound_launch and full.bound_launch
    assert (smoke.probe_bytes, full.probe_bytes) == (64 * 2**20, 512 * 2**20)
    assert for_run(SIZES, False, "cuda") is full and smoke.local_ranks == full.local_ranks == 2
