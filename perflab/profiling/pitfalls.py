"""Timing pitfalls, measured: one kernel timed four ways.

    >>> rows = pitfalls(n=1024)       # Pitfall rows: wall clock without sync, with sync, CUDA events, perflab's bench
    >>> pitfall_table(rows)

On a GPU, `torch.matmul` returns as soon as the kernel is queued: a wall clock read right after it
measures the launch (microseconds), not the kernel. Synchronising before reading the clock measures
the kernel plus the launch and the sync; CUDA events, recorded on the stream around the kernel,
measure the kernel on the device; `perflab.core.timing.bench` uses events, a warm-up, an L2 flush and
repetition. On a CPU every op runs to completion before it returns: there is no queue, so "no sync"
and "sync" read the same clock after the same finished work, and CUDA events do not exist.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from perflab.core.validate import positive_int


@dataclass
class Pitfall:
    """One way of timing the matmul: seconds per call (None where it does not exist here, as CUDA events
    on a CPU), the TFLOP/s that reading implies, and what it really measures."""

    method: str
    seconds: float | None
    what_it_measures: str
    tflops: float | None = None


def pitfalls(n: int = 1024, reps: int = 10, device=None, rep_ms: float = 50) -> list[Pitfall]:
    """A n×n fp32 matmul timed four ways (median of `reps` each; `bench` for `rep_ms`); seconds per call."""
    from perflab.core.device import pick_device
    from perflab.core.timing import bench

    n, reps = positive_int("n", n, maximum=16384), positive_int("reps", reps, maximum=1000)
    dev = torch.device(device) if device is not None else pick_device()
    a = torch.randn(n, n, device=dev)
    b = torch.randn(n, n, device=dev)
    cuda = dev.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    for _ in range(3):
        _ = a @ b
    sync()

    def median(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2]

    no_sync, with_sync, events = [], [], []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        _ = a @ b
        no_sync.append(time.perf_counter() - t0)
        sync()
        t0 = time.perf_counter()
        _ = a @ b
        sync()
        with_sync.append(time.perf_counter() - t0)
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            _ = a @ b
            e1.record()
            e1.synchronize()
            events.append(e0.elapsed_time(e1) / 1e3)
    rows = [
        Pitfall("wall clock, no sync", median(no_sync),
                "the launch only" if cuda else "the op (a CPU op finishes before it returns)"),
        Pitfall("wall clock + synchronize", median(with_sync),
                "launch + kernel + sync" if cuda else "the same op: synchronize has nothing to wait for"),
        Pitfall("CUDA events", median(events) if cuda else None,
                "the kernel on the device" if cuda else "n/a: no CUDA stream on a CPU"),
    ]
    r = bench(lambda: a @ b, device=dev, warmup_ms=min(10, rep_ms), rep_ms=rep_ms)
    rows.append(Pitfall("perflab bench", r.median_s, "events + warm-up + L2 flush, median of many" if cuda else
                        "perf_counter around batches of calls, median of many"))
    flops = 2 * n ** 3
    for row in rows:
        row.tflops = flops / row.seconds / 1e12 if row.seconds else None
    return rows


def pitfall_table(rows: list[Pitfall]):
    import pandas as pd

    from perflab.core.readout import num, seconds

    return pd.DataFrame([{"method": r.method, "time": seconds(r.seconds) if r.seconds else "—",
                          "TFLOP/s": num(r.tflops) if r.tflops else "—", "what it measures": r.what_it_measures}
                         for r in rows])
