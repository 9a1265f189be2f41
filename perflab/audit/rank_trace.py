"""One rank's profiler trace, read for the job audit (`perflab.audit.trace`): its ProfilerStep ranges, its
GPU events classified as HolisticTraceAnalysis (HTA; its source read at version 0.5.0) classifies them,
which host event launched each, and the spans arithmetic the breakdowns use.

* A GPU event is *communication* (an NCCL kernel), *memory* (`Memcpy`, `Memset`, `dma`), *compute*
  (anything else but CUDA syncs) or *other*, by its name, in HTA's order of precedence (`kernel_type`).
* Like HTA, when the job has two or more `ProfilerStep`s the events analysed are those launched by a
  host event that began before the rank's last ProfilerStep (HTA leaves the last step out: it may be
  cut short; `hta_filter`).
* A trace with fractional (ns-resolution) timestamps is rounded to whole µs as HTA rounds it: start up,
  end down.
* A CPU-only trace (gloo ranks) has no GPU events: the device is then perflab's CPU notion
  (`perflab.profiling.trace`: the main thread's outermost compute ops), communication the collectives
  (on gloo's own threads, where gloo runs them) and the host's collective calls.

A trace that cannot serve (no ProfilerStep, no rank among several) raises `InputError` with one line
naming its file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflab.core.errors import InputError
from perflab.profiling.trace import Trace, wait_kind

# HTA's kernel classes (hta/utils/utils.py: get_kernel_type), in its order of precedence
NCCL_KERNEL_RE = re.compile(r"^nccl.*Kernel")
MEMORY_KERNEL_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
DEVICE_SYNC_NAMES = ("Event Sync", "Context Sync")  # on stream -1 but on the GPU, for HTA
STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")


def kernel_type(name: str) -> str:
    """'communication', 'memory', 'compute' or 'other', as HTA classifies a GPU event by its name."""
    if NCCL_KERNEL_RE.match(name):
        return "communication"
    if MEMORY_KERNEL_RE.match(name):
        return "memory"
    if not NOT_COMPUTE_RE.match(name):
        return "compute"
    return "other"


# ------------------------------------------------------------------------------- spans (µs)
Span = tuple[float, float]


def merge(spans: list[Span]) -> list[Span]:
    """The union of `spans` as sorted, disjoint spans."""
    out: list[Span] = []
    for s, e in sorted(spans):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def length(merged: list[Span]) -> float:
    return sum(e - s for s, e in merged)


def overlap(a: list[Span], b: list[Span]) -> float:
    """Time covered by both of two merged span lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


# ------------------------------------------------------------------------------- one rank's trace
@dataclass(frozen=True)
class GpuEvent:
    name: str
    cat: str
    start: float  # µs, the trace's own clock
    end: float
    stream: int
    correlation: int
    kind: str  # kernel_type(name)


def _time(v: Any) -> bool:
    """A timestamp or duration a trace can hold: a finite number (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _args(e: dict[str, Any]) -> dict[str, Any]:
    a = e.get("args")
    return a if isinstance(a, dict) else {}


def _int_or(v: Any, default: int) -> int:
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return default


@dataclass
class RankTrace:
    """The parts of one rank's trace the job audit reads (times in µs on the trace's clock)."""

    path: Path
    rank: int
    world_size: int | None
    device_name: str | None
    steps: dict[int, Span]  # ProfilerStep number → host range
    on_gpu: bool
    gpu: list[GpuEvent]  # every GPU event (stream ≥ 0)
    launch_ts: dict[int, float]  # correlation → ts of the host event that launched it
    hta_gpu: list[GpuEvent]  # the GPU events HTA keeps (launched before the last ProfilerStep began)
    cpu_compute: list[Span] = field(default_factory=list)  # CPU traces: perflab's device ops
    cpu_comm: list[tuple[str, Span]] = field(default_factory=list)  # CPU traces: the collectives, matched across ranks
    cpu_calls: list[tuple[str, Span]] = field(default_factory=list)  # CPU traces: the main thread's collective calls
    clock_offset_us: float = 0.0  # added to the trace's ts to give µs since the epoch, when known
    last_step_start: float = math.inf  # HTA's: the latest start of a host event named ProfilerStep

    @property
    def span(self) -> Span:
        lo = min(s for s, _ in self.steps.values())
        hi = max(e for _, e in self.steps.values())
        return lo + self.clock_offset_us, hi + self.clock_offset_us


def read_rank(path: Path, raw: Any, *, only_one: bool) -> RankTrace:
    """One rank's trace from its parsed JSON; InputError (one line, naming the file) when it cannot serve."""
    try:
        t = Trace(raw, str(path))
    except InputError as e:
        raise InputError(f"{path.name}: {e}") from None
    meta = t.raw
    dist = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else None
    rank = _int_or(dist.get("rank"), -1) if dist else -1
    if rank < 0:
        if not only_one:
            raise InputError(f"{path.name} has no distributedInfo rank, so its rank cannot be told from the others': "
                             "profile with torch.distributed initialised (the profiler then records the rank)")
        rank = 0
    world = _int_or(dist.get("world_size"), 0) if dist else 0
    props = meta.get("deviceProperties")
    names = ({str(p.get("name")) for p in props if isinstance(p, dict) and p.get("name")} if isinstance(props, list)
             else set())
    device = names.pop() if len(names) == 1 else None
    base_ns = meta.get("baseTimeNanoseconds")
    offset = float(base_ns) / 1e3 if isinstance(base_ns, (int, float)) and _time(base_ns) else 0.0

    evs = [e for e in meta["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") not in (None, "Trace")
           and _time(e.get("ts")) and _time(e.get("dur")) and e["dur"] >= 0]
    # HTA rounds a trace with fractional (ns-resolution) timestamps to whole µs: start up, end down
    frac = any(isinstance(e["ts"], float) for e in evs)

    def bounds(e) -> Span:
        s, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        return (math.ceil(s), math.floor(end)) if frac else (s, end)

    steps: dict[int, Span] = {}
    for e in evs:
        m = STEP_RE.search(str(e.get("name", "")))
        if m and e.get("tid") == t.main_tid and e.get("cat") != "gpu_user_annotation":
            steps[int(m.group(1))] = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
    if not steps:
        raise InputError(f"{path.name} has no ProfilerStep ranges: call prof.step() at the end of every training "
                         "step, so that every rank's steps can be told apart and compared")

    gpu: list[GpuEvent] = []
    host: list[dict[str, Any]] = []  # HTA's "CPU" side: everything that is not a GPU event
    for e in evs:
        args = _args(e)
        stream = _int_or(args.get("stream"), -1)
        corr = _int_or(args.get("correlation"), -1)
        name = str(e.get("name", ""))
        if (stream >= 0 and corr >= 0) or name in DEVICE_SYNC_NAMES:
            s, end = bounds(e)
            gpu.append(GpuEvent(name, str(e["cat"]), s, end, stream, corr, kernel_type(name)))
        else:
            host.append(e)
    launch: dict[int, float] = {}
    marks = [float(math.ceil(e["ts"]) if frac else e["ts"]) for e in host if "ProfilerStep" in str(e.get("name", ""))]
    for e in host:
        corr = _int_or(_args(e).get("correlation"), -1)
        if corr >= 0 and (corr not in launch or str(e.get("cat")) in ("cuda_runtime", "cuda_driver")):
            launch[corr] = float(math.ceil(e["ts"]) if frac else e["ts"])
    gpu.sort(key=lambda g: g.start)

    rt = RankTrace(path, rank, world or None, device, steps, bool(gpu), gpu, launch, gpu, clock_offset_us=offset,
                   last_step_start=max(marks) if marks else math.inf)
    if not gpu:  # a CPU trace: perflab's device notion
        t0 = min(float(e["ts"]) for e in meta["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"
                 and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float)))  # Trace's origin
        rt.cpu_compute = [(t0 + i.start * 1e6, t0 + i.end * 1e6) for i in t.device_ops()]
        end = -math.inf
        for i in t.waits():  # the outermost collective calls (c10d::allreduce_, not the gloo call inside it)
            if i.kind == "communication" and i.start >= end:
                rt.cpu_calls.append((i.name, (t0 + i.start * 1e6, t0 + i.end * 1e6)))
                end = i.end
        # the collectives themselves, where the backend runs them on threads of their own (gloo's
        # pt_gloo_runloop threads record gloo:all_reduce from start to end while the caller waits)
        rt.cpu_comm = sorted(((e.name, (t0 + e.start * 1e6, t0 + e.end * 1e6)) for e in t.events
                              if e.tid != t.main_tid and wait_kind(e.name) == "communication"), key=lambda x: x[1])
        if not rt.cpu_comm:
            rt.cpu_comm = rt.cpu_calls
    return rt


def hta_filter(rt: RankTrace, step_names: int) -> list[GpuEvent]:
    """The GPU events HTA analyses: with two or more ProfilerStep names in the job, those launched by a
    host event that began before this rank's last ProfilerStep (HTA's `_filter_irrelevant_gpu_kernels`)."""
    if step_names < 2:
        return rt.gpu
    kept = {c for c, ts in rt.launch_ts.items() if ts < rt.last_step_start}
    return [g for g in rt.gpu if g.correlation in kept]


def steps_text(steps: dict[int, Span]) -> str:
    """'ProfilerStep#N' or 'ProfilerStep#N–#M' of a rank's step numbers."""
    ns = sorted(steps)
    return f"ProfilerStep#{ns[0]}" + (f"–#{ns[-1]}" if len(ns) > 1 else "")
