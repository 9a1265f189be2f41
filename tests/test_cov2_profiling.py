"""More of profiling's edges: gaps whose nearby waits do not overlap them, ETTR's overflow guard,
the planted faults' fixes (DDP on a one-rank gloo group, DataLoader workers), the comm fault's
launchers (torchrun's arguments, forked ranks that raise, ranks that never report), the fused
op's comparison on a stand-in module and its build folder, lab 09's live traces perflab itself
misreads, and GEMMs and trace files that cannot be read."""

from __future__ import annotations

import gc
import json
import multiprocessing
import queue
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from test_profiling import _solution  # the lab 09 answer written out once, as a learner would

from perflab.core.errors import InputError, PerflabError
from perflab.profiling import diagnose, ettr, faults, kernel, lab09, ops, trace
from perflab.workload.models import preset

TINY = preset("tiny-gpt").with_(layers=1, hidden=32, heads=2, ffn=64, vocab=64, seq_len=16)

# ----------------------------------------------------------------------------- diagnose


def _gpu_step(kernels, host):
    """A one-step GPU trace (1 ms): kernels [(ts, dur)] on a stream, host events [(name, cat, ts, dur)]."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 1000.0}]
    ev += [{"ph": "X", "cat": "kernel", "name": "kernel_mm", "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": {}}
           for ts, dur in kernels]
    ev += [{"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur} for name, cat, ts, dur in host]
    return {"traceEvents": ev}


def test_a_wait_that_ended_before_the_gap_is_not_its_evidence():
    # the device idles 100-800 µs; a long sync covers it, a short item() inside it ended long before
    d = diagnose.diagnose(_gpu_step([(0, 100), (800, 200)], [("cudaStreamSynchronize", "cuda_runtime", 0, 900),
                                                               ("aten::item", "cpu_op", 10, 10)]))
    assert [(c.cause, round(c.seconds * 1e6, 6)) for c in d.causes] == [("host_sync", 700.0)]
    assert d.causes[0].evidence == [{"op": "cudaStreamSynchronize", "seconds": pytest.approx(7e-4), "count": 1}]


def test_a_wait_that_only_touches_the_gap_still_names_it():
    # the sync starts the instant the device resumes: no overlap, but the only wait at the gap
    d = diagnose.diagnose(_gpu_step([(0, 100), (800, 200)], [("aten::item", "cpu_op", 800, 50)]))
    assert [(c.cause, round(c.seconds * 1e6, 6)) for c in d.causes] == [("host_sync", 700.0)]
    assert d.unattributed_s == 0.0


# ----------------------------------------------------------------------------- ETTR


def test_exact_ettr_is_zero_where_the_exponential_overflows():
    assert ettr.ettr_exact(interval=800, ckpt_cost=0, restart=0, mtbf=1) == 0.0
    assert ettr.ettr_exact(interval=1, ckpt_cost=0, restart=800, mtbf=1) == 0.0
    assert ettr.ettr_exact(interval=600, ckpt_cost=0, restart=0, mtbf=1) > 0.0


# ----------------------------------------------------------------------------- the faults and their fixes


def test_a_fixed_run_expects_no_cause():
    def run(fault, fixed):
        return faults.ProfileRun(fault, fixed, "t.json", None, [], "tiny-gpt", 4, 64)

    assert [run("loader", False).expected, run("loader", True).expected, run("none", False).expected] == \
        ["data_wait", None, None]


def test_the_comm_fix_wraps_the_model_in_ddp(monkeypatch, tmp_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)  # pyright: ignore[reportPrivateImportUsage]
    made = model = loader = step = loss = None
    try:
        made = faults.make_step(TINY, "comm", fixed=True, batch=2, seq=8, n_batches=2)
        model, _, loader, step = made
        assert isinstance(model, DistributedDataParallel)
        loss = step(next(iter(loader)))
        assert torch.isfinite(loss) and all(p.grad is None for p in model.parameters())
    finally:
        # DDP's reducer holds the gloo group: freed after the group is destroyed, its destructor can
        # wait forever on gloo's threads (and no Python timeout fires inside it). Free it first.
        made = model = loader = step = loss = None
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


def test_the_loader_fix_starts_its_workers_before_the_steps():
    _, _, loader, _ = faults.make_step(TINY, "loader", fixed=True, batch=2, seq=8, n_batches=3,
                                       sizes=faults.FaultSizes(loader_ms=0))
    it = loader._iterator  # persistent workers, started by make_step
    try:
        assert (loader.num_workers, loader.prefetch_factor) == (4, 4)
        assert it is not None and len(it._workers) == 4 and all(w.is_alive() for w in it._workers)
    finally:
        if it is not None:
            it._shutdown_workers()


def test_the_fixed_comm_run_passes_fixed_to_its_ranks(monkeypatch, tmp_path):
    from perflab.distributed import torchrun

    seen = {}

    class Result:
        results = [{"wall_s": [0.25, 0.5]}, None]
        backend = SimpleNamespace(name="gloo")
        seconds = 3.5

        def raise_for_status(self):
            pass

    def launch(module, *, nproc, args, timeout, backend, env):
        seen.update(module=module, nproc=nproc, args=args, backend=backend)
        Path(args[args.index("--trace-out") + 1]).write_text(json.dumps(trace.synthetic_step("communication")))
        return Result()

    monkeypatch.setattr(torchrun, "launch", launch)
    path = tmp_path / "comm.json"
    run = faults.profile_step(fault="comm", fixed=True, steps=2, trace_out=path)
    assert seen == {"module": "perflab.profiling.comm_worker", "nproc": 2, "backend": "gloo",
                    "args": ["--preset", "tiny-gpt", "--steps", 2, "--batch", 4, "--seq", 64, "--trace-out",
                             str(path.resolve()), "--fixed"]}
    assert (run.fixed, run.wall_s, run.info) == (True, [0.25, 0.5], {"ranks": 2, "backend": "gloo", "launch_s": 3.5})
    assert run.diagnosis.top is not None and run.diagnosis.top.cause == "communication"


def test_forked_ranks_that_raise_are_reported(monkeypatch, tmp_path):
    def broken(rank, world, store_path, *args):  # what a broken torch.distributed does to each rank
        raise RuntimeError(f"gloo could not connect rank {rank} of {world}")

    monkeypatch.setattr(faults, "comm_rank", broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the run's store folder
    with pytest.raises(PerflabError) as e:
        faults.profile_step(fault="comm", launcher="fork", trace_out=tmp_path / "t.json", timeout=60)
    assert str(e.value) == ("the 2-rank comm run failed: rank 0: RuntimeError: gloo could not connect rank 0 of 2; "
                            "rank 1: RuntimeError: gloo could not connect rank 1 of 2")


def test_forked_ranks_that_never_report_are_killed(monkeypatch, tmp_path):
    procs = []

    class Queue:
        def get(self, timeout):
            raise queue.Empty

    class Process:
        def __init__(self, target, args, daemon):
            self.calls = []
            procs.append(self)

        def start(self):
            self.calls.append("start")

        def join(self, timeout=None):
            self.calls.append(("join", timeout))

        def is_alive(self):
            return True

        def kill(self):
            self.calls.append("kill")

    ctx = SimpleNamespace(Queue=Queue, Process=Process)
    monkeypatch.setattr(multiprocessing, "get_context", lambda method: ctx)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(PerflabError, match="^the 2-rank comm run did not finish within 7 s$"):
        faults.profile_step(fault="comm", launcher="fork", trace_out=tmp_path / "t.json", timeout=7)
    assert [p.calls for p in procs] == [["start", ("join", 5), "kill", ("join", None)]] * 2


def test_check_all_profiles_each_fault_in_turn(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # each run's trace folder
    runs = faults.check_all(faults=("none", "launch"), steps=1, batch=2, seq=16, sizes=faults.FaultSizes(launch_rows=20))
    assert [(r.fault, r.expected, len(r.wall_s), r.diagnosis.steps) for r in runs] == [
        ("none", None, 1, 1), ("launch", "launch_bound", 1, 1)]
    assert all(Path(r.trace_path).is_file() and Path(r.trace_path).is_relative_to(tmp_path) for r in runs)


# ----------------------------------------------------------------------------- the fused op


def test_compare_times_the_fused_op_and_finds_it_in_the_trace():
    # a stand-in for the compiled extension: the exact (erf) GELU, a hair from the tanh form eager runs
    k = kernel.Kernel(SimpleNamespace(fused_gelu_bias=lambda x, b: torch.nn.functional.gelu(x + b)), None)
    out = kernel.compare(k, rows=8, cols=4, rep_ms=1)
    assert out["in_trace"] is True and 0 < out["max_abs_diff"] < 1e-3
    assert out["speedup"] == out["eager_s"] / out["fused_s"]
    y = kernel.eager_gelu_bias(torch.zeros(2), torch.tensor([1.0, -1.0]))
    assert torch.allclose(y, torch.tensor([0.841192, -0.158808]), atol=1e-6)


def test_is_built_looks_in_the_extension_folder_and_survives_one_it_cannot_make(monkeypatch, tmp_path):
    # the folder is given here rather than made by torch's cpp_extension, whose import in a long-lived
    # test process depends on what imported distutils before it
    d = tmp_path / "ext" / kernel.NAME
    d.mkdir(parents=True)
    monkeypatch.setattr(kernel, "build_dir", lambda: d)
    assert not kernel.is_built()
    (d / f"{kernel.NAME}.so").write_bytes(b"")
    assert kernel.is_built()

    def cannot_make():
        raise FileExistsError(17, "File exists", str(tmp_path / "a_file"))  # a folder under a file

    monkeypatch.setattr(kernel, "build_dir", cannot_make)
    assert not kernel.is_built()


# ----------------------------------------------------------------------------- lab 09


def test_lab09_skips_live_traces_perflab_itself_misreads(tmp_path, capsys):
    from perflab.core import grading

    grading.reset()
    (tmp_path / "trace_A.json").write_text(json.dumps(trace.synthetic_step("data_wait")))
    (tmp_path / "trace_B.json").write_text(json.dumps(trace.synthetic_step(None)))  # a sync fault drowned out
    (tmp_path / ".key.json").write_text(json.dumps({"A": "loader", "B": "sync"}))
    assert lab09.check_name_cause(_solution, tmp_path)
    assert capsys.readouterr().out.strip() == "✓ name_cause: correct on 12 traces (1 live trace(s) too noisy to grade: B)"


# ----------------------------------------------------------------------------- GEMMs and trace files


def test_a_gemm_of_zero_duration_is_left_out():
    raw = trace.synthetic_step(None, steps=1)
    base = next(e for e in raw["traceEvents"] if e.get("name") == "aten::mm")
    raw["traceEvents"].append({**base, "ts": base["ts"] + 1, "dur": 0.0, "args": {"Input Dims": [[3, 5], [5, 7]]}})
    raw["traceEvents"].append({**base, "ts": base["ts"] + 2, "dur": 4.0, "args": {"Input Dims": [[3, 5], [5, 9]]}})
    shapes = [r["shape"] for r in ops.gemm_shapes(trace.load(raw))]
    assert "3×5×9" in shapes and "3×5×7" not in shapes


def test_a_folder_given_as_a_trace_file_is_one_line(tmp_path):
    with pytest.raises(InputError, match=f"^cannot read {tmp_path.name} as a JSON trace \\(IsADirectoryError\\): "
                                         "pass a file written by torch.profiler"):
        trace.read_raw(tmp_path)
