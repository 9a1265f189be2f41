"""Tests of `perflab.shard.worker`."""

from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist


# ----------------------------------------------------------------------------- shard: the collective counter
@pytest.fixture
def one_rank_group(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1,  # pyright: ignore[reportPrivateImportUsage]  # public, documented; absent from __all__
                            timeout=datetime.timedelta(seconds=30))
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_the_collective_counter_adds_up_every_tensor_of_a_list(one_rank_group):
    from perflab.shard.worker import functional_collective_counter

    # the ops DTensor calls (the first call under any dispatch mode imports torch._dynamo: seconds, once)
    ops = torch.ops._c10d_functional
    group = one_rank_group.group_name
    a, b = torch.ones(3), torch.full((2, 4), 2.0)
    counter = functional_collective_counter()
    with counter:
        out = [ops.wait_tensor(t) for t in ops.all_reduce_coalesced([a, b], "sum", group)]
        one = ops.wait_tensor(ops.all_reduce(a, "sum", group))
    assert counter.counts == {"all_reduce_coalesced": {"calls": 1, "bytes": (3 + 8) * 4},
                              "all_reduce": {"calls": 1, "bytes": 3 * 4}}
    assert torch.equal(out[0], a) and torch.equal(out[1], b) and torch.equal(one, a)  # one rank: the sum is itself
