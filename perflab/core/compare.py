"""Sentences that compare two measured numbers, computed from them (lesson 00's readings).

A lesson never says "the columns agree" or "the best copy speed" from what *should* happen: it says
what the numbers did, within their noise, and names a busy machine when that is why they disagree.

* `host_sync_timings` times `a @ b` call by call, without and with waiting for the device; its
  `sentence()` compares the two medians: on a CPU they should agree (every call returns when its
  work is done), on a GPU the first is only the launch.
* `copy_levels` splits a copy sweep into what the caches gave (the best size) and what memory gave
  (the largest buffer past the last-level cache), so a cache result is never called memory speed.

Two medians are compared by their standard errors (`perflab.core.stats.compare_medians`): they
differ when |ln(a / b)| exceeds three standard errors of the ratio, and the comparison is
inconclusive when single calls scatter by more than half the median, or the machine was busy.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perflab.core.stats import Comparison, Noise, compare_medians
from perflab.core.sweepnoise import quietness_of


@dataclass
class HostSync:
    """Per-call host-timer seconds of one matmul: returned (`no_sync_s`) and finished (`synced_s`)."""

    n: int
    device_type: str
    no_sync_s: list[float]
    synced_s: list[float]
    bench_s: float  # perflab's own timer (events on a GPU), median seconds
    quietness: Any = None  # the machine's quietness over both loops
    notes: list[str] = field(default_factory=list)

    @property
    def no_sync(self) -> float:
        return statistics.median(self.no_sync_s)

    @property
    def synced(self) -> float:
        return statistics.median(self.synced_s)

    def comparison(self) -> Comparison:
        """The two medians compared by their standard errors (`perflab.core.stats.compare_medians`)."""
        return compare_medians(self.synced, self.no_sync, Noise.of(self.synced_s), Noise.of(self.no_sync_s))

    def columns(self) -> dict[str, float]:
        """The three timings, seconds per call (medians): what the lesson's table shows."""
        return {"no_sync": self.no_sync, "synced": self.synced, "perflab_bench": self.bench_s}

    def table(self):
        """The three medians in milliseconds per call, one row named for the matmul, and the machine."""
        import pandas as pd

        from perflab.core.readout import MACHINE, machine, num

        return pd.DataFrame([{"until the call returned (ms)": num(self.no_sync * 1e3),
                              "until the device finished (ms)": num(self.synced * 1e3),
                              "perflab's timer (ms)": num(self.bench_s * 1e3),
                              MACHINE: machine(quietness_of(self.quietness))}],
                            index=[f"{self.n}³ fp32 matmul on {self.device_type}"])

    def sentence(self) -> str:
        """What the first two columns say, computed from them."""
        from perflab.core.readout import num, percent

        a, b = num(self.no_sync * 1e3), num(self.synced * 1e3)
        cmp = self.comparison()
        ratio = cmp.ratio
        busy = quietness_of(self.quietness).disturbed
        if cmp.verdict == "inconclusive" or busy:  # a busy machine's timings draw no conclusion, agreeing or not
            why = (f"the machine was busy ({quietness_of(self.quietness).cause})" if busy else
                   f"single calls scattered by more than half their median (±{percent(max(Noise.of(self.no_sync_s).sigma, Noise.of(self.synced_s).sigma), 2)})")
            return (f"Inconclusive: {why}, so the medians ({a} ms and {b} ms per call) say nothing about the "
                    "device; run the cell again when the machine is quiet.")
        if self.device_type == "cpu":
            if not cmp.differ:
                return (f"The first two columns agree within their noise ({a} ms and {b} ms per call; the medians "
                        f"differ by less than {percent(cmp.margin - 1, 2)}, three standard errors): on a CPU every "
                        "call returns when its work is done.")
            return (f"The first two columns differ by {num(max(ratio, 1 / ratio), 3)}× ({a} ms and {b} ms per call), "
                    f"beyond their noise (three standard errors: {percent(cmp.margin - 1, 2)}): on a CPU every call "
                    "returns when its work is done, so the gap is the machine's: other programs or the CPU's clock "
                    "changed between the two loops. Run the cell again when the machine is quiet.")
        if ratio > 1 and cmp.differ:
            return (f"Without waiting, the host saw {a} ms per call: the launch only. Waiting for the device "
                    f"gave {b} ms, the work ({num(ratio, 3)}× longer).")
        return (f"Without waiting the host saw {a} ms per call and with waiting {b} ms: the matmul is so "
                "small that its work takes no longer than its launch; try a larger size.")


def host_sync_timings(n: int = 1024, device: Any = None, reps: int = 20) -> HostSync:
    """Time an n³ fp32 matmul `reps` times call by call: until the call returns, then (after a
    synchronize) until the device has finished it; and once with perflab's own timer. The medians
    are robust to a burst of load during one of the loops; the spreads give the noise."""
    import torch

    from perflab.core.device import pick_device, synchronize
    from perflab.core.quietness import of_bench, watch
    from perflab.core.timing import bench
    from perflab.core.validate import positive_int

    dev = torch.device(device) if device is not None else pick_device()
    n, reps = positive_int("n", n), positive_int("reps", reps, maximum=10_000)
    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(n, n, device=dev, generator=g)
    b = torch.randn(n, n, device=dev, generator=g)

    def fn():
        return a @ b

    with watch(dev) as w:
        r = bench(fn, device=dev, rep_ms=50)  # also warms up caches and thread pools
        synchronize(dev)
        returned = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            returned.append(time.perf_counter() - t0)
        synchronize(dev)
        finished = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            synchronize(dev)
            finished.append(time.perf_counter() - t0)
    return HostSync(n, dev.type, returned, finished, r.median_s, of_bench(r, w))


@dataclass(frozen=True)
class CopyLevels:
    """A copy sweep read by level: the best size (a cache result when it fits in the last-level cache)
    and the largest buffer (memory speed only when it is past that cache)."""

    best_bytes: int
    best_gbps: float
    largest_bytes: int
    largest_gbps: float
    cache_bytes: int | None  # the last-level cache the buffers are compared with (None: unknown)
    best_quietness: Any = None  # the machine while each of the two was timed (a Quietness, or its JSON)
    largest_quietness: Any = None

    @property
    def best_in_cache(self) -> bool:
        return self.cache_bytes is not None and self.best_bytes <= self.cache_bytes

    @property
    def largest_past_cache(self) -> bool:
        return self.cache_bytes is None or self.largest_bytes > self.cache_bytes

    def rows(self) -> list[dict[str, Any]]:
        """Two rows for a machine summary, each named for the level it measured."""
        mib = 2**20
        best = f"copy, fastest size ({self.best_bytes / mib:g} MiB" + (": in cache)" if self.best_in_cache else ")")
        big = f"copy, largest buffer ({self.largest_bytes / mib:g} MiB" + (
            ": memory)" if self.largest_past_cache else ": still in cache)")
        return [{"quantity": best, "measured": self.best_gbps, "unit": "GB/s"},
                {"quantity": big, "measured": self.largest_gbps, "unit": "GB/s"}]

    @property
    def busy(self) -> str | None:
        """The cause, when the best or the largest buffer was timed on a busy machine (the levels then say nothing)."""
        for q in (self.best_quietness, self.largest_quietness):
            if quietness_of(q).disturbed:
                return quietness_of(q).cause or "quietness not measured"
        return None

    def sentence(self) -> str:
        from perflab.core.readout import num
        from perflab.core.verdicts import busy_text

        mib = 2**20
        if self.busy is not None:
            both = (f"the fastest copy ({num(self.best_gbps)} GB/s, {self.best_bytes / mib:g} MiB)"
                    + (f" and the largest buffer's ({num(self.largest_gbps)} GB/s, {self.largest_bytes / mib:g} MiB)"
                       if self.largest_bytes != self.best_bytes else ", also the largest buffer,"))
            return (f"{_capital(busy_text(self.busy))}: {both} may be the neighbours', not the memory's; run the cell "
                    "again when the machine is quiet.")
        s = (f"The fastest copy ({num(self.best_gbps)} GB/s) was the {self.best_bytes / mib:g} MiB buffer"
             + (", which fits in the last-level cache: a cache result, not memory speed. " if self.best_in_cache
                else ". "))
        if self.largest_past_cache and self.largest_bytes == self.best_bytes:
            s += "It is also the largest buffer, past the last-level cache: that is memory speed."
        elif self.largest_past_cache:
            s += (f"Memory speed is the largest buffer's: {num(self.largest_gbps)} GB/s "
                  f"({self.largest_bytes / mib:g} MiB), {num(self.best_gbps / self.largest_gbps, 2)}× slower than the fastest.")
        else:
            s += (f"Even the largest buffer ({self.largest_bytes / mib:g} MiB) fits in the last-level cache, so memory "
                  "speed was not reached: try larger sizes.")
        return s


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def copy_levels(nbytes: Sequence[int], gbps: Sequence[float], cache_bytes: int | None,
                quietness: Sequence[Any] | None = None) -> CopyLevels:
    """Read a copy sweep (buffer sizes in bytes, GB/s each, and optionally each one's quietness) against
    the last-level cache size."""
    qs = list(quietness) if quietness is not None else [None] * len(nbytes)
    pts = sorted(((int(b), float(g), q) for b, g, q in zip(nbytes, gbps, qs, strict=True) if g and g > 0),
                 key=lambda p: p[0])
    if not pts:
        raise ValueError("copy_levels needs at least one measured buffer")
    best = max(pts, key=lambda p: p[1])
    return CopyLevels(best[0], best[1], pts[-1][0], pts[-1][1], int(cache_bytes) if cache_bytes else None,
                      best[2], pts[-1][2])


def last_level_cache(details: Mapping[str, Any], on_gpu: bool) -> int | None:
    """The last-level cache a copy must pass to reach memory: the GPU's L2, or the CPU's L3 (else L2)."""
    keys = ("l2_cache_bytes",) if on_gpu else ("l3_cache_bytes", "l2_cache_bytes", "l2_cache_per_core_bytes")
    for k in keys:
        v = details.get(k)
        if v:
            return int(v)
    return None
