"""What a trace says about operators: the top-ops table, the timeline's lanes, GEMM efficiency, Tensor Cores.

    >>> top_ops(trace, n=10)           # DataFrame: op, calls, CPU self time, device time, share
    >>> lanes(trace)                   # {'main thread': [...], 'DataLoader': [...], 'device': [...]}
    >>> eff = gemm_efficiency(trace, ceiling_tflops=...)   # GemmEfficiency: each GEMM's TFLOP/s vs lesson 04's ceiling
    >>> eff.gemm_share, eff.table()
    >>> tensor_core_share(trace)       # GPU traces: TensorCoreShare of kernel time in Tensor Core kernels (heuristic)
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from perflab.core.quietness import Quietness
from perflab.profiling.trace import DATA_RE, DEVICE_CATS, Trace, load

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
# Kernel-name patterns of NVIDIA's Tensor Core GEMM/conv kernels (cuBLAS/cuDNN/CUTLASS naming):
# HMMA/IMMA/WGMMA instructions, "xmma"/"tensorop" kernels, the 16816/1688 MMA shapes, Hopper's
# "gmma" kernels, cutlass "tensorop" names. A heuristic: names are not a contract and change
# between library versions; Nsight Compute's tensor-pipe counters are the measurement.
TENSOR_CORE_RE = re.compile(r"hmma|imma|wgmma|gmma|xmma|tensorop|16816|1688|884|s16816|_tn_|cutlass.*(f16|bf16|tf32)",
                            re.I)


def self_times(t: Trace) -> dict[str, list[float]]:
    """op name → [calls, total time, self time (minus time in ops nested inside it), device time] on the main thread."""
    ops = [e for e in t.host_events() if e.cat == "cpu_op"]
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    stack: list[Any] = []
    child: dict[int, float] = defaultdict(float)
    for i, e in enumerate(ops):
        while stack and ops[stack[-1]].end <= e.start:
            stack.pop()
        if stack:
            child[stack[-1]] += e.dur
        stack.append(i)
    for i, e in enumerate(ops):
        r = out[e.name]
        r[0] += 1
        r[1] += e.dur
        r[2] += max(e.dur - child[i], 0.0)
    if t.on_gpu:  # device time of the kernels each op launched (linked by 'External id')
        by_ext = {e.args.get("External id"): e.name for e in ops if e.args.get("External id") is not None}
        for e in t.events:
            if e.cat in DEVICE_CATS:
                name = by_ext.get(e.args.get("External id"))
                if name is not None:
                    out[name][3] += e.dur
    return out


def top_ops(trace, n: int = 10, by: str = "self"):
    """The top `n` ops by CPU self time (or device time with by='device'), per profiled step."""
    import pandas as pd

    from perflab.core.readout import percent, seconds

    t = load(trace)
    k = max(len(t.steps), 1)
    step = sum(s.dur for s in t.steps) / k
    rows = sorted(self_times(t).items(), key=lambda kv: -(kv[1][3] if by == "device" else kv[1][2]))[:n]
    return pd.DataFrame([{"op": name, "calls per step": round(r[0] / k, 1), "CPU total": seconds(r[1] / k),
                          "CPU self": seconds(r[2] / k), "device": seconds(r[3] / k) if t.on_gpu else "—",
                          "self, share of step": percent(r[2] / k / step) if step else "—"} for name, r in rows])


def lanes(trace) -> dict[str, list[tuple[float, float, str]]]:
    """The timeline's lanes: the main thread's outermost ranges, DataLoader fetches (and loader
    threads' work), and the device's ops (the compute ops of the main thread on a CPU trace)."""
    t = load(trace)
    main = [e for e in t.host_events() if e.cat in ("cpu_op", "user_annotation")]
    top, end = [], -1.0
    for e in main:
        if e.start >= end:
            top.append((e.start, e.dur, e.name))
            end = e.end
    data = [(e.start, e.dur, e.name) for e in t.events if DATA_RE.search(e.name)]
    device = [(i.start, i.dur, i.name) for i in t.device_ops()]
    return {"main thread": top, "DataLoader": data, "device": device}


@dataclass
class GemmCall:
    """One GEMM op of a trace: its op, its shape (m×k×n, or b×m×k×n when batched), FLOPs and seconds."""

    op: str
    shape: str
    flops: float
    seconds: float  # its kernels' device time on a GPU trace, the op's own time on a CPU trace


def gemm_shapes(t: Trace) -> list[GemmCall]:
    """Every GEMM op with its shapes ('Input Dims', needs record_shapes=True), FLOPs and time."""
    ext_dev: dict[Any, float] = defaultdict(float)
    if t.on_gpu:
        for e in t.events:
            if e.cat == "kernel":
                ext_dev[e.args.get("External id")] += e.dur
    out = []
    for e in t.host_events():
        if e.cat != "cpu_op" or e.name not in GEMM_OPS:
            continue
        dims = e.args.get("Input Dims") or []
        try:
            if e.name == "aten::mm":
                (m, k), (_, n) = dims[0], dims[1]
                b = 1
            elif e.name == "aten::addmm":
                (m, k), (_, n) = dims[1], dims[2]
                b = 1
            elif e.name == "aten::bmm":
                (b, m, k), (_, _, n) = dims[0], dims[1]
            else:  # baddbmm
                (b, m, k), (_, _, n) = dims[1], dims[2]
        except (ValueError, TypeError, IndexError):
            continue
        secs = ext_dev.get(e.args.get("External id"), 0.0) if t.on_gpu else e.dur
        if secs <= 0:
            continue
        out.append(GemmCall(e.name, f"{b}×{m}×{k}×{n}" if b > 1 else f"{m}×{k}×{n}", 2.0 * b * m * n * k, secs))
    return out


@dataclass
class GemmRow:
    """The GEMMs of one op and shape, per profiled step."""

    gemm: str  # 'op m×k×n' (b×m×k×n if batched)
    calls: float  # per step, averaged
    tflops: float  # achieved, time-weighted
    seconds: float  # per step
    of_ceiling: float  # tflops / the ceiling


@dataclass
class GemmEfficiency:
    """A step's GEMMs against a ceiling (lesson 04's MAMF), seconds per step: in GEMMs, what they would
    take at the ceiling, what is still to win there, and the step's time outside GEMMs (where the rest
    of the win must come from)."""

    step_s: float
    gemm_s: float
    gemm_share: float  # of the step
    achieved_tflops: float  # the GEMMs' FLOPs over their time
    ceiling_tflops: float
    time_weighted_efficiency: float  # achieved / ceiling
    ideal_gemm_s: float  # the GEMMs at the ceiling
    winnable_in_gemms_s: float
    outside_gemms_s: float
    gemms: list[GemmRow] = field(default_factory=list)  # slowest first

    def table(self, n: int = 8):
        """The `n` GEMMs taking the most time per step, as readable strings."""
        import pandas as pd

        from perflab.core.readout import num, percent, seconds

        # the shape reads m×k×n (an mm/addmm) or b×m×k×n (a batched bmm/baddbmm); calls are per step, averaged
        return pd.DataFrame([{"GEMM: op, m×k×n (b×m×k×n if batched)": r.gemm,
                              "calls per step": f"{r.calls:g}" if abs(r.calls - round(r.calls)) < 1e-9
                              else num(r.calls, 2), "per step": seconds(r.seconds),
                              "TFLOP/s": num(r.tflops), "of ceiling": percent(r.of_ceiling)}
                             for r in self.gemms[:n]])


    def text(self, source: str = "") -> str:
        """The ceiling, the GEMMs' share and efficiency, and where the rest of the step is, in three lines."""
        from perflab.core.readout import num, percent, seconds

        return (f"ceiling {num(self.ceiling_tflops)} TFLOP/s{f' ({source})' if source else ''}\n"
                f"GEMMs: {seconds(self.gemm_s)} of a {seconds(self.step_s)} step ({percent(self.gemm_share)}), "
                f"time-weighted {num(self.achieved_tflops)} TFLOP/s = {percent(self.time_weighted_efficiency)} of the ceiling\n"
                f"at most {seconds(self.winnable_in_gemms_s)} to win inside GEMMs; {seconds(self.outside_gemms_s)} of the "
                "step is elsewhere")


@dataclass(frozen=True)
class Ceiling:
    """The matmul ceiling GEMMs are judged against, where it comes from, and (measured now) the machine
    while it was measured (`perflab.core.quietness`; None for a stored search, admitted only when quiet)."""

    tflops: float
    source: str
    quietness: Quietness | None = None

    def line(self) -> str:
        """Where the ceiling comes from, with a disturbed measurement said so."""
        if self.quietness is not None and self.quietness.disturbed:
            return f"{self.source}; {self.quietness.line()}: a busy machine's ceiling: this device's may be higher"
        return self.source


def ceiling(device, dtype: str, n: int, rep_ms: float) -> Ceiling:
    """Lesson 04's MAMF search stored for `device` and `dtype`, or else one n³ matmul measured now (on a CPU on
    one thread, as `faults.profile_step` runs the step)."""
    import torch

    from perflab.core.measure import measure_matmul
    from perflab.gemm.mamf import measured_ceiling

    stored = measured_ceiling(device, dtype)
    if stored is not None:
        return Ceiling(float(stored), "lesson 04's MAMF search on this device")
    on_gpu = getattr(device, "type", str(device)) == "cuda"
    threads = torch.get_num_threads()
    if not on_gpu:
        torch.set_num_threads(1)
    try:
        res = measure_matmul(n, n, n, dtype, device, rep_ms=rep_ms)
    finally:
        torch.set_num_threads(threads)
    return Ceiling(res.tflops, f"one {n}³ {dtype} matmul measured now{'' if on_gpu else ' on one thread, like the step'}; "
                               "no lesson 04 search is stored for this device", res.quietness)


def gemm_efficiency(trace, ceiling_tflops: float) -> GemmEfficiency:
    """Each GEMM's achieved TFLOP/s against `ceiling_tflops` (lesson 04's measured MAMF), time-weighted."""
    t = load(trace)
    k = max(len(t.steps), 1)
    step = sum(s.dur for s in t.steps) / k
    g = gemm_shapes(t)
    rows: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for r in g:
        x = rows[f"{r.op} {r.shape}"]
        x[0] += 1
        x[1] += r.flops
        x[2] += r.seconds
    gemm_s = sum(r.seconds for r in g) / k
    ideal_s = sum(r.flops for r in g) / (ceiling_tflops * 1e12) / k
    winnable = sum(max(r.seconds - r.flops / (ceiling_tflops * 1e12), 0.0) for r in g) / k
    achieved = (sum(r.flops for r in g) / k / gemm_s / 1e12) if gemm_s else 0.0
    table = [GemmRow(name, v[0] / k, v[1] / v[2] / 1e12, v[2] / k, v[1] / v[2] / 1e12 / ceiling_tflops)
             for name, v in rows.items()]
    table.sort(key=lambda r: -r.seconds)
    return GemmEfficiency(step_s=step, gemm_s=gemm_s, gemm_share=gemm_s / step if step else 0.0,
                          achieved_tflops=achieved, ceiling_tflops=ceiling_tflops,
                          time_weighted_efficiency=achieved / ceiling_tflops if ceiling_tflops else 0.0,
                          ideal_gemm_s=ideal_s, winnable_in_gemms_s=winnable,
                          outside_gemms_s=max(step - gemm_s, 0.0), gemms=table)


@dataclass
class TensorCoreShare:
    """GPU traces: kernel time in kernels whose names match `pattern` (a name heuristic)."""

    kernel_s: float
    tensor_core_s: float
    share: float  # tensor_core_s / kernel_s
    pattern: str
    top_kernels: list[tuple[str, float]]  # the five matching kernels with the most time, seconds


def tensor_core_line(trace) -> str:
    """`tensor_core_share` in a sentence, or why a CPU trace has none."""
    from perflab.core.readout import percent

    tc = tensor_core_share(trace)
    if tc is None:
        return "Tensor Core share: GPU traces only (kernel names; no kernels on a CPU)"
    return f"{percent(tc.share)} of kernel time in kernels whose names match {tc.pattern!r} (a heuristic)"


def tensor_core_share(trace) -> TensorCoreShare | None:
    """GPU traces: the share of kernel time in kernels whose names match TENSOR_CORE_RE (a name
    heuristic, see above). None on a CPU trace (no kernels, no Tensor Cores)."""
    t = load(trace)
    if not t.on_gpu:
        return None
    total, tc = 0.0, 0.0
    names: dict[str, float] = defaultdict(float)
    for e in t.events:
        if e.cat == "kernel":
            total += e.dur
            if TENSOR_CORE_RE.search(e.name):
                tc += e.dur
                names[e.name] += e.dur
    return TensorCoreShare(total, tc, tc / total if total else 0.0, TENSOR_CORE_RE.pattern,
                           sorted(names.items(), key=lambda kv: -kv[1])[:5])
