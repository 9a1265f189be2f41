"""The step's ops: calls and bytes of every aten op (a dispatch mode around the counted step), the top
ops by self time against this device's roofline (the measured matmul ceiling and copy bandwidth), and
the ops the FLOP counter has no formula for, each with its time, so their missing FLOPs are named.

Self times come from the profiled steps, read as lesson 09 reads a trace (`perflab.profiling.ops`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from perflab.audit.report import Ceilings, TopOp, Uncounted

if TYPE_CHECKING:
    from perflab.flops.counter import FlopCount
    from perflab.profiling.trace import Trace


class OpStats(TorchDispatchMode):
    """Per aten op: calls and bytes of its tensor inputs and outputs (a lower bound on its memory traffic);
    per (m, n, k) of every 2-D product (`mm`, `addmm`: a linear layer's forward and its two backward
    GEMMs): its FLOPs (`shapes`) and its calls (`gemm_calls`), what `perflab.audit.fp8` predicts fp8 for."""

    def __init__(self):
        super().__init__()
        self.calls: dict[str, int] = defaultdict(int)
        self.bytes: dict[str, int] = defaultdict(int)
        self.shapes: dict[tuple[int, int, int], int] = defaultdict(int)
        self.gemm_calls: dict[tuple[int, int, int], int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func._overloadpacket.__name__
        self.calls[name] += 1
        n = 0
        for t in (*args, *(out if isinstance(out, (tuple, list)) else (out,))):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                n += t.numel() * t.element_size()
        self.bytes[name] += n
        if name in ("mm", "addmm"):
            a, b = (args[0], args[1]) if name == "mm" else (args[1], args[2])
            if a.dim() == 2 and b.dim() == 2:
                mnk = (int(a.shape[0]), int(b.shape[1]), int(a.shape[1]))
                self.shapes[mnk] += 2 * mnk[0] * mnk[1] * mnk[2]
                self.gemm_calls[mnk] += 1
        return out


def uncounted(trace: Trace, fc: FlopCount) -> list[Uncounted]:
    """The products (and custom ops) the FLOP counter has no formula for, each with its calls and time in the profiled step
    (device time on a GPU), so their missing FLOPs are named, never filed silently under 'the rest'."""
    if not fc.uncounted:
        return []
    from perflab.profiling.ops import self_times

    times = self_times(trace)  # op → [calls, total s, self s, device s]
    k = max(len(trace.steps), 1)
    out = []
    for op, calls in sorted(fc.uncounted.items()):
        r = times.get(op)
        secs = ((r[3] if trace.on_gpu else r[1]) / k) if r else None
        out.append(Uncounted(op, int(calls), secs))
    return out


def bandwidth(dev: torch.device) -> float | None:
    """This device's measured copy bandwidth in bytes/s (a short measurement)."""
    from perflab.core.measure import measure_copy_bandwidth

    try:
        r = measure_copy_bandwidth(64 * 2**20 if dev.type == "cuda" else 16 * 2**20, dev, warmup_ms=10, rep_ms=40)
    except Exception:  # noqa: BLE001 - without it, ops are not marked bound
        return None
    return float(r.gbps) * 1e9


def top_ops(trace: Trace, fc: FlopCount, stats: OpStats, ceilings: Ceilings, n: int = 8) -> list[TopOp]:
    """The step's top ops by self time (device time on a GPU), with FLOPs, bytes, achieved rates and the
    bound `ceilings` (this device's roofline) gives them (None when either of its figures is unknown)."""
    from perflab.profiling.ops import self_times

    times = self_times(trace)
    k = max(len(trace.steps), 1)
    flops_by: dict[str, int] = defaultdict(int)
    for name, v in fc.by_op.items():
        flops_by[name.split(" (")[0]] += v
    rows = []
    for name, r in times.items():
        secs = (r[3] if trace.on_gpu else r[2]) / k
        if secs <= 0 or not name.startswith("aten::"):
            continue
        short = name.removeprefix("aten::")
        count = round(r[0] / k)
        if not stats.calls.get(short, 0):  # an op the counting pass did not see (e.g. under the profiler only)
            rows.append(TopOp(name, count, secs, None, None, None, None))
            continue
        f = flops_by.get(short, 0)
        b = stats.bytes.get(short, 0)
        bound = None
        if ceilings.flops and ceilings.bytes:
            intensity = f / b if b else float("inf")
            bound = "compute" if intensity >= ceilings.flops / ceilings.bytes else "memory"
        rows.append(TopOp(name, count, secs, int(f), int(b), f / secs if f else 0.0, b / secs if b else 0.0, bound))
    rows.sort(key=lambda r: -r.self_s)
    return rows[:n]
