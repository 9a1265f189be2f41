"""`perflab audit --trace DIR`: a whole job read from its ranks' profiler traces.

    >>> from perflab.audit.trace import audit_traces
    >>> rep = audit_traces("traces/")           # what tensorboard_trace_handler wrote on each rank
    >>> rep.json["ranks"][0]["shares"], rep.json["stragglers"]
    >>> print(rep.summary())

The folder holds one profiling cycle of one job: one Chrome trace per rank (`.json`, `.json.gz`,
`.pt.trace.json`), the rank read from the trace's `distributedInfo`. Per rank:

* **step time**: the `ProfilerStep#N` ranges (`prof.step()`) on the host;
* **where the device's time goes**, as HolisticTraceAnalysis (HTA; its source read at version 0.5.0)
  defines it in its temporal breakdown: over the span from the first to the last GPU event of the steps analysed, *idle* is the
  time no GPU event runs, *compute* the union of compute kernels, and the rest is HTA's *non-compute*,
  which perflab splits into communication (NCCL kernels), memory copies and sets (`Memcpy`, `Memset`,
  `dma`) and other (events HTA counts as neither, e.g. CUDA syncs on the device). Like HTA, when the
  job has two or more `ProfilerStep`s the steps analysed are those before the last one (HTA leaves
  it out: it may be cut short), and only the GPU events that host events of those steps launched count;
* **the idle split**, as HTA's idle-time breakdown defines it, stream by stream: a gap before a kernel
  whose launch on the host came after the previous kernel ended is *host wait* (the host was late);
  otherwise a gap shorter than 30 trace units (µs in torch's traces; HTA's `consecutive_kernel_delay`)
  is *kernel wait* (the cost of launching back-to-back kernels), and any other gap is *other* (e.g. a
  compute kernel waiting on an event of a communication kernel). The split of a rank adds the streams'
  gaps;
* **exposed communication** per step: the time communication kernels run while no compute kernel
  does (the collective time that overlap with compute did not hide).

Across ranks:

* **stragglers**: a rank whose median step time, or median compute time per step, stands out from
  the others' by the robust z-score of Iglewicz and Hoaglin, z = 0.6745 (x − median) / MAD > 3.5, the
  MAD (median absolute deviation) floored at 1 % of the median so that sub-percent differences never
  count. It needs at least 3 ranks; with fewer the slowest rank and the spread are given, no verdict.
  (The modified z-score and its 3.5 limit: B. Iglewicz and D. Hoaglin, "How to Detect and Handle
  Outliers", ASQC 1993, as the NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.5.17, gives it.)
* **waits in collectives**: the k-th communication kernel of one name in one step is taken to be the
  same collective on every rank (only where every rank ran as many of them; point-to-point sends and
  receives, which pair two ranks, are never matched); the rank that started it
  last held the others up, each for the time between its own start and the last start. This reads
  the ranks' clocks as one clock: true on one host, and to the clock sync's accuracy across hosts.
* **MFU** when the model's FLOPs per step are given (`mfu_of`): FLOPs per step ÷ (step time × GPUs ×
  the dense peak of the GPU the traces name, from perflab's hardware table). An unknown GPU gives
  "peak unknown", never another chip's figure.

A CPU-only trace (gloo ranks, as the lessons run here) has no GPU events: the device is then perflab's
CPU notion (`perflab.profiling.trace`: the main thread's outermost compute ops), communication the
collectives (on gloo's own threads, where gloo runs them) and the host's collective calls, and there
is no idle split (HTA defines it on GPU kernels only).

Bad input (no traces, traces of different jobs, ranks that profiled different steps) raises
`InputError` with one line saying what to change.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflab.core.errors import InputError
from perflab.profiling.trace import Trace, read_raw, trace_files, wait_kind

# HTA's kernel classes (hta/utils/utils.py: get_kernel_type), in its order of precedence
NCCL_KERNEL_RE = re.compile(r"^nccl.*Kernel")
MEMORY_KERNEL_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
# the events HTA's idle-time breakdown reads (it leaves out CUDA sync events)
IDLE_CATS = ("kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy", "mtia_ccp_events")
DEVICE_SYNC_NAMES = ("Event Sync", "Context Sync")  # on stream -1 but on the GPU, for HTA
KERNEL_WAIT_US = 30  # HTA's default consecutive_kernel_delay, in the trace's unit (µs)
Z_LIMIT = 3.5  # Iglewicz & Hoaglin's robust z-score limit for an outlier
MAD_FLOOR = 0.01  # the MAD is at least 1 % of the median
SHARES = ("compute", "communication", "memory", "other", "idle")
IDLE_KINDS = ("host_wait", "kernel_wait", "other")
# the stable fields of the job's JSON (`--json`), and of each rank's row in it
JOB_FIELDS = ("folder", "world_size", "ranks_found", "steps", "on_gpu", "ranks", "stragglers", "collectives",
              "kernel_wait_us", "mfu", "notes")
RANK_FIELDS = ("rank", "file", "device", "on_gpu", "steps", "step_s", "step_s_median", "compute_s_median",
               "exposed_comm_s", "comm_s", "window", "window_s", "seconds", "shares", "non_compute_share",
               "idle_split", "idle_split_s", "idle_by_stream_s")
IDLE_COLUMNS = {"host_wait": "host-wait", "kernel_wait": "kernel-wait", "other": "other-wait"}
STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
# point-to-point transfers (pipeline sends, NCCL SendRecv) pair two ranks, not the whole group: never matched
P2P_RE = re.compile(r"send|recv|p2p", re.I)


def kernel_type(name: str) -> str:
    """'communication', 'memory', 'compute' or 'other', as HTA classifies a GPU event by its name."""
    if NCCL_KERNEL_RE.match(name):
        return "communication"
    if MEMORY_KERNEL_RE.match(name):
        return "memory"
    if not NOT_COMPUTE_RE.match(name):
        return "compute"
    return "other"


# ------------------------------------------------------------------------------- interval arithmetic
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


# ------------------------------------------------------------------------------- HTA's breakdowns
def temporal(events: list[GpuEvent]) -> dict[str, float]:
    """HTA's temporal breakdown of one rank's GPU events, with its non-compute time split in three.

    Returns seconds: 'window' (first start to last end), and per share of SHARES; the shares add up
    to the window. 'non_compute' is HTA's (communication + memory + other)."""
    if not events:  # no GPU event in the window
        return {"window": 0.0, **dict.fromkeys(SHARES, 0.0), "non_compute": 0.0}
    every = merge([(g.start, g.end) for g in events])
    if not every:  # events of no length
        return {"window": 0.0, **dict.fromkeys(SHARES, 0.0), "non_compute": 0.0}
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
    return {"window": window * us, "compute": compute * us, "communication": communication * us, "memory": memory * us,
            "other": other * us, "idle": idle * us, "non_compute": (window - compute - idle) * us}


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
    total = sum(split.values())
    return {k: (v / total if total > 0 else None) for k, v in split.items()}


# ------------------------------------------------------------------------------- per step
def _step_of(ts: float, steps: list[tuple[int, Span]]) -> int | None:
    for n, (s, e) in steps:
        if s <= ts < e:
            return n
    return None


def per_step(rt: RankTrace) -> dict[int, dict[str, Any]]:
    """Step number → step_s, compute_s, comm_s, exposed_comm_s and the step's collectives
    [(name, start µs, end µs)]. A GPU event belongs to the step whose host range holds its launch."""
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
        out[n] = {"step_s": (e - s) * 1e-6, "compute_s": length(c) * 1e-6, "comm_s": length(k) * 1e-6,
                  "exposed_comm_s": (length(k) - overlap(k, c)) * 1e-6,
                  "collectives": sorted(((nm, sp[0], sp[1]) for nm, sp in comm[n]), key=lambda x: x[1])}
    return out


# ------------------------------------------------------------------------------- across ranks
def robust_z(values: dict[int, float]) -> dict[int, float]:
    """rank → 0.6745 (x − median) / MAD, the MAD floored at MAD_FLOOR × median."""
    xs = list(values.values())
    med = statistics.median(xs)
    mad = max(statistics.median(abs(x - med) for x in xs), MAD_FLOOR * abs(med))
    if mad <= 0:
        return dict.fromkeys(values, 0.0)
    return {r: 0.6745 * (x - med) / mad for r, x in values.items()}


def stragglers(step_s: dict[int, float], compute_s: dict[int, float]) -> dict[str, Any]:
    """Ranks whose median step time or compute per step stands out (see the module docstring)."""
    slowest = max(step_s, key=lambda r: step_s[r])
    med = statistics.median(step_s.values())
    spread = (max(step_s.values()) - min(step_s.values())) / med if med > 0 else None
    out: dict[str, Any] = {"rule": f"robust z-score 0.6745 (x - median) / MAD > {Z_LIMIT}, MAD at least "
                                   f"{MAD_FLOOR * 100:g} % of the median, over ranks' median step and compute time",
                           "slowest_rank": slowest, "step_spread": spread, "ranks": [], "by_step": {}, "by_compute": {}}
    if len(step_s) < 3:
        out["verdict"] = (f"no verdict with {len(step_s)} rank(s): a straggler stands out from at least 2 others, "
                          "so give at least 3 ranks' traces")
        return out
    zs, zc = robust_z(step_s), robust_z(compute_s)
    out["by_step"] = {r: z for r, z in zs.items() if z > Z_LIMIT}
    out["by_compute"] = {r: z for r, z in zc.items() if z > Z_LIMIT}
    out["ranks"] = sorted(set(out["by_step"]) | set(out["by_compute"]))
    why = []
    for r in out["ranks"]:
        parts = [f"{what} z = {d[r]:.3g}" for what, d in (("step time", out["by_step"]), ("compute", out["by_compute"]))
                 if r in d]
        why.append(f"rank {r} ({', '.join(parts)})")
    out["verdict"] = ", ".join(why) if why else "none: no rank's step or compute time stands out"
    return out


def collective_waits(steps_by_rank: dict[int, dict[int, dict[str, Any]]],
                     offsets: dict[int, float]) -> dict[str, Any]:
    """Match collectives across ranks (k-th of a name in a step) and book who waited for whom."""
    ranks = sorted(steps_by_rank)
    held_up = dict.fromkeys(ranks, 0.0)  # rank → others' time spent waiting for it, per step
    waited = dict.fromkeys(ranks, 0.0)  # rank → its own time waiting for the last one, per step
    matched = unmatched = 0
    if len(ranks) < 2:
        return {"matched": 0, "unmatched": 0, "steps": 0, "held_up_others_s": held_up, "waited_s": waited}
    common = set.intersection(*(set(steps_by_rank[r]) for r in ranks))
    for n in sorted(common):
        groups: dict[int, dict[str, list[float]]] = {}
        for r in ranks:
            g: dict[str, list[float]] = defaultdict(list)
            for name, s, _e in steps_by_rank[r][n]["collectives"]:
                g[name].append(s + offsets[r])
            groups[r] = g
        names = set().union(*(set(g) for g in groups.values()))
        for name in names:
            if P2P_RE.search(name):
                continue
            counts = {len(groups[r].get(name, [])) for r in ranks}
            if len(counts) != 1:
                unmatched += max(counts)
                continue
            for k in range(counts.pop()):
                starts = {r: groups[r][name][k] for r in ranks}
                last = max(starts, key=lambda r: starts[r])
                for r in ranks:
                    w = (starts[last] - starts[r]) * 1e-6
                    waited[r] += w
                    if r != last:
                        held_up[last] += w
                matched += 1
    per = max(len(common), 1)
    return {"matched": matched, "unmatched": unmatched, "steps": len(common),
            "held_up_others_s": {r: v / per for r, v in held_up.items()},
            "waited_s": {r: v / per for r, v in waited.items()}}


# ------------------------------------------------------------------------------- the job
@dataclass
class JobReport:
    folder: str
    json: dict[str, Any]

    def summary(self) -> str:
        return render(self.json)

    def __str__(self) -> str:
        return self.summary()


def load_job(folder: str | Path) -> list[RankTrace]:
    """Every rank's trace in `folder`, checked to be one profiling cycle of one job (one line otherwise)."""
    files = trace_files(folder)
    ranks = [read_rank(f, read_raw(f), only_one=len(files) == 1) for f in files]
    seen: dict[int, Path] = {}
    for r in ranks:
        if r.rank in seen:
            raise InputError(f"rank {r.rank} has two traces ({seen[r.rank].name}, {r.path.name}): give a folder with one "
                             "profiling cycle of one job (tensorboard_trace_handler writes a file per rank and cycle)")
        seen[r.rank] = r.path
    worlds = {r.world_size for r in ranks if r.world_size}
    if len(worlds) > 1:
        raise InputError(f"traces from different jobs: world sizes {sorted(worlds)} in one folder; give one job's traces")
    if worlds and max(r.rank for r in ranks) >= next(iter(worlds)):
        raise InputError(f"traces from different jobs: a rank {max(r.rank for r in ranks)} in a world of "
                         f"{next(iter(worlds))}; give one job's traces")
    if len(ranks) > 1:
        lo = max(r.span[0] for r in ranks)
        hi = min(r.span[1] for r in ranks)
        if lo > hi:
            raise InputError("traces from different jobs: the ranks' profiled steps do not overlap in time; "
                             "give one profiling cycle of one job")
        first = ranks[0]
        for r in ranks[1:]:
            if r.on_gpu != first.on_gpu:
                g, c = (first, r) if first.on_gpu else (r, first)
                raise InputError(f"rank {g.rank}'s trace has GPU events and rank {c.rank}'s has none: profile every rank "
                                 "with the same activities (ProfilerActivity.CUDA on a GPU job)")
            if set(r.steps) != set(first.steps):
                raise InputError(f"ranks profiled different steps: rank {first.rank} has {_steps_text(first.steps)}, "
                                 f"rank {r.rank} has {_steps_text(r.steps)}; profile the same steps on every rank")
    return sorted(ranks, key=lambda r: r.rank)


def _steps_text(steps: dict[int, Span]) -> str:
    ns = sorted(steps)
    return f"ProfilerStep#{ns[0]}" + (f"–#{ns[-1]}" if len(ns) > 1 else "")


def rank_figures(rt: RankTrace, step_names: int) -> dict[str, Any]:
    """One rank's row: step times, shares (HTA's window), idle split, exposed communication per step."""
    steps = per_step(rt)
    if rt.on_gpu:
        events = hta_filter(rt, step_names)
        rt.hta_gpu = events
        tb = temporal(events)
        by_stream = idle_breakdown(events, rt.launch_ts)
        split = {k: sum(s[k] for s in by_stream.values()) for k in IDLE_KINDS}
        idle_ratio = ratios(split)
        window_note = ("HTA's window (first to last GPU event launched before the last ProfilerStep)"
                       if step_names >= 2 else "HTA's window (first to last GPU event; one ProfilerStep)")
    else:
        lo = min(s for s, _ in rt.steps.values())
        hi = max(e for _, e in rt.steps.values())
        comp = merge([(max(s, lo), min(e, hi)) for s, e in rt.cpu_compute])
        comm = merge([(max(sp[0], lo), min(sp[1], hi)) for _, sp in rt.cpu_comm + rt.cpu_calls])
        c, k = length(comp), length(comm) - overlap(comm, comp)
        tb = {"window": (hi - lo) * 1e-6, "compute": c * 1e-6, "communication": k * 1e-6, "memory": 0.0, "other": 0.0,
              "idle": (hi - lo - c - k) * 1e-6, "non_compute": k * 1e-6}
        by_stream, split, idle_ratio = {}, None, None
        window_note = "all ProfilerSteps (a CPU trace: the device is the main thread's compute ops)"
    w = tb["window"]
    shares = {k: (tb[k] / w if w > 0 else None) for k in SHARES}
    step_s = [v["step_s"] for v in steps.values()]
    return {
        "rank": rt.rank, "file": rt.path.name, "device": rt.device_name, "on_gpu": rt.on_gpu,
        "steps": sorted(steps), "step_s": {n: v["step_s"] for n, v in steps.items()},
        "step_s_median": statistics.median(step_s),
        "compute_s_median": statistics.median(v["compute_s"] for v in steps.values()),
        "exposed_comm_s": {n: v["exposed_comm_s"] for n, v in steps.items()},
        "comm_s": {n: v["comm_s"] for n, v in steps.items()},
        "window": window_note, "window_s": w, "seconds": {k: tb[k] for k in SHARES},
        "shares": shares, "non_compute_share": (tb["non_compute"] / w if w > 0 else None),
        "idle_split": idle_ratio, "idle_split_s": split,
        "idle_by_stream_s": {str(s): v for s, v in by_stream.items()},
        "_steps": steps,
    }


def mfu_of(job: dict[str, Any], flops_per_step: float, *, dtype: str = "bf16",
           six_n_flops_per_step: float | None = None) -> dict[str, Any]:
    """MFU of the job: model FLOPs per step (all ranks together) ÷ (step time × GPUs × dense peak of
    the GPU the traces name). Step time: the median over steps of the slowest rank's step."""
    from perflab.flops.mfu import resolve_peak

    if not flops_per_step > 0:
        raise InputError("the model's FLOPs per step must be positive")
    rows = job["ranks"]
    names = {r["device"] for r in rows}
    steps = rows[0]["steps"]
    step_s = statistics.median(max(r["step_s"][n] for r in rows) for n in steps)
    gpus = job["world_size"] or len(rows)
    out: dict[str, Any] = {"flops_per_step": flops_per_step, "six_n_flops_per_step": six_n_flops_per_step,
                           "dtype": dtype, "step_s": step_s, "gpus": gpus, "peak_tflops": None, "mfu": None,
                           "mfu_6n": None}
    if not rows[0]["on_gpu"]:
        out["peak_source"] = "peak unknown: CPU traces name no GPU"
    elif len(names) != 1 or None in names:
        out["peak_source"] = ("peak unknown: the traces name no GPU (no deviceProperties)" if names == {None}
                              else f"peak unknown: the ranks name different GPUs ({', '.join(sorted(map(str, names)))})")
    else:
        try:  # the named GPU's dense datasheet peak, never another chip's
            out["peak_tflops"], out["peak_source"] = resolve_peak(None, str(next(iter(names))), dtype)
        except InputError as e:
            out["peak_source"] = f"peak unknown: {e}"
    if out["peak_tflops"] and step_s <= 0:
        out["peak_tflops"], out["peak_source"] = None, "no MFU: the traces' steps have no length"
    if out["peak_tflops"]:
        denom = step_s * gpus * out["peak_tflops"] * 1e12
        out["mfu"] = flops_per_step / denom
        if six_n_flops_per_step:
            out["mfu_6n"] = six_n_flops_per_step / denom
    return out


def audit_traces(folder: str | Path, *, flops_per_step: float | None = None, six_n_flops_per_step: float | None = None,
                 dtype: str = "bf16") -> JobReport:
    """The job audit of a folder of per-rank traces (see the module docstring); MFU when FLOPs per step are given."""
    ranks = load_job(folder)
    step_names = len(set().union(*(set(r.steps) for r in ranks)))
    rows = [rank_figures(r, step_names) for r in ranks]
    worlds = {r.world_size for r in ranks if r.world_size}
    world = worlds.pop() if worlds else None
    strag = stragglers({r["rank"]: r["step_s_median"] for r in rows}, {r["rank"]: r["compute_s_median"] for r in rows})
    waits = collective_waits({r["rank"]: r["_steps"] for r in rows}, {r.rank: r.clock_offset_us for r in ranks})
    notes = []
    if world and world > len(rows):
        notes.append(f"{len(rows)} of the job's {world} ranks are in the folder: stragglers and waits are among these")
    if len(ranks) == 1 and ranks[0].world_size is None:
        notes.append("one trace with no distributedInfo: read as rank 0 of a one-process job")
    for r in rows:
        del r["_steps"]
    job = {"folder": str(folder), "world_size": world, "ranks_found": len(rows), "steps": rows[0]["steps"],
           "on_gpu": rows[0]["on_gpu"], "ranks": rows, "stragglers": strag, "collectives": waits,
           "kernel_wait_us": KERNEL_WAIT_US, "mfu": None, "notes": notes}
    if flops_per_step is not None:
        job["mfu"] = mfu_of(job, flops_per_step, dtype=dtype, six_n_flops_per_step=six_n_flops_per_step)
    return JobReport(str(folder), job)


def model_flops_per_token(target) -> tuple[float, float | None]:
    """(counted model FLOPs per token, 6N FLOPs per token) of one training step of an audit `Target`
    (`perflab.audit.target`), counted by perflab's FLOP counter on its first batch on this machine's CPU."""
    import torch

    from perflab.audit.run import count_params
    from perflab.audit.target import AuditInputError, BatchSource, default_loss, tokens_in
    from perflab.flops.counter import count_flops

    batch = BatchSource(target.batches).next()
    tokens = tokens_in(batch, target.tokens_per_batch)
    if not tokens:
        raise AuditInputError("the model's batches hold no token count: give 'tokens_per_batch' in the factory, "
                              "so that FLOPs per token (and MFU) can be known")
    loss_fn = target.loss_fn or default_loss
    model = target.model.to("cpu").train()

    def step(b):
        loss = loss_fn(model, b)
        loss.backward()
        return loss

    with torch.random.fork_rng():
        fc = count_flops(step, batch)
    _, active, _ = count_params(model, target.hf_config)
    return fc.model / tokens, 6.0 * active


# ------------------------------------------------------------------------------- text
def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x * 1e3:.2f}"


def table(job: dict[str, Any]) -> list[dict[str, str]]:
    """One row per rank, every figure formatted with its unit in the column's name (for a terminal or a
    notebook's DataFrame): step time, the shares, the idle split, exposed communication and waits caused."""
    held = {str(k): v for k, v in job["collectives"]["held_up_others_s"].items()}  # int keys, or str after JSON
    out = []
    for r in job["ranks"]:
        sp = r["idle_split"] or {}
        exp = statistics.mean(r["exposed_comm_s"].values()) if r["exposed_comm_s"] else None
        row = {"rank": str(r["rank"]), "step ms": _ms(r["step_s_median"])}
        row.update({f"{'comm' if k == 'communication' else k} %": _pct(r["shares"][k]) for k in SHARES})
        row.update({f"{IDLE_COLUMNS[k]} %": _pct(sp.get(k)) for k in IDLE_KINDS})
        row["exposed comm ms/step"] = _ms(exp)
        row["held others up ms/step"] = _ms(held.get(str(r["rank"])) if job["collectives"]["matched"] else None)
        out.append(row)
    return out


def render(job: dict[str, Any]) -> str:
    """The terminal report: one row per rank, then stragglers, waits and MFU."""
    rows = job["ranks"]
    steps = job["steps"]
    head = (f"Job audit of {job['folder']}: {job['ranks_found']} rank(s)"
            + (f" of {job['world_size']}" if job["world_size"] else "")
            + f", {len(steps)} step(s) ({_steps_text(dict.fromkeys(steps, (0.0, 0.0)))})"
            + ("" if job["on_gpu"] else ", CPU traces"))
    rows_text = table(job)
    cols = list(rows_text[0])
    table_ = [list(t.values()) for t in rows_text]
    widths = [max(len(c), *(len(t[i]) for t in table_)) for i, c in enumerate(cols)]
    lines = [head, "", "  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(t, widths)) for t in table_]
    lines.append("")
    lines.append("Shares of each rank's time over " + rows[0]["window"] + "; idle split: shares of the idle time "
                 f"(HTA's idle-time breakdown, streams added, kernel wait under {job['kernel_wait_us']} µs)."
                 if job["on_gpu"] else "Shares of each rank's profiled steps; no idle split on a CPU trace "
                 "(HTA defines it on GPU kernels).")
    st = job["stragglers"]
    spread = "" if st["step_spread"] is None else f" (ranks' step times spread {100 * st['step_spread']:.1f} % of the median)"
    lines.append(f"Stragglers: {st['verdict']}. Slowest step: rank {st['slowest_rank']}{spread}. Rule: {st['rule']}.")
    c = job["collectives"]
    if c["matched"]:
        lines.append(f"Collectives matched across ranks: {c['matched']} ({c['unmatched']} unmatched); 'held others up' "
                     "is the time the other ranks waited in them for this rank to arrive (the ranks' clocks read as one).")
    elif len(rows) > 1:
        lines.append("Collectives matched across ranks: none (point-to-point transfers are not matched; a collective "
                     "is matched only where every rank ran as many of it in a step), so no wait is booked.")
    m = job["mfu"]
    if m:
        if m["mfu"] is None:
            lines.append(f"MFU: {m['peak_source']}.")
        else:
            six = f", {100 * m['mfu_6n']:.1f} % by 6N" if m["mfu_6n"] else ""
            lines.append(f"MFU: {100 * m['mfu']:.1f} % (counted FLOPs{six}) at a {_ms(m['step_s'])} ms step on "
                         f"{m['gpus']} GPU(s), peak {m['peak_tflops']:g} TFLOP/s ({m['peak_source']}).")
    lines += [f"Note: {n}" for n in job["notes"]]
    return "\n".join(lines)
