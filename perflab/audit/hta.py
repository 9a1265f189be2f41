"""Where one rank's device time goes, as HolisticTraceAnalysis (HTA; its source read at version 0.5.0)
defines it, and each step's compute and exposed communication.

* **temporal breakdown** (`temporal`): over the span from the first to the last GPU event analysed,
  *idle* is the time no GPU event runs, *compute* the union of compute kernels, and the rest is HTA's
  *non-compute*, which perflab splits into communication (NCCL kernels), memory copies and sets
  (`Memcpy`, `Memset`, `dma`) and other (events HTA counts as neither, e.g. CUDA syncs on the device);
* **idle split** (`idle_breakdown`), as HTA's idle-time breakdown defines it, stream by stream: a gap
  before a kernel whose launch on the host came after the previous kernel ended is *host wait* (the
  host was late); otherwise a gap shorter than 30 trace units (µs in torch's traces; HTA's
  `consecutive_kernel_delay`) is *kernel wait* (the cost of launching back-to-back kernels), and any
  other gap is *other* (e.g. a compute kernel waiting on an event of a communication kernel);
* **per step** (`per_step`): each ProfilerStep's length, its compute, its communication and the
  communication no compute kernel hides (*exposed*). A GPU event belongs to the step whose host range
  holds its launch.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from perflab.audit.rank_trace import GpuEvent, RankTrace, Span, length, merge, overlap

# the events HTA's idle-time breakdown reads (it leaves out CUDA sync events)
IDLE_CATS = ("kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy", "mtia_ccp_events")
KERNEL_WAIT_US = 30  # HTA's default consecutive_kernel_delay, in the trace's unit (µs)
SHARES = ("compute", "communication", "memory", "other", "idle")
IDLE_KINDS = ("host_wait", "kernel_wait", "other")


@dataclass(frozen=True)
class Temporal:
    """HTA's temporal breakdown in seconds: the window (first start to last end) and each share of
    SHARES, which add up to it; `non_compute` is HTA's (communication + memory + other)."""

    window: float
    compute: float
    communication: float
    memory: float
    other: float
    idle: float
    non_compute: float

    def seconds(self) -> dict[str, float]:
        """share → seconds, for every share of SHARES."""
        return {k: getattr(self, k) for k in SHARES}


def temporal(events: list[GpuEvent]) -> Temporal:
    """HTA's temporal breakdown of one rank's GPU events, with its non-compute time split in three."""
    every = merge([(g.start, g.end) for g in events])
    if not every:  # no GPU event in the window, or events of no length
        return Temporal(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    window = every[-1][1] - every[0][0]
    busy = length(every)
    comp = merge([(g.start, g.end) for g in events if g.kind == "compute"])
    comm = merge([(g.start, g.end) for g in events if g.kind == "communication"])
    comp_comm = merge(comp + comm)
    mem = merge([(g.start, g.end) for g in events if g.kind == "memory"])
    compute = length(comp)
    communication = length(comm) - overlap(comm, comp)
    memory = length(mem) - overlap(mem, comp_comm)
    idle = window - busy
    other = max(busy - compute - communication - memory, 0.0)
    us = 1e-6
    return Temporal(window * us, compute * us, communication * us, memory * us, other * us, idle * us,
                    (window - compute - idle) * us)


def idle_breakdown(events: list[GpuEvent], launch_ts: dict[int, float],
                   kernel_wait_us: float = KERNEL_WAIT_US) -> dict[int, dict[str, float]]:
    """HTA's idle-time breakdown, stream by stream: stream → {host_wait, kernel_wait, other} in seconds."""
    by_stream: dict[int, list[GpuEvent]] = defaultdict(list)
    for g in events:
        if g.cat in IDLE_CATS and g.stream >= 0:
            by_stream[g.stream].append(g)
    out: dict[int, dict[str, float]] = {}
    for stream, ks in sorted(by_stream.items()):
        ks.sort(key=lambda g: g.start)
        acc = dict.fromkeys(IDLE_KINDS, 0.0)
        for prev, k in zip(ks, ks[1:]):
            gap = k.start - prev.end
            launched = launch_ts.get(k.correlation)
            if launched is not None and launched > prev.end:
                acc["host_wait"] += gap
            elif gap < kernel_wait_us:
                acc["kernel_wait"] += gap
            else:
                acc["other"] += gap
        out[stream] = {k: v * 1e-6 for k, v in acc.items()}
    return out


def ratios(split: dict[str, float]) -> dict[str, float | None]:
    """Each part's share of the whole (None for all when the whole is 0)."""
    total = sum(split.values())
    return {k: (v / total if total > 0 else None) for k, v in split.items()}


@dataclass(frozen=True)
class StepFigures:
    """One ProfilerStep of one rank, in seconds, and its collectives [(name, start µs, end µs)]."""

    step_s: float
    compute_s: float
    comm_s: float
    exposed_comm_s: float  # communication while no compute runs
    collectives: list[tuple[str, float, float]] = field(default_factory=list)


def _step_of(ts: float, steps: list[tuple[int, Span]]) -> int | None:
    for n, (s, e) in steps:
        if s <= ts < e:
            return n
    return None


def per_step(rt: RankTrace) -> dict[int, StepFigures]:
    """Step number → its figures. A GPU event belongs to the step whose host range holds its launch."""
    order = sorted(rt.steps.items(), key=lambda kv: kv[1][0])
    comp: dict[int, list[Span]] = defaultdict(list)
    comm: dict[int, list[tuple[str, Span]]] = defaultdict(list)
    calls: dict[int, list[Span]] = defaultdict(list)  # CPU traces: the main thread's collective calls
    if rt.on_gpu:
        for g in rt.gpu:
            n = _step_of(rt.launch_ts.get(g.correlation, g.start), order)
            if n is None:
                continue
            if g.kind == "compute":
                comp[n].append((g.start, g.end))
            elif g.kind == "communication":
                comm[n].append((g.name, (g.start, g.end)))
    else:
        for sp in rt.cpu_compute:
            n = _step_of(sp[0], order)
            if n is not None:
                comp[n].append(sp)
        for name, sp in rt.cpu_comm:
            n = _step_of(sp[0], order)
            if n is not None:
                comm[n].append((name, sp))
        for _name, sp in rt.cpu_calls:
            n = _step_of(sp[0], order)
            if n is not None:
                calls[n].append(sp)
    out = {}
    for n, (s, e) in order:
        c = merge(comp[n])
        k = merge([sp for _, sp in comm[n]] + calls[n])
        out[n] = StepFigures((e - s) * 1e-6, length(c) * 1e-6, length(k) * 1e-6, (length(k) - overlap(k, c)) * 1e-6,
                             sorted(((nm, sp[0], sp[1]) for nm, sp in comm[n]), key=lambda x: x[1]))
    return out
