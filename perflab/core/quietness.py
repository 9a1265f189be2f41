"""How quiet was the machine while something was measured?

    with watch("cpu") as w:
        ...time something...
    w.result.verdict        # 'quiet', 'disturbed' or 'unknown'
    w.result.line()         # 'machine quiet' / 'disturbed: other programs used 48 % of 2 cores'

A timing taken while another program used the same cores (or the same GPU) measures a share of the
machine, not the machine. Every perflab measurement runs inside a `Watch`, which reads the
operating system's counters when the measurement starts and when it ends:

* **CPU**: the CPU time every process spent on the cores this process may run on (the busy time of
  `/proc/stat`, through `psutil.cpu_times(percpu=True)`; steal time, which a virtual machine's host
  takes, counts as busy), minus the CPU time of this process and its children (`psutil`). What is
  left is the others' CPU time, `others_cpu_s`. Its share is others' time ÷ (wall time × cores the
  measurement could use: by default torch's intra-op threads, or `cores=`). When the measurement
  uses fewer cores than it may run on, the others are taken to use the free cores first: only their
  time beyond those cores counts (a one-thread timing on two cores is not disturbed by one busy
  neighbour, though they still share caches and memory bandwidth).
* **Resolution**: the kernel counts CPU time in clock ticks (1/100 s on Linux), so a window's
  difference of two readings can be off by up to one tick per core. Others' time counts as a
  disturbance only when it exceeds that slack (one tick per watched core and one for this process);
  a window too short to tell (under `MIN_WINDOW_TICKS` ticks) is "unknown", never "quiet" by default.
* **GPU** (NVML, through the optional `pynvml` of nvidia-ml-py): other processes with a context on
  the same GPU, their SM utilisation over the window where the driver keeps per-process samples,
  the GPU's utilisation, and the reasons its clocks were held down. Other processes' SM time counts
  as the GPU's share; thermal and hardware slowdowns count as disturbed; a power cap is recorded but
  not counted (a kernel that draws full power caps its own clocks). Without NVML the GPU part is
  "unknown", never an error.

A measurement is **disturbed** when others used more than `DISTURBED_SHARE` (10 %) of the cores it
could use, or the GPU was shared or slowed; **quiet** when the counters show less; **unknown** when
the OS offers no counters or the window is too short. `cause` says why in a few words and never
names another user, their command or their program.

Tests inject made-up counters: `watch(sampler=...)`, or `injected(sampler)` for every watch inside
(for example one started by `perflab.core.timing.bench`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from perflab.core.jsonable import JSON
from perflab.core.verdicts import QUIETNESS

DISTURBED_SHARE = 0.10  # others' share of the measurement's cores above which it is disturbed
MIN_WINDOW_TICKS = 5  # a window shorter than this many clock ticks cannot be told quiet
_TICK_SLACK = 1  # ticks a window's difference of two counter readings may be off by, per core
VERDICTS = QUIETNESS  # perflab.core.verdicts: quiet, disturbed, unknown


@dataclass(frozen=True)
class Quietness:
    """What else used the device while a measurement ran, and the verdict drawn from it."""

    verdict: str  # 'quiet' | 'disturbed' | 'unknown'
    share: float | None  # others' CPU (or GPU) time ÷ (wall_s × cores), 0..1; None: not known
    wall_s: float  # the window's length, seconds
    cores: int  # cores the measurement could use
    others_cpu_s: float | None  # CPU seconds other processes spent on those cores in the window
    own_threads: int | None  # threads the measurement computes with (torch's, or the process's)
    cause: str  # a few words, never another user's name, command or program

    @property
    def quiet(self) -> bool:
        return self.verdict == "quiet"

    @property
    def disturbed(self) -> bool:
        return self.verdict == "disturbed"

    def line(self) -> str:
        """One short line: 'machine quiet', 'disturbed: …' or 'quietness unknown: …'."""
        if self.verdict == "quiet":
            return "machine quiet"
        if self.verdict == "disturbed":
            return f"disturbed: {self.cause}"
        return f"quietness unknown: {self.cause}" if self.cause else "quietness unknown"

    def to_json(self) -> JSON:
        return {"verdict": self.verdict, "share": _round(self.share), "wall_s": _round(self.wall_s),
                "cores": self.cores, "others_cpu_s": _round(self.others_cpu_s), "own_threads": self.own_threads,
                "cause": self.cause}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Quietness:
        """The inverse of `to_json` (saved results); a missing or odd record reads as unknown."""
        if not isinstance(d, dict) or d.get("verdict") not in VERDICTS:
            return UNKNOWN
        def num(k: str) -> float | None:
            v = d.get(k)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
        threads = d.get("own_threads")
        return Quietness(str(d["verdict"]), num("share"), num("wall_s") or 0.0, int(num("cores") or 1),
                         num("others_cpu_s"), int(threads) if isinstance(threads, int) else None,
                         str(d.get("cause") or ""))

    @staticmethod
    def combine(parts: Iterable[Quietness]) -> Quietness:
        """The quietness of several measurements taken as one (a sweep, a ladder's rung): disturbed if
        any was, unknown if any was and none was disturbed, else quiet. The share is the others' CPU time
        summed over the summed capacity (wall × cores); the cause is the worst part's, with a count."""
        ps = list(parts)
        if not ps:
            return UNKNOWN
        n_dist = sum(p.verdict == "disturbed" for p in ps)
        verdict = "disturbed" if n_dist else ("unknown" if any(p.verdict == "unknown" for p in ps) else "quiet")
        wall = sum(p.wall_s for p in ps)
        cores = max(p.cores for p in ps)
        known = [p for p in ps if p.others_cpu_s is not None]
        others = sum(p.others_cpu_s or 0.0 for p in known) if known else None
        cap = sum(p.wall_s * p.cores for p in known)
        shares = [p.share for p in ps if p.share is not None]
        share = others / cap if others is not None and cap > 0 else (max(shares) if shares else None)
        threads = [p.own_threads for p in ps if p.own_threads is not None]
        if verdict == "quiet":
            cause = ""
        else:
            pick = [p for p in ps if p.verdict == verdict]
            worst = max(pick, key=lambda p: p.share if p.share is not None else -1.0)
            cause = worst.cause if len(ps) == 1 else f"{worst.cause} (in {len(pick)} of {len(ps)} measurements)"
        return Quietness(verdict, share, wall, cores, others, max(threads) if threads else None, cause)


UNKNOWN = Quietness("unknown", None, 0.0, 1, None, None, "not measured")


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


# ---------------------------------------------------------------- the counters, real or injected

@dataclass(frozen=True)
class CpuCounters:
    """The CPU counters at one moment; differences between two of them describe a window."""

    t: float  # a monotonic clock, seconds
    busy_s: float | None  # CPU seconds every process spent on the watched cores since boot (None: unknown)
    own_s: float | None  # CPU seconds of this process and its children so far (None: unknown)
    own_threads: int | None = None


@dataclass(frozen=True)
class GpuWindow:
    """What else used a GPU over a window."""

    other_processes: int  # processes other than this one (and its children) with a context on the GPU
    others_share: float | None  # their SM time over the window, 0..1 (None: the driver keeps no samples)
    utilisation: float | None  # the GPU's utilisation over its last sample period, 0..1
    throttle: tuple[str, ...] = ()  # why the clocks were held down: 'thermal', 'hardware slowdown', 'power'


class Sampler(Protocol):
    """Supplies the counters a `Watch` reads. `SystemSampler` reads the OS; tests inject made-up ones."""

    tick_s: float  # the counters' resolution, seconds

    def cpu(self, cores: Sequence[int]) -> CpuCounters: ...

    def gpu_start(self, index: int) -> Any: ...

    def gpu_end(self, index: int, start: Any) -> GpuWindow | None: ...


def affinity() -> tuple[int, ...]:
    """The cores this process may run on."""
    with contextlib.suppress(AttributeError, OSError):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


class SystemSampler:
    """The operating system's counters: psutil for CPU time, NVML for the GPU (both guarded)."""

    def __init__(self) -> None:
        tck = 100
        with contextlib.suppress(AttributeError, ValueError, OSError):
            tck = int(os.sysconf("SC_CLK_TCK")) or 100
        self.tick_s = 1.0 / tck
        self._proc: Any = None
        self._nvml = False

    def cpu(self, cores: Sequence[int]) -> CpuCounters:
        import time

        t = time.monotonic()
        try:
            import psutil
        except ImportError:
            return CpuCounters(t, None, None, _own_threads(None))
        busy: float | None = None
        with contextlib.suppress(Exception):
            per = psutil.cpu_times(percpu=True)
            use = [per[i] for i in cores if i < len(per)] or list(per)
            busy = sum(_busy(c) for c in use)
        own: float | None = None
        with contextlib.suppress(Exception):
            if self._proc is None or self._proc.pid != os.getpid():
                self._proc = psutil.Process()
            ct = self._proc.cpu_times()
            own = ct.user + ct.system + getattr(ct, "children_user", 0.0) + getattr(ct, "children_system", 0.0)
            for child in self._proc.children(recursive=True):
                with contextlib.suppress(Exception):
                    cc = child.cpu_times()
                    own += cc.user + cc.system
        return CpuCounters(t, busy, own, _own_threads(self._proc))

    def _handle(self, index: int) -> Any:
        import pynvml

        if not self._nvml:
            pynvml.nvmlInit()
            self._nvml = True
        return pynvml.nvmlDeviceGetHandleByIndex(index)

    def gpu_start(self, index: int) -> Any:
        import time

        with contextlib.suppress(Exception):
            self._handle(index)
            return int(time.time() * 1e6)  # NVML's per-process samples are stamped in µs since the epoch
        return None

    def gpu_end(self, index: int, start: Any) -> GpuWindow | None:
        if start is None:
            return None
        try:
            import pynvml

            h = self._handle(index)
        except Exception:
            return None
        own = _own_pids()
        others: set[int] = set()
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            with contextlib.suppress(Exception):
                others |= {p.pid for p in getattr(pynvml, fn)(h) if p.pid not in own}
        share: float | None = None
        with contextlib.suppress(Exception):
            samples = pynvml.nvmlDeviceGetProcessUtilization(h, start)
            by_pid: dict[int, list[float]] = {}
            for s in samples:
                if s.pid not in own:
                    by_pid.setdefault(s.pid, []).append(float(s.smUtil))
            share = min(1.0, sum(sum(v) / len(v) for v in by_pid.values()) / 100.0) if by_pid else 0.0
        util: float | None = None
        with contextlib.suppress(Exception):
            util = float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu) / 100.0
        reasons: list[str] = []
        with contextlib.suppress(Exception):
            get = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
            bits = int(get(h))
            for mask, name in ((0x20 | 0x40, "thermal"), (0x08 | 0x80, "hardware slowdown"), (0x04, "power")):
                if bits & mask:
                    reasons.append(name)
        return GpuWindow(len(others), share, util, tuple(reasons))


def _busy(c: Any) -> float:
    """Busy seconds of one core from psutil's cpu_times: everything but idle and I/O wait (guest time
    is already inside user time on Linux; steal is time the host gave to someone else)."""
    total = sum(getattr(c, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))
    return float(total)


def _compute_threads(n_cores: int) -> int:
    """Cores a measurement computes on by default: torch's intra-op threads when torch is loaded, at
    most the cores this process may run on; otherwise all of them."""
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):
            return max(1, min(n_cores, int(torch.get_num_threads())))
    return n_cores


def _own_threads(proc: Any) -> int | None:
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):
            return int(torch.get_num_threads())
    with contextlib.suppress(Exception):
        return int(proc.num_threads())
    return None


def _own_pids() -> set[int]:
    pids = {os.getpid()}
    with contextlib.suppress(Exception):
        import psutil

        pids |= {c.pid for c in psutil.Process().children(recursive=True)}
        parent = os.environ.get("PERFLAB_LOCK_HELD", "").split(":")[0]  # a torchrun rank's launcher
        if parent.isdigit():
            pids.add(int(parent))
    return pids


_default: SystemSampler | None = None
_override: list[Sampler] = []
_override_guard = threading.Lock()


def default_sampler() -> Sampler:
    """The sampler a `Watch` uses when none is given: an injected one (`injected`), else the OS's."""
    global _default
    if _override:
        return _override[-1]
    if _default is None:
        _default = SystemSampler()
    return _default


@contextlib.contextmanager
def injected(sampler: Sampler) -> Iterator[Sampler]:
    """Every `Watch` started inside (by any caller) reads `sampler`: for tests with made-up load."""
    with _override_guard:
        _override.append(sampler)
    try:
        yield sampler
    finally:
        with _override_guard:
            _override.remove(sampler)


# ---------------------------------------------------------------- the watch

def _gpu_index(device: str) -> int | None:
    """The CUDA device's index, or None for any other device."""
    return _cuda_index(device) if device.startswith("cuda") else None


def _cuda_index(device: str) -> int:
    if ":" in device:
        with contextlib.suppress(ValueError):
            return int(device.split(":")[1])
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):
            if torch.cuda.is_available():
                return int(torch.cuda.current_device())
    return 0


class Watch:
    """Reads the counters on entry and exit; `result` is the window's `Quietness` after exit."""

    def __init__(self, device: object = "cpu", *, cores: int | Sequence[int] | None = None,
                 sampler: Sampler | None = None) -> None:
        self.device = str(device)
        aff = affinity()
        if cores is None:  # the threads torch computes with (a one-thread timing leaves the other cores free)
            self._watched, self._used = aff, _compute_threads(len(aff))
        elif isinstance(cores, int):
            self._watched, self._used = aff, max(1, min(int(cores), len(aff)))
        else:
            self._watched = tuple(cores) or aff
            self._used = len(self._watched)
        self._sampler = sampler
        self._start: CpuCounters | None = None
        self._gpu_start: Any = None
        self.result: Quietness = UNKNOWN

    def __enter__(self) -> Watch:
        s = self._sampler or default_sampler()
        self._sampler = s
        idx = _gpu_index(self.device)
        with contextlib.suppress(Exception):
            self._gpu_start = s.gpu_start(idx) if idx is not None else None
        self._start = s.cpu(self._watched)
        return self

    def __exit__(self, *exc: object) -> None:
        s = self._sampler or default_sampler()
        end = s.cpu(self._watched)
        gpu = None
        idx = _gpu_index(self.device)
        if idx is not None:
            with contextlib.suppress(Exception):
                gpu = s.gpu_end(idx, self._gpu_start)
        assert self._start is not None
        self.result = judge(self._start, end, cores=self._used, watched=len(self._watched), tick_s=s.tick_s,
                            gpu=gpu, gpu_expected=idx is not None)


def watch(device: object = "cpu", *, cores: int | Sequence[int] | None = None,
          sampler: Sampler | None = None) -> Watch:
    """A `Watch` of `device` (use it as a context manager; read `.result` after)."""
    return Watch(device, cores=cores, sampler=sampler)


def judge(start: CpuCounters, end: CpuCounters, *, cores: int, watched: int | None = None, tick_s: float = 0.01,
          gpu: GpuWindow | None = None, gpu_expected: bool = False) -> Quietness:
    """The verdict on one window from its two counter readings (the rule in the module docstring).

    `cores`: cores the measurement could use; `watched`: cores whose busy time was read (the others
    are taken to fill `watched - cores` free cores first)."""
    watched = max(cores, watched or cores)
    wall = max(0.0, end.t - start.t)
    threads = end.own_threads
    others: float | None = None
    share: float | None = None
    verdict, cause = "unknown", "the OS gave no CPU counters"
    if None not in (start.busy_s, end.busy_s, start.own_s, end.own_s):
        busy = float(end.busy_s) - float(start.busy_s)  # type: ignore[arg-type]
        own = float(end.own_s) - float(start.own_s)  # type: ignore[arg-type]
        free = (watched - cores) * wall  # cores the measurement left free: others use them first
        others = max(0.0, busy - own - free)
        cap = wall * cores
        share = min(1.0, others / cap) if cap > 0 else None
        slack = _TICK_SLACK * tick_s * (watched + 1)  # every watched core's count, and this process's own
        if wall < MIN_WINDOW_TICKS * tick_s or share is None:
            verdict, cause = "unknown", f"too short to tell ({wall * 1e3:.0f} ms)"
        elif share > DISTURBED_SHARE and others > slack:
            verdict = "disturbed"
            cause = f"other programs used {share * 100:.0f} % of {cores} core{'s' if cores != 1 else ''}"
        else:
            verdict, cause = "quiet", ""
    if gpu_expected:
        if gpu is None:
            gcause = "no GPU counters (NVML)"
            if verdict == "quiet":
                verdict, cause = "unknown", gcause
        else:
            bits = []
            busy_gpu = gpu.other_processes > 0 and (gpu.others_share is None or gpu.others_share > DISTURBED_SHARE)
            if busy_gpu:
                util = f", {gpu.utilisation * 100:.0f} % utilisation" if gpu.utilisation is not None else ""
                n = gpu.other_processes
                bits.append(f"{n} other process{'es' if n != 1 else ''} on the GPU{util}")
                if gpu.others_share is not None:
                    share = max(share or 0.0, gpu.others_share)
            slow = [r for r in gpu.throttle if r != "power"]
            if slow:
                bits.append(f"clocks throttled ({', '.join(slow)})")
            if bits:
                cause = "; ".join(([cause] if verdict == "disturbed" else []) + bits)
                verdict = "disturbed"
    return Quietness(verdict, share, wall, cores, others, threads, cause)


class MadeUpLoad:
    """A sampler of made-up load, for tests and demonstrations: other programs use `share` of the
    watched cores while this process uses `own_cores` cores, on the real clock. `set(share)` changes the
    load from now on (a burst starts or ends); `gpu` is what every GPU window reports; `clock` replaces
    the monotonic clock (a test's own, for windows of exact length)."""

    def __init__(self, share: float = 0.0, *, own_cores: float = 1.0, tick_s: float = 0.01,
                 threads: int | None = None, gpu: GpuWindow | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        import time

        self.tick_s = tick_s
        self.own_cores = own_cores
        self.threads = threads
        self.gpu = gpu
        self._clock = clock or time.monotonic
        self._t = self._clock()
        self._share = float(share)
        self._others_per_core = 0.0  # CPU seconds others spent on each watched core
        self._own = 0.0

    def _advance(self) -> float:
        now = self._clock()
        dt = max(0.0, now - self._t)
        self._own += self.own_cores * dt
        self._others_per_core += self._share * dt
        self._t = now
        return now

    def set(self, share: float) -> None:
        """Others use `share` of the watched cores from now on."""
        self._advance()
        self._share = float(share)

    def cpu(self, cores: Sequence[int]) -> CpuCounters:
        now = self._advance()
        return CpuCounters(now, self._own + self._others_per_core * len(cores), self._own, self.threads)

    def gpu_start(self, index: int) -> Any:
        return "made-up"

    def gpu_end(self, index: int, start: Any) -> GpuWindow | None:
        return self.gpu


def of_bench(result: Any, watched: Any = None) -> Quietness:
    """The quietness a timing carries (`BenchResult.quietness`), or what a `watch` block around it saw
    when the timing's own verdict is missing or unknown (a window too short to judge)."""
    q = as_quietness(getattr(result, "quietness", None))
    w = getattr(watched, "result", None)
    return as_quietness(w) if q.verdict == "unknown" and w is not None else q


def as_quietness(q: Any) -> Quietness:
    """A Quietness from one, from its JSON form (a saved row), or unknown from anything else."""
    if isinstance(q, Quietness):
        return q
    return Quietness.from_json(q) if isinstance(q, dict) else UNKNOWN
