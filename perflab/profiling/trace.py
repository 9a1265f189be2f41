"""Read an exported Chrome trace (`torch.profiler`'s `export_chrome_trace`) into something to reason about.

    >>> t = load("step.json")          # a path, or the dict `json.load` gives
    >>> t.main_tid, t.on_gpu, [s.name for s in t.steps]
    >>> t.device_ops()                 # the intervals that count as "the device working"

Nothing here needs perflab to have made the trace: any trace `torch.profiler` exports works
(the plain JSON that Perfetto, chrome://tracing and HolisticTraceAnalysis read as well).

**What "the device" is.** On a GPU trace it is the GPU: kernels, memory copies and memsets
(events of category `kernel`, `gpu_memcpy`, `gpu_memset`). On a CPU-only trace there is no second
processor, so perflab defines the device as *the compute ops of the main thread*: the outermost
`cpu_op` events of the thread that runs the training step (the thread with the `ProfilerStep#N`
ranges, else the one with the most op time), except ops that are the host waiting on something —
DataLoader fetches, synchronising ops (`item`, `nonzero`, …) and collectives — and everything
inside them. Time in the step outside these intervals is the device idle, as on a GPU.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_OP_CATS = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function")

# what makes the host wait, by event name (first match wins; checked in this order)
DATA_RE = re.compile(r"DataLoader|DataLoaderIter|^data$|^data[_ ]wait$|^load[_ ]batch$", re.I)
COMM_RE = re.compile(r"^c10d::|^gloo:|nccl|^record_param_comms$|^ProcessGroup|^allreduce$|^all_reduce$", re.I)
SYNC_NAMES = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::masked_select",
              "aten::unique", "aten::_unique2", "aten::unique_consecutive", "aten::equal", "aten::tolist",
              "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "cuStreamSynchronize", "cuCtxSynchronize", "hipStreamSynchronize", "hipDeviceSynchronize")
SYNC_RE = re.compile("^(" + "|".join(re.escape(n) for n in SYNC_NAMES) + ")$")


def wait_kind(name: str) -> str | None:
    """'data_wait', 'communication', 'host_sync' for an event that is the host waiting, else None."""
    if DATA_RE.search(name):
        return "data_wait"
    if COMM_RE.search(name):
        return "communication"
    if SYNC_RE.match(name):
        return "host_sync"
    return None


@dataclass(frozen=True)
class Event:
    name: str
    cat: str
    start: float  # seconds from the trace's first event
    dur: float  # seconds
    pid: Any
    tid: Any
    args: dict[str, Any]

    @property
    def end(self) -> float:
        return self.start + self.dur


@dataclass(frozen=True)
class Interval:
    start: float
    end: float
    name: str
    kind: str | None = None  # for waits: data_wait / communication / host_sync

    @property
    def dur(self) -> float:
        return self.end - self.start


OPTIMIZER_STEP_RE = re.compile(r"^Optimizer\.step#")


class Trace:
    """The complete events of one exported trace, with the main thread and the steps found.

    Steps, in order of preference (`step_source` says which): the `ProfilerStep#N` ranges that
    `prof.step()` records; else, when the trace holds at least two optimizer steps (the
    `Optimizer.step#...` ranges torch's optimizers record), one step from the end of each to the
    end of the next; else the whole trace, and figures are per trace, not per step."""

    def __init__(self, raw: dict[str, Any] | list[Any], path: str | None = None):
        if isinstance(raw, list):  # the Chrome trace format's other form: a bare array of events
            raw = {"traceEvents": raw}
        if not isinstance(raw, dict) or not isinstance(raw.get("traceEvents"), list):
            raise InputError("not a Chrome trace: expected a JSON object with a 'traceEvents' list "
                             "(what torch.profiler's export_chrome_trace writes)")
        self.path = path
        self.raw = raw
        evs = [e for e in raw["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"
               and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]
        if not evs:
            raise InputError("the trace has no complete ('X') events: was the profiler's active window empty? "
                             "(with a schedule, export in on_trace_ready or step past the active steps)")
        t0 = min(e["ts"] for e in evs)
        self.events = sorted((Event(str(e.get("name", "")), str(e.get("cat", "")), (e["ts"] - t0) * 1e-6,
                                    max(float(e["dur"]), 0.0) * 1e-6, e.get("pid"), e.get("tid"), e.get("args") or {})
                              for e in evs), key=lambda e: (e.start, -e.dur))
        self.on_gpu = any(e.cat in DEVICE_CATS for e in self.events)
        self.main_tid = self._main_thread()
        self.step_source = "ProfilerStep markers"
        self.steps = self._steps()
        if not any(e.cat == "cpu_op" or e.cat in DEVICE_CATS for e in self.events):
            raise InputError(f"the trace has {len(self.steps)} step range(s) but no ops (no 'cpu_op' or kernel events): "
                             "its profiler recorded only annotations. Profile with activities=[ProfilerActivity.CPU] "
                             "(and CUDA on a GPU), and with a schedule export in on_trace_ready")

    # --------------------------------------------------------------------------- structure
    def _main_thread(self):
        steps = [e for e in self.events if e.name.startswith("ProfilerStep#")]
        if steps:
            return steps[0].tid
        opt = [e for e in self.events if OPTIMIZER_STEP_RE.match(e.name)]
        if opt:
            return opt[0].tid
        busy: dict[Any, float] = {}
        for e in self.events:
            if e.cat == "cpu_op":
                busy[e.tid] = busy.get(e.tid, 0.0) + e.dur
        if not busy:
            raise InputError("the trace has no CPU ops (cat 'cpu_op'): its profiler recorded nothing. With a "
                             "schedule, export in on_trace_ready (a trace exported after the active steps is "
                             "empty); without one, profile with ProfilerActivity.CPU")
        return max(busy, key=lambda tid: busy[tid])

    def _steps(self) -> list[Interval]:
        steps = [e for e in self.events if e.name.startswith("ProfilerStep#") and e.tid == self.main_tid]
        if steps:
            return [Interval(e.start, e.end, e.name) for e in steps]
        opt = sorted((e for e in self.events if OPTIMIZER_STEP_RE.match(e.name) and e.tid == self.main_tid),
                     key=lambda e: e.end)
        if len(opt) >= 2:
            self.step_source = (f"inferred from {len(opt)} optimizer steps (no ProfilerStep markers: the steps "
                                "run from the end of one optimizer step to the end of the next)")
            return [Interval(a.end, b.end, f"step {i + 1} (to {b.name})") for i, (a, b) in enumerate(zip(opt, opt[1:]))]
        self.step_source = ("none: the trace has no ProfilerStep markers (call prof.step() each step) and fewer than "
                            "two optimizer steps, so figures are for the whole trace, not per step")
        host = [e for e in self.host_events()] or self.events
        return [Interval(min(e.start for e in host), max(e.end for e in host), "whole trace")]

    def host_events(self) -> list[Event]:
        return [e for e in self.events if e.tid == self.main_tid and e.cat in HOST_OP_CATS
                and not e.name.startswith("ProfilerStep#")]

    def threads(self) -> dict[Any, str]:
        """tid → a label: 'main thread', 'DataLoader' (threads whose events are loader work), other names."""
        names = {}
        for e in self.raw["traceEvents"]:
            if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "thread_name":
                names[e.get("tid")] = str((e.get("args") or {}).get("name", e.get("tid")))
        return names

    # --------------------------------------------------------------------------- what waits, what works
    def waits(self) -> list[Interval]:
        """Host intervals (main thread) where the step waits: on data, a sync, or a collective.
        On a GPU trace, communication kernels (NCCL) count as communication too."""
        out = []
        for e in self.host_events():
            kind = wait_kind(e.name)
            if kind:
                out.append(Interval(e.start, e.end, e.name, kind))
        if self.on_gpu:
            out += [Interval(e.start, e.end, e.name, "communication") for e in self.events
                    if e.cat == "kernel" and COMM_RE.search(e.name)]
        return sorted(out, key=lambda i: i.start)

    def device_ops(self) -> list[Interval]:
        """What counts as the device doing work (see the module docstring), sorted by start."""
        if self.on_gpu:
            return sorted((Interval(e.start, e.end, e.name) for e in self.events
                           if e.cat in DEVICE_CATS and not COMM_RE.search(e.name)), key=lambda i: i.start)
        ops = [e for e in self.host_events() if e.cat == "cpu_op"]
        waits = [w for w in self.waits()]
        out: list[Interval] = []
        end_top = -1.0
        wi = 0
        for e in ops:  # sorted by start, outermost first
            if e.start < end_top - 1e-9:  # nested inside the previous outermost op (1 ns: an op that starts
                continue  # where the last ended is next to it, though start and end differ by float rounding
            end_top = e.end
            while wi < len(waits) and waits[wi].end <= e.start:
                wi += 1
            inside_wait = any(w.start <= e.start and e.end <= w.end + 1e-9 for w in waits[wi:wi + 8])
            if inside_wait or wait_kind(e.name):
                continue
            out.append(Interval(e.start, e.end, e.name))
        return out


def trace_files(path: str | Path) -> list[Path]:
    """The trace(s) a path names: the file itself, or the `.json` / `.json.gz` files inside a
    folder and its subfolders (where `tensorboard_trace_handler` writes one per worker and cycle),
    sorted by name."""
    p = Path(path).expanduser()
    if p.is_dir():
        found = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith((".json", ".json.gz")))
        if not found:
            raise InputError(f"no trace in folder {str(path)!r}: expected .json or .json.gz files "
                             "(what export_chrome_trace or tensorboard_trace_handler writes)")
        return found
    if not p.is_file():
        raise InputError(f"trace file {str(path)!r} not found")
    return [p]


def read_raw(path: str | Path) -> Any:
    """The parsed JSON of a trace file, whatever its name says: gzip is recognised by its bytes, and
    the array form may lack its closing bracket (the Chrome trace format allows that)."""
    path = Path(path)
    bad = (f"cannot read {path.name} as a JSON trace ({{}}): pass a file written by torch.profiler's "
           "export_chrome_trace or tensorboard_trace_handler")
    try:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            import gzip
            import zlib

            try:
                data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error) as e:
                raise InputError(bad.format(f"broken gzip: {e.__class__.__name__}")) from None
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(bad.format("not UTF-8 text")) from None
    except OSError as e:
        raise InputError(bad.format(e.__class__.__name__)) from None
    try:
        return json.loads(text)
    except ValueError as e:
        stripped = text.strip().rstrip(",")
        if stripped.startswith("["):  # an unterminated array of events
            try:
                return json.loads(stripped + "]")
            except ValueError:
                pass
        raise InputError(bad.format(f"invalid JSON at line {getattr(e, 'lineno', '?')}")) from None


def load(trace: str | Path | dict[str, Any] | list[Any] | Trace) -> Trace:
    """A Trace from a path to an exported trace (.json or .json.gz, or a folder holding exactly one)
    or from its parsed JSON (the object form or the array form)."""
    if isinstance(trace, Trace):
        return trace
    if isinstance(trace, (dict, list)):
        return Trace(trace)
    files = trace_files(trace)
    if len(files) > 1:
        raise InputError(f"{str(trace)!r} holds {len(files)} traces: name one of them, e.g. {files[-1]}")
    return Trace(read_raw(files[0]), str(files[0]))


def union_length(intervals: Iterable[Interval], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] covered by at least one interval."""
    total = 0.0
    cur: tuple[float, float] | None = None  # the merged interval being grown
    for iv in sorted(intervals, key=lambda i: i.start):
        s, e = max(iv.start, lo), min(iv.end, hi)
        if e <= s:
            continue
        if cur is None or s > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = (s, e)
        else:
            cur = (cur[0], max(cur[1], e))
    if cur is not None:
        total += cur[1] - cur[0]
    return total


def gaps(intervals: list[Interval], lo: float, hi: float) -> list[tuple[float, float, int]]:
    """The idle gaps of [lo, hi] between the (sorted) intervals: (start, end, index of the interval after)."""
    out = []
    cursor = lo
    for i, iv in enumerate(intervals):
        if iv.end <= lo:
            continue
        if iv.start >= hi:
            break
        if iv.start > cursor:
            out.append((cursor, min(iv.start, hi), i))
        cursor = max(cursor, iv.end)
        if cursor >= hi:
            break
    if cursor < hi:
        out.append((cursor, hi, len(intervals)))
    return out


# ------------------------------------------------------------------------------- synthetic traces
def synthetic_step(cause: str | None, *, on_gpu: bool = False, steps: int = 2) -> JSON:
    """A small hand-built trace (the JSON `export_chrome_trace` writes, as a dict) of `steps` 10 ms steps whose
    device idles for `cause` ('data_wait', 'host_sync', 'launch_bound', 'communication' or None),
    CPU-style or GPU-style. Deterministic: for tests and the lab's checks, never shown as a measurement."""
    ev: list[dict[str, Any]] = []
    pid, main, stream, comm_stream = 1, 1, 7, 13

    corr = [0]

    def x(name, cat, ts, dur, tid=main, p=pid, args=None):
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": p, "tid": tid, "ts": float(ts), "dur": float(dur),
                   "args": args or {}})

    def kernel(name, ts, dur, tid):
        corr[0] += 1
        x("cudaLaunchKernel", "cuda_runtime", ts - 4, 4, args={"correlation": corr[0], "External id": corr[0]})
        x(name, "kernel", ts, dur, tid=tid, p=0, args={"stream": tid, "correlation": corr[0], "External id": corr[0],
                                                       "device": 0})

    def work(ts, dur, name="aten::mm"):
        """Compute of `dur` µs at ts: a CPU op, or on a GPU a launch on the host and a kernel on the device."""
        if on_gpu:
            x(name, "cpu_op", ts, 6, args={"External id": corr[0] + 1})
            kernel(name.replace("aten::", "kernel_"), ts + 5, dur, stream)
        else:
            x(name, "cpu_op", ts, dur)

    for s in range(steps):
        t0 = s * 10_000.0
        x(f"ProfilerStep#{s + 1}", "user_annotation", t0, 10_000)
        t = t0 + 10
        if cause == "data_wait":
            x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation", t, 4000)
            t += 4010
        if cause == "launch_bound":
            for _ in range(300):
                work(t, 3 if on_gpu else 8, "aten::add_")
                t += 14
        while t < t0 + 9_000:
            work(t, 600)
            t += 610
            if cause == "host_sync" and t < t0 + 8_000:
                if on_gpu:  # the host blocks until the kernel is done, then does host work: the device idles
                    x("aten::item", "cpu_op", t - 600, 605)
                    x("cudaStreamSynchronize", "cuda_runtime", t - 598, 600)
                    t += 500
                else:
                    x("aten::item", "cpu_op", t, 5)
                    t += 500
            if cause == "communication" and t > t0 + 5_000:
                if on_gpu:
                    x("c10d::allreduce_", "cpu_op", t, 20)
                    kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t + 5, 3500, comm_stream)
                else:
                    x("c10d::allreduce_", "cpu_op", t, 3500)
                t += 3510
    meta = [{"ph": "M", "name": "thread_name", "pid": pid, "tid": main, "args": {"name": "main thread"}}]
    if on_gpu:
        meta += [{"ph": "M", "name": "thread_name", "pid": 0, "tid": s_, "args": {"name": f"stream {s_}"}}
                 for s_ in (stream, comm_stream)]
    return {"schemaVersion": 1, "traceEvents": meta + ev, "traceName": f"synthetic {cause or 'none'} ({'GPU' if on_gpu else 'CPU'})"}
