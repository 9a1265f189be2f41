"""Fixtures the tests of this folder (and workers/) share."""

import gc

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
