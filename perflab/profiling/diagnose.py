"""Where did a step's time go? `diagnose(trace)` names the causes of the device's idle time.

    >>> d = diagnose("step.json")      # any torch.profiler Chrome trace, or its dict
    >>> d.step_s, d.device_busy        # seconds per step, share of the step the device worked
    >>> d.causes[0].cause              # 'data_wait' | 'host_sync' | 'launch_bound' | 'communication'
    >>> d.as_json()                    # {"step_s", "device_busy", "causes": [...], "trace_file", "steps", ...}

Method (the same on CPU and GPU traces; "the device" is defined in `perflab.profiling.trace`):
1. The steps are the `ProfilerStep#N` ranges of the main thread; without them, the stretches between
   consecutive optimizer steps; without those, the whole trace (figures per trace, said so).
2. Inside each step, the device's idle gaps are the stretches outside every device op.
3. Each gap goes, whole, to the host wait that overlaps it most — a DataLoader fetch (*data_wait*),
   a collective or an NCCL kernel (*communication*), a synchronising op such as `item`, `nonzero`,
   `cudaStreamSynchronize` (*host_sync*) — counting a wait that ended up to `slack_s` before the gap
   (on a GPU the device goes idle as the host's sync returns: the gap starts where the wait ends).
4. A gap no wait explains, between two device ops that are both tiny (shorter than `tiny_s`) and
   part of a run of at least `min_run` tiny ops, is *launch_bound*: the device finishes each op
   before the host has issued the next. On a CPU trace, an op in such a run is itself per-op
   overhead (the dispatcher's and Python's cost), so it does not count as device work, and a gap
   it lies in is launch-bound unless a data, sync or collective wait also overlaps the gap.
5. The rest is `unattributed_s` (host work perflab cannot name: Python, hooks, the profiler).
Each cause's seconds, share and evidence are per step, averaged; `median_share` is the median of each
profiled step's share (one disturbed step does not move it), and `stability()` says whether the
leading cause held from step to step. `versus_timed` says when the profiled step does not look like the median timed
step (longer or shorter beyond 1.5×, or ops adding up to more than the step). Evidence lists the waits by name: the
idle seconds each one explains (a gap's seconds go to the wait that overlaps it most) and how
many such waits there were; for launch_bound, the tiny ops' own time.

Thresholds: `NONE_THRESHOLD` (10% of the step) is the level below which a cause is not worth
chasing; the planted faults of `perflab.profiling.faults` each put their cause well above it.
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflab.core.jsonable import JSON, to_json
from perflab.profiling.trace import Interval, Trace, gaps, load, union_length

CAUSES = ("data_wait", "host_sync", "launch_bound", "communication")
NONE_THRESHOLD = 0.10
FIXES = {
    "data_wait": "load ahead: DataLoader num_workers > 0 with prefetch (and pin_memory on a GPU); cache or pre-tokenise",
    "host_sync": "remove item()/.cpu()/nonzero/print of tensors from the step; log every N steps, keep checks on the device",
    "launch_bound": "fewer, larger ops: vectorise the loop, use foreach/fused optimizers, torch.compile or CUDA graphs",
    "communication": "overlap collectives with backward (DDP buckets, async ops), compress or shard (ZeRO), check the link",
}


@dataclass
class Evidence:
    """A wait (or, for launch_bound, a tiny op) by name: the idle seconds it explains per step, and how many."""

    op: str
    seconds: float  # per step, averaged
    count: float  # per step: a whole number when every step had the same, else averaged to 0.1


@dataclass
class Cause:
    cause: str
    seconds: float  # per step, averaged over the profiled steps
    share: float  # of the step (the average)
    evidence: list[Evidence]
    median_share: float | None = None  # the median of each profiled step's share

    def as_dict(self) -> JSON:
        return {"cause": self.cause, "seconds": self.seconds, "share": self.share, "median_share": self.median_share,
                "evidence": to_json(self.evidence)}


@dataclass
class Diagnosis:
    step_s: float
    device_busy: float
    causes: list[Cause]
    trace_file: str | None
    steps: int
    device: str  # what "the device" was: 'GPU kernels' or 'main-thread compute ops (CPU trace)'
    idle_s: float
    unattributed_s: float
    tiny_s: float
    step_names: list[str] = field(default_factory=list)
    step_source: str = "ProfilerStep markers"
    step_times_s: list[float] = field(default_factory=list)  # each profiled step's length
    top_by_step: list[str | None] = field(default_factory=list)  # each step's top cause (None: none above the threshold)
    ops_s: float = 0.0  # the device ops' own durations added up, per step (median): more than the step when they overlap

    @property
    def stable(self) -> bool:
        """Whether the top cause is the same in most profiled steps (one step cannot say: False)."""
        if len(self.top_by_step) < 2:
            return False
        first = self.top.cause if self.top and self.top.share >= NONE_THRESHOLD else None
        return sum(t == first for t in self.top_by_step) * 2 > len(self.top_by_step)

    def stability(self) -> str:
        """One line: whether the diagnosis held from step to step."""
        n = len(self.top_by_step)
        if n < 2:
            return "one profiled step: profile several (--steps 5) to see whether the cause is stable"
        first = self.top.cause if self.top and self.top.share >= NONE_THRESHOLD else None
        agree = sum(t == first for t in self.top_by_step)
        what = first or "no cause above the threshold"
        if self.stable:
            return f"stable: {what} leads in {agree} of {n} profiled steps"
        seen = ", ".join(f"{t or 'none'} ×{self.top_by_step.count(t)}" for t in dict.fromkeys(self.top_by_step))
        return (f"not stable: the leading cause changed from step to step ({seen}); profile more steps on a quiet "
                "machine before acting on it")

    def versus_timed(self, timed_step_s: float, tolerance: float = 1.5) -> str | None:
        """A sentence when the profiled step does not look like the median timed step: its length differs
        by more than `tolerance`× either way, or its ops add up to more than the step (they overlapped,
        on several threads); None when they agree."""
        return profiled_versus_timed(self.step_s, timed_step_s, self.ops_s, tolerance)

    @property
    def per_step(self) -> bool:
        """False when the trace had no steps to find: the figures are for the whole trace."""
        return not self.step_source.startswith("none")

    @property
    def top(self) -> Cause | None:
        return self.causes[0] if self.causes else None

    def significant(self, threshold: float = NONE_THRESHOLD) -> list[Cause]:
        return [c for c in self.causes if c.share >= threshold]

    def as_json(self) -> JSON:
        """The shape `perflab profile --json` prints."""
        return {"step_s": self.step_s, "device_busy": self.device_busy,
                "causes": [c.as_dict() for c in self.causes], "trace_file": self.trace_file,
                "steps": self.steps, "step_source": self.step_source, "per_step": self.per_step,
                "step_times_s": self.step_times_s, "top_by_step": self.top_by_step, "stable": self.stable,
                "ops_s": self.ops_s}

    def table(self):
        """Causes as a small DataFrame for a person."""
        import pandas as pd

        from perflab.core.readout import percent, seconds

        rows = [{"cause": c.cause, "per step": seconds(c.seconds), "share of step": percent(c.share),
                 "evidence": ", ".join(f"{e.op} ({seconds(e.seconds)})" for e in c.evidence[:2]),
                 "fix": FIXES[c.cause]} for c in self.causes]
        return pd.DataFrame(rows, columns=["cause", "per step", "share of step", "evidence", "fix"])

    def summary(self, threshold: float = NONE_THRESHOLD) -> str:
        from perflab.core.readout import percent, seconds

        unit = "step" if self.per_step else "trace"
        if self.per_step:
            head = f"step {seconds(self.step_s)} ({self.steps} step{'s' if self.steps != 1 else ''}; {self.step_source})"
        else:
            head = f"whole trace {seconds(self.step_s)} (no steps: {self.step_source.removeprefix('none: ')})"
        lines = [f"{head}; device busy {percent(self.device_busy)} — the device is {self.device}",
                 f"idle {seconds(self.idle_s)} per {unit}, of which unattributed {seconds(self.unattributed_s)}"]
        sig = self.significant(threshold)
        if not sig:
            lines.append(f"no cause above {percent(threshold)} of the {unit}")
        for c in self.causes:
            ev = "; ".join(f"{e.op} ×{e.count} {seconds(e.seconds)}" for e in c.evidence[:3])
            mark = "*" if c.share >= threshold else " "
            lines.append(f"{mark} {c.cause:<14} {seconds(c.seconds):>9} {percent(c.share):>6}  {ev}")
        if sig:
            lines.append(f"fix ({sig[0].cause}): {FIXES[sig[0].cause]}")
        if self.per_step:
            lines.append(self.stability())
        return "\n".join(lines)


def default_tiny_s(on_gpu: bool) -> float:
    """A device op shorter than this is 'tiny': 10 µs for a GPU kernel (a launch costs ~5 µs of
    host time), 20 µs for a CPU op (the dispatcher and Python cost a few µs per op, more under
    the profiler)."""
    return 10e-6 if on_gpu else 20e-6


def tiny_runs(ops: list[Interval], tiny_s: float) -> list[int]:
    """For each op, the length of the run of consecutive tiny ops it belongs to (0 if not tiny)."""
    n = len(ops)
    run = [0] * n
    i = 0
    while i < n:
        if ops[i].dur < tiny_s:
            j = i
            while j < n and ops[j].dur < tiny_s:
                j += 1
            for k in range(i, j):
                run[k] = j - i
            i = j
        else:
            i += 1
    return run


def _split_tiny_runs(ops: list[Interval], tiny_s: float, min_run: int) -> tuple[list[Interval], list[Interval]]:
    """(compute ops, tiny ops of long runs as 'launch_bound' waits) — CPU traces only."""
    run = tiny_runs(ops, tiny_s)
    keep = [o for o, r in zip(ops, run) if r < min_run]
    tiny = [Interval(o.start, o.end, o.name, "launch_bound") for o, r in zip(ops, run) if r >= min_run]
    return keep, tiny


def profiled_versus_timed(profiled_s: float, timed_s: float, ops_s: float = 0.0, tolerance: float = 1.5) -> str | None:
    """Why a profiled step's shares may not describe the timed steps: a sentence when the profiled
    step is more than `tolerance`× longer or shorter than the median timed step, or when its ops add
    up to more than the step itself (they overlapped on several threads, so their times are not
    shares of one timeline); None when neither."""
    from perflab.core.readout import seconds

    out = []
    if timed_s > 0 and profiled_s > 0 and max(profiled_s / timed_s, timed_s / profiled_s) > tolerance:
        out.append(f"the profiled step took {seconds(profiled_s)} against a median timed step of {seconds(timed_s)} "
                   f"({profiled_s / timed_s:.2f}×): the profiler's overhead or a busy machine changed the step, so its "
                   "shares may not describe the timed steps")
    if profiled_s > 0 and ops_s > 1.05 * profiled_s:
        out.append(f"the profiled ops add up to {seconds(ops_s)} inside a {seconds(profiled_s)} step: they ran "
                   "side by side on several threads, so the shares are of the step's timeline, not of the ops' sum")
    return "; ".join(out) or None


def diagnose(trace: str | Path | dict[str, Any] | Trace, *, tiny_s: float | None = None, min_run: int = 8,
             slack_s: float = 50e-6) -> Diagnosis:
    """Where each step's time went, and the causes of the device's idle time (module docstring)."""
    t = load(trace)
    tiny_s = default_tiny_s(t.on_gpu) if tiny_s is None else float(tiny_s)
    ops = t.device_ops()
    waits = t.waits()
    if not t.on_gpu:  # a CPU op in a run of tiny ops is per-op overhead (dispatch, Python), not compute
        ops, launch = _split_tiny_runs(ops, tiny_s, min_run)
        waits = sorted(waits + launch, key=lambda w: w.start)
    starts = [w.start for w in waits]
    max_end = list(itertools.accumulate((w.end for w in waits), max))
    n = len(ops)
    run = tiny_runs(ops, tiny_s)
    op_starts = [o.start for o in ops]

    total_step = sum(s.dur for s in t.steps)
    busy = sum(union_length(ops, s.start, s.end) for s in t.steps)
    seconds: dict[str, float] = defaultdict(float)
    evidence: dict[str, dict[str, list[float]]] = {c: defaultdict(lambda: [0.0, 0]) for c in CAUSES}
    idle = unattributed = 0.0
    tiny_seen: set[int] = set()
    counted: set[tuple[str, float]] = set()
    per_step: list[dict[str, float]] = []
    ops_in: list[float] = []
    for s in t.steps:
        before_step = dict(seconds)
        i0, i1 = bisect.bisect_left(op_starts, s.start), bisect.bisect_left(op_starts, s.end)
        ops_in.append(sum(min(o.end, s.end) - o.start for o in ops[i0:i1]))
        for g0, g1, after in gaps(ops, s.start, s.end):
            length = g1 - g0
            idle += length
            best, best_ov, names = None, 0.0, []
            over: dict[str, float] = defaultdict(float)
            for w in waits[bisect.bisect_left(max_end, g0 - slack_s):bisect.bisect_right(starts, g1)]:
                if w.end < g0 - slack_s:
                    continue
                ov = max(min(w.end, g1) - max(w.start, g0 - slack_s), 0.0)
                over[w.kind or "wait"] += ov  # every wait and launch interval carries a kind
                names.append(w)
            if len(over) > 1:  # a data, sync or collective wait explains the gap better than tiny ops around it
                over.pop("launch_bound", None)
            if over:
                best, best_ov = max(over.items(), key=lambda kv: (kv[1], -CAUSES.index(kv[0])))
                if best_ov <= 0.0:
                    best = max(over, key=lambda k: -CAUSES.index(k))
            if best is not None:
                seconds[best] += length
                mine = [w for w in names if w.kind == best]
                if best == "launch_bound":  # each tiny op: its own time inside the gap
                    for w in mine:
                        ev = evidence[best][w.name]
                        ev[0] += max(min(w.end, g1) - max(w.start, g0), 0.0)
                        ev[1] += 1
                else:  # the gap's seconds go to the wait that overlaps it most; each wait counted once
                    lead = max(mine, key=lambda w: (max(min(w.end, g1) - max(w.start, g0 - slack_s), 0.0), w.dur))
                    evidence[best][lead.name][0] += length
                    for w in mine:
                        if (w.name, w.start) not in counted:
                            counted.add((w.name, w.start))
                            evidence[best][w.name][1] += 1
                continue
            before = after - 1
            if 0 <= before and after < n and run[before] >= min_run and run[after] >= min_run:
                seconds["launch_bound"] += length
                tiny_seen.update((before, after))
                continue
            unattributed += length
        per_step.append({c: seconds[c] - before_step.get(c, 0.0) for c in CAUSES})
    for j in sorted(tiny_seen):  # launch-bound evidence: the tiny ops around those gaps, their own time
        ev = evidence["launch_bound"][ops[j].name]
        ev[0] += ops[j].dur
        ev[1] += 1
    k = max(len(t.steps), 1)
    durs = [s.dur for s in t.steps]
    step_s = total_step / k
    causes = []
    for c in CAUSES:
        if seconds[c] <= 0:
            continue
        ev = sorted((Evidence(name, v[0] / k, round(v[1] / k, 1) if v[1] % k else v[1] // k)
                     for name, v in evidence[c].items() if v[0] > 0), key=lambda e: -e.seconds)[:5]
        # beside the average, the median of each step's share: one disturbed step does not move it
        med = statistics.median([p[c] / d for p, d in zip(per_step, durs, strict=True) if d > 0] or [0.0])
        causes.append(Cause(c, seconds[c] / k, seconds[c] / total_step if total_step else 0.0, ev, med))
    causes.sort(key=lambda c: -c.seconds)
    tops = []
    for p, d in zip(per_step, durs, strict=True):
        best = max(CAUSES, key=lambda c: p[c])
        tops.append(best if d > 0 and p[best] / d >= NONE_THRESHOLD else None)
    device = "the GPU (kernels, copies, memsets)" if t.on_gpu else \
        "the main thread's compute ops (a CPU trace: ops outside data waits, syncs and collectives)"
    return Diagnosis(step_s=step_s, device_busy=busy / total_step if total_step else 0.0, causes=causes,
                     trace_file=t.path, steps=len(t.steps), device=device, idle_s=idle / k,
                     unattributed_s=unattributed / k, tiny_s=tiny_s, step_names=[s.name for s in t.steps],
                     step_source=t.step_source, step_times_s=durs, top_by_step=tops,
                     ops_s=statistics.median(ops_in) if ops_in else 0.0)
