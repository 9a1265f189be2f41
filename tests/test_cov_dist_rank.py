"""The rank bodies of perflab.distributed, called in this process inside a one-rank gloo group (a FileStore in
a temporary folder: no port, no torchrun), and one forked peer where a collective needs two ranks."""

from __future__ import annotations

import datetime
import gc
import json
import multiprocessing as mp
import os
import sys
from argparse import Namespace
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from perflab.core.results import jsonable
from perflab.distributed import busbw as B
from perflab.distributed import collectives as C
from perflab.distributed.workers import runtime

CPU = torch.device("cpu")


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


# ----------------------------------------------------------------------------- busbw's collectives
@pytest.mark.parametrize("op", [op for op in B.OPS if op != "send_recv"])
def test_every_busbw_collective_checks_out_on_one_rank(one_rank, op):
    run, check = B.make_op(op, 64, 1, 0, CPU)
    assert check() is True
    run()  # the timed call, on the buffers check() left zeroed


def _send_recv_peer(store: str) -> None:
    code = 1
    try:
        dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=1, world_size=2,  # pyright: ignore[reportPrivateImportUsage]  # public, documented; absent from __all__
                                timeout=datetime.timedelta(seconds=30))
        _run, check = B.make_op("send_recv", 64, 2, 1, CPU)
        code = 0 if check() else 3
        dist.destroy_process_group()
    finally:
        sys.stdout.flush()
        os._exit(code)


def test_send_recv_passes_each_rank_its_left_neighbours_buffer(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    store = str(tmp_path / "store")
    peer = mp.get_context("fork").Process(target=_send_recv_peer, args=(store,))
    peer.start()
    try:
        dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=0, world_size=2,  # pyright: ignore[reportPrivateImportUsage]  # public, documented; absent from __all__
                                timeout=datetime.timedelta(seconds=30))
        run, check = B.make_op("send_recv", 64, 2, 0, CPU)
        assert check() is True  # rank 0 got rank 1's buffer (all 2.0)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        peer.join(30)
    assert peer.exitcode == 0


# ----------------------------------------------------------------------------- collectives: the fallback
def test_check_all_runs_the_equivalent_where_the_backend_lacks_a_primitive(one_rank, monkeypatch):
    native = C._native

    def lacking(primitive, *a, **kw):
        if primitive == "reduce_scatter":
            raise RuntimeError("ProcessGroupGloo does not support reduce_scatter\nmore detail")
        return native(primitive, *a, **kw)

    monkeypatch.setattr(C, "_native", lacking)
    out = C.check_all(0, 1, check_k=8, primitives=("reduce_scatter", "all_reduce"))
    rs = out["reduce_scatter"]
    assert rs["native"] is False and rs["native_error"] == "ProcessGroupGloo does not support reduce_scatter"
    assert rs["ok"] is True and rs["equivalent_ok"] is True and rs["seconds"] is None
    assert out["all_reduce"]["native"] is True


def test_check_all_lets_a_real_failure_through(one_rank, monkeypatch):
    def broken(*a, **kw):
        raise RuntimeError("Connection closed by peer")

    monkeypatch.setattr(C, "_native", broken)
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        C.check_all(0, 1, check_k=8, primitives=("all_reduce",))


# ----------------------------------------------------------------------------- workers
def test_lab06_worker_reports_a_result_of_the_wrong_shape(one_rank, tmp_path):
    from perflab.distributed.workers import lab06_ring

    student = tmp_path / "student.py"
    student.write_text("def ring(x, rank, world_size):\n    return x[:1]\n")
    out = lab06_ring.body(one_rank, Namespace(file=str(student), name="ring", numels="8"))
    row = out["rows"][0]
    assert row["shape_ok"] is False and row["shape"] == [1] and row["max_rel_error"] is None


def test_lab06_worker_refuses_a_file_python_cannot_load(tmp_path):
    from perflab.distributed.workers import lab06_ring

    notes = tmp_path / "ring.txt"
    notes.write_text("def ring(x, rank, world_size): ...\n")
    with pytest.raises(ImportError, match="cannot load .*ring.txt as a Python module"):
        lab06_ring.load(str(notes), "ring")


def test_watch_communication_skips_collectives_this_torch_lacks(one_rank, monkeypatch):
    from perflab.distributed.workers import lab06_ring

    monkeypatch.delattr(dist, "all_to_all_single")
    with lab06_ring.watch_communication() as seen:
        dist.all_reduce(torch.ones(2))
    assert seen["collectives"] == ["all_reduce"]
    assert not hasattr(dist, "all_to_all_single")


def test_ddp_worker_joins_without_the_memory_probe(one_rank):
    from perflab.distributed.workers import ddp as worker

    out = worker.body(one_rank, Namespace(experiments="", gas=1, steps=1, hook_steps=4, width=8))
    assert set(out["seconds"]) == {"init"} and dist.is_initialized()


def test_comm_hooks_lets_a_refused_hook_through_unless_it_is_bf16(one_rank, monkeypatch):
    from perflab.distributed import ddp

    monkeypatch.setattr(ddp, "_hook", lambda name, holder: (None, "not a function"))
    with pytest.raises(TypeError, match="must be callable"):
        ddp.comm_hooks(one_rank, hooks=("fp16",), steps=1, width=8, depth=1, mbs=2)


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


def test_listening_addresses_skips_processes_it_may_not_read(monkeypatch):
    import psutil

    from perflab.distributed.workers import collectives as worker

    def denied(pid):
        raise psutil.AccessDenied(pid)

    monkeypatch.setattr(psutil, "Process", denied)
    assert worker.listening_addresses() == []


# ----------------------------------------------------------------------------- runtime
def test_results_of_any_type_become_json():
    import numpy as np

    text = json.dumps({"t": torch.tensor([1.0, 2.0]), "f": np.float32(0.5), "o": Namespace(a=1), "d": 3 + 0j},
                      default=jsonable)
    assert json.loads(text) == {"t": [1.0, 2.0], "f": 0.5, "o": "Namespace(a=1)", "d": "(3+0j)"}


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
