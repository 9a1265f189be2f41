"""Tests of `perflab.distributed.workers.runtime`."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from perflab.distributed.workers import runtime


# ----------------------------------------------------------------------------- workers
def test_watch_communication_skips_collectives_this_torch_lacks(one_rank, monkeypatch):
    from perflab.distributed.workers import lab06_ring

    monkeypatch.delattr(dist, "all_to_all_single")
    with lab06_ring.watch_communication() as seen:
        dist.all_reduce(torch.ones(2))
    assert seen["collectives"] == ["all_reduce"]
    assert not hasattr(dist, "all_to_all_single")


def test_rank_context_from_a_broken_or_gpu_environment(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "four")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.delenv(runtime.ENV_BACKEND, raising=False)
    monkeypatch.delenv(runtime.ENV_RUN_DIR, raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    ctx = runtime.context_from_env()
    assert ctx.world_size == 1  # not a number: the default
    assert ctx.backend == "nccl" and ctx.device == torch.device("cuda", 1) and ctx.run_dir is None
    assert runtime.default_backend(4) == "gloo"  # 4 local ranks, 2 GPUs


def test_record_error_outside_a_launch_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(runtime.ENV_RUN_DIR, raising=False)
    monkeypatch.chdir(tmp_path)
    runtime.record_error(ValueError("boom"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("code, recorded", [(3, True), (0, False)])
def test_run_records_a_failing_exit_only(tmp_path, monkeypatch, code, recorded):
    monkeypatch.setenv(runtime.ENV_RUN_DIR, str(tmp_path))
    monkeypatch.setenv("RANK", "0")

    def body(ctx):
        sys.exit(code)

    with pytest.raises(SystemExit):
        runtime.run(body, "gloo", init=False)
    err = tmp_path / "rank0.error.json"
    assert err.exists() is recorded
    if recorded:
        assert json.loads(err.read_text())["type"] == "SystemExit"


def test_run_ends_an_execd_rank_with_os_exit(tmp_path, monkeypatch):
    monkeypatch.setenv(runtime.ENV_RUN_DIR, str(tmp_path))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv(runtime.FORKED_ENV, raising=False)
    exits = []

    class Exited(Exception):
        pass

    def _exit(code):
        exits.append(code)
        raise Exited

    monkeypatch.setattr(runtime.os, "_exit", _exit)
    with pytest.raises(Exited):
        runtime.run(lambda ctx: {"x": 1}, "gloo", init=False)
    assert exits == [0]
    assert json.loads((tmp_path / "rank0.result.json").read_text()) == {"x": 1}
    assert (tmp_path / "rank0.done").exists()


def test_the_bf16_hook_returns_the_averaged_bucket_rounded_to_bf16(one_rank):
    """What DDP gets back from the hook: its bucket, all-reduced in bf16, averaged over the ranks
    (one here) and copied back into the fp32 buffer."""
    from perflab.distributed import ddp

    buf = torch.tensor([1.0, 1.0 + 2**-10, -3.0, 1e-3])
    bucket = SimpleNamespace(buffer=lambda: buf)
    out = ddp.bf16_compress_equivalent(None, bucket).wait()
    want = torch.tensor([1.0, 1.0 + 2**-10, -3.0, 1e-3]).to(torch.bfloat16).float()
    assert out is buf and torch.equal(buf, want) and buf[1] == 1.0  # 2^-10 is below bf16's step at 1
