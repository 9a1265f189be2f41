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


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch 2.13 deprecates the old names this calls
@pytest.mark.parametrize("torch_names", ["installed", "before 2.13"])
def test_the_fsdp_counter_counts_the_names_this_torch_has(one_rank_group, monkeypatch, torch_names):
    from perflab.shard.worker import count_fsdp_collectives

    if torch_names == "before 2.13":  # torch 2.11 and 2.12: no *_single names, FSDP2 calls the old ones
        monkeypatch.delattr(dist, "all_gather_single", raising=False)
        monkeypatch.delattr(dist, "reduce_scatter_single", raising=False)
    names = [n for n in ("all_gather_single", "all_gather_into_tensor") if hasattr(dist, n)]
    rs_names = [n for n in ("reduce_scatter_single", "reduce_scatter_tensor") if hasattr(dist, n)]
    before = {n: getattr(dist, n) for n in names + rs_names}
    x, out = torch.ones(4), torch.empty(4)
    with count_fsdp_collectives() as counts:
        for n in names:
            getattr(dist, n)(out, x)
        for n in rs_names:
            getattr(dist, n)(output=out, input=x)
    assert counts == {"all_gather": {"calls": len(names), "bytes": 16 * len(names)},
                      "reduce_scatter": {"calls": len(rs_names), "bytes": 16 * len(rs_names)}}
    assert names and rs_names and all(getattr(dist, n) is fn for n, fn in before.items())  # restored


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
