"""Tests of `perflab.distributed.workers.faulty`."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pytest
import torch.distributed as dist

from perflab.distributed.workers import runtime


@pytest.fixture
def one_rank(tmp_path, monkeypatch):
    """A RankContext for rank 0 of 1, its process group joined the way a launched rank joins it."""
    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0",
                 runtime.ENV_RUN_DIR: str(tmp_path), runtime.ENV_BACKEND: "gloo", "GLOO_SOCKET_IFNAME": "lo"}.items():
        monkeypatch.setenv(k, v)
    assert not dist.is_initialized()
    ctx = runtime.context_from_env()
    runtime.init_group(ctx)
    try:
        yield ctx
    finally:
        gc.collect()  # a DDP model left in a cycle must go before its group: freed after, it can hang
        if dist.is_initialized():
            dist.destroy_process_group()


def test_faulty_worker_hangs_on_its_rank(one_rank, monkeypatch, capsys):
    from perflab.distributed.workers import faulty

    naps = []

    class Stopped(Exception):
        pass

    def sleep(s):
        naps.append(s)
        if len(naps) > 2:
            raise Stopped  # what the launcher's SIGTERM does to the real rank

    monkeypatch.setattr(faulty, "time", SimpleNamespace(sleep=sleep))  # this module's clock only
    with pytest.raises(Stopped):
        faulty.body(one_rank, raise_on=None, hang_on=0, work_s=0.0)
    assert naps == [0.0, 1.0, 1.0]
    assert "rank 0: stuck (sleeping until stopped)" in capsys.readouterr().out
