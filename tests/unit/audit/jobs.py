"""Hand-built jobs for the job audit's tests: one rank's GPU trace whose answers are known by construction
(a planted straggler, a planted late arrival at a collective, a planted overlap of communication with
compute), a folder of them, and one GPU event."""

import json
from pathlib import Path

from perflab.audit.rank_trace import GpuEvent, kernel_type


def rank_trace(rank: int, world: int, *, steps=(1, 2, 3), step_us=10_000.0, compute_us=6_000.0, late_us=0.0,
               comm_us=2_000.0, overlap_us=0.0, device="NVIDIA H100 80GB HBM3", t0=1_700_000_000_000_000.0):
    """One rank's GPU trace: per step, a launch and a compute kernel of `compute_us` on stream 7, then an
    all-reduce on stream 13 launched `late_us` later than the other ranks' and starting `overlap_us`
    before the compute kernel ends. `step_us` is the host's ProfilerStep length."""
    ev = []
    corr = [0]

    def launch(ts, name, dur, stream):
        corr[0] += 1
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": ts - 2, "dur": 8.0,
                   "args": {}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
                   "dur": 4.0, "args": {"correlation": corr[0]}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts + 10, "dur": dur,
                   "args": {"stream": stream, "correlation": corr[0], "device": 0}})

    for i, n in enumerate(steps):
        s = t0 + i * step_us
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": s,
                   "dur": step_us, "args": {}})
        launch(s + 100, "ampere_sgemm_128x64_tn", compute_us, 7)
        launch(s + 100 + compute_us - overlap_us + late_us, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", comm_us, 13)
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
            "deviceProperties": [{"id": 0, "name": device}], "traceEvents": ev}


def write_job(folder: Path, traces) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, t in enumerate(traces):
        (folder / f"worker{i}.123.pt.trace.json").write_text(json.dumps(t))
    return folder


def ev(name, start, end, stream=7, corr=1, cat="kernel"):
    return GpuEvent(name, cat, start, end, stream, corr, kernel_type(name))
