"""Time a kernel the way `triton.testing.do_bench` does, on any device.

    >>> r = bench(lambda: a @ b, label="matmul 1024³ fp32")
    >>> r.median_s, r.iqr_s, r.n            # seconds per call, spread, number of timed calls

How it works (the same recipe as triton's do_bench, see triton/testing.py):
1. Call `fn` once and wait for the device (compilation, handle creation and caches stay out).
2. Estimate one call's time from 5 calls.
3. Warm up for `warmup_ms` of calls, then time calls for `rep_ms` (at least `min_reps`).
4. On CUDA every call is bracketed by its own pair of CUDA events, so the host's launch
   overhead is not counted, and (by default) a 256 MB buffer is zeroed before each call to
   flush the L2 cache, so every call reads its inputs from device memory.
5. On CPU (and MPS) calls are timed with `time.perf_counter`; calls shorter than `min_sample_s`
   are batched several to a sample so the clock's resolution does not dominate.
6. The device's lock (perflab.core.lock) is held throughout, so two learners on one box take turns;
   `waited_s` is the time spent waiting for it, apart from the time spent measuring.
7. The measurement runs inside a `perflab.core.quietness.Watch`: `quietness` says whether other
   programs used the device meanwhile (quiet, disturbed with the share and cause, or unknown). The
   readout shows one line about it only when the timing was disturbed.
Report the median (robust to the odd preempted call); `iqr_s` and `min_s` tell how noisy it was.

`check_close` compares a kernel's answer with a reference before timing it: a fast wrong answer
is not a result.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from perflab.core.errors import CorrectnessError
from perflab.core.jsonable import JSON
from perflab.core.lock import device_lock
from perflab.core.quietness import UNKNOWN, Quietness, watch
from perflab.core.readout import Readout, ReadoutMixin, num, percent, spread_note
from perflab.core.readout import seconds as fmt_seconds

FLUSH_BYTES = 256 * 2**20  # triton's default cache-clearing buffer: larger than any GPU's L2


@dataclass
class BenchResult(ReadoutMixin):
    """Timing of one kernel. Every time is in seconds per call. In a notebook it shows as a table."""

    times_s: list[float]
    label: str = ""
    device: str = "cpu"
    calls_per_sample: int = 1
    flushed_l2: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    quietness: Quietness = UNKNOWN  # what else used the device while it was timed (filled by `bench`)
    waited_s: float = 0.0  # seconds spent waiting for the device's lock before measuring

    @property
    def n(self) -> int:
        """Number of timed samples."""
        return len(self.times_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def mean_s(self) -> float:
        return statistics.fmean(self.times_s)

    @property
    def min_s(self) -> float:
        return min(self.times_s)

    @property
    def max_s(self) -> float:
        return max(self.times_s)

    @property
    def std_s(self) -> float:
        return statistics.stdev(self.times_s) if self.n > 1 else 0.0

    def quantile(self, q: float) -> float:
        """The `q` quantile of the timed samples (`perflab.core.stats.quantile`: linear interpolation)."""
        from perflab.core.stats import quantile

        return quantile(self.times_s, q)

    @property
    def iqr_s(self) -> float:
        """Interquartile range (p75 − p25): the spread of the middle half of the samples."""
        from perflab.core.stats import iqr

        return iqr(self.times_s)

    @property
    def spread(self) -> float:
        """IQR relative to the median: 0.02 means the middle half lies within ±1% or so."""
        return self.iqr_s / self.median_s if self.median_s > 0 else float("nan")

    def rate(self, work: float) -> float:
        """`work` units per second at the median time (e.g. FLOPs → FLOP/s)."""
        return work / self.median_s

    def as_dict(self) -> JSON:
        return {"label": self.label, "device": self.device, "median_s": self.median_s, "mean_s": self.mean_s,
                "min_s": self.min_s, "max_s": self.max_s, "iqr_s": self.iqr_s, "n": self.n,
                "calls_per_sample": self.calls_per_sample, "flushed_l2": self.flushed_l2,
                "waited_s": self.waited_s, "quietness": self.quietness.to_json(), **self.meta}

    to_json = as_dict

    def disturbed_note(self) -> str | None:
        """One short line when the timing was disturbed (else None): what else used the device."""
        return self.quietness.line() if self.quietness.disturbed else None

    def readout(self) -> Readout:
        return Readout(f"{self.label or 'kernel'} on {self.device}", [
            ("median", fmt_seconds(self.median_s)),
            ("spread (IQR / median)", percent(self.spread, 2)),
            ("min", fmt_seconds(self.min_s)),
            ("timed samples", num(self.n) + (f" × {self.calls_per_sample} calls" if self.calls_per_sample > 1 else "")),
            *self._wait_row(),
        ], [self.disturbed_note(), spread_note(self.spread)])

    def _wait_row(self) -> list[tuple[str, str]]:
        """'waited for the device: 7.0 s (then measured 0.131 s)', only when the lock made it wait."""
        from perflab.core.lock import FIRST_NOTE_S

        if self.waited_s < FIRST_NOTE_S:
            return []
        return [("waited for the device", f"{fmt_seconds(self.waited_s)} (then measured "
                                          f"{fmt_seconds(self.quietness.wall_s)})")]

    def __str__(self) -> str:
        notes = [n for n in (self.disturbed_note(), spread_note(self.spread)) if n]
        return (f"{self.label or 'kernel'}: median {_fmt_s(self.median_s)} "
                f"(IQR {_fmt_s(self.iqr_s)}, min {_fmt_s(self.min_s)}, n={self.n}) on {self.device}"
                + "".join(f" ⚠ {n}" for n in notes))


def _fmt_s(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} µs"


_flush_buffers: dict[str, torch.Tensor] = {}


def _flush_buffer(dev: torch.device) -> torch.Tensor:
    key = str(dev)
    if key not in _flush_buffers:
        size = FLUSH_BYTES
        if dev.type == "cuda":
            l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0)
            size = max(size, 4 * int(l2))
        _flush_buffers[key] = torch.empty(size // 4, dtype=torch.int32, device=dev)
    return _flush_buffers[key]


def bench(
    fn: Callable[[], Any],
    *,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    device: torch.device | str | None = None,
    flush_l2: bool | None = None,
    grad_to_none: Sequence[torch.Tensor] | None = None,
    min_reps: int = 5,
    max_reps: int = 10_000,
    min_sample_s: float = 2e-4,
    label: str = "",
) -> BenchResult:
    """Time `fn()` with warm-up and repetition budgets in milliseconds (as do_bench does).

    device: where `fn` runs (default: perflab's pick). flush_l2: zero a 256 MB buffer before every
    timed call (default on CUDA, off elsewhere). grad_to_none: tensors whose `.grad` is reset
    before each call, so backward passes do not accumulate. Returns seconds per call.
    """
    from perflab.core.device import pick_device

    dev = torch.device(device) if device is not None else pick_device()
    if warmup_ms < 0 or rep_ms <= 0:
        raise ValueError("warmup_ms must be ≥ 0 and rep_ms > 0")
    if flush_l2 is None:
        flush_l2 = dev.type == "cuda"
    # one measurement on a device at a time, across processes and users (perflab.core.lock)
    # and the quietness of the machine while it measures (the wait for the lock stays out of it)
    with device_lock(dev, label=label) as waited, watch(dev) as w:
        if dev.type == "cuda":
            res = _bench_cuda(fn, dev, warmup_ms, rep_ms, flush_l2, grad_to_none, min_reps, max_reps, label)
        else:
            res = _bench_host(fn, dev, warmup_ms, rep_ms, flush_l2, grad_to_none, min_reps, max_reps, min_sample_s,
                              label)
    res.quietness = w.result
    res.waited_s = waited
    return res


def _reset_grads(grad_to_none):
    if grad_to_none:
        for t in grad_to_none:
            t.grad = None


def _bench_cuda(fn, dev, warmup_ms, rep_ms, flush_l2, grad_to_none, min_reps, max_reps, label) -> BenchResult:
    with torch.cuda.device(dev):
        fn()
        torch.cuda.synchronize()
        cache = _flush_buffer(dev) if flush_l2 else None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            if cache is not None:
                cache.zero_()
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate_ms = max(start.elapsed_time(end) / 5, 1e-4)
        n_warmup = max(1, int(warmup_ms / estimate_ms))
        n_repeat = min(max_reps, max(min_reps, int(rep_ms / estimate_ms)))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
        for _ in range(n_warmup):
            fn()
        for i in range(n_repeat):
            _reset_grads(grad_to_none)
            if cache is not None:
                cache.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]
    return BenchResult(times, label=label, device=str(dev), flushed_l2=flush_l2)


def _bench_host(fn, dev, warmup_ms, rep_ms, flush_l2, grad_to_none, min_reps, max_reps, min_sample_s, label) -> BenchResult:
    from perflab.core.device import synchronize

    sync = (lambda: synchronize(dev)) if dev.type != "cpu" else (lambda: None)
    cache = _flush_buffer(dev) if flush_l2 else None
    pc = time.perf_counter
    fn()
    sync()
    # up to 5 calls for the estimate, fewer when they already fill the repetition budget (a call
    # of a second would otherwise cost 5 s before the first timed one)
    t0 = pc()
    n_est = 0
    while n_est < 5:
        fn()
        n_est += 1
        if n_est < 5 and pc() - t0 >= rep_ms / 1e3:
            sync()
            if pc() - t0 >= rep_ms / 1e3:
                break
    sync()
    estimate = max((pc() - t0) / n_est, 1e-7)
    per_sample = 1 if (estimate >= min_sample_s or cache is not None or grad_to_none) else math.ceil(min_sample_s / estimate)
    n_warmup_calls = max(1, int(warmup_ms / 1e3 / estimate))
    n_repeat = min(max_reps, max(min_reps, int(rep_ms / 1e3 / (estimate * per_sample))))
    for _ in range(n_warmup_calls):
        fn()
    sync()
    times = []
    for _ in range(n_repeat):
        _reset_grads(grad_to_none)
        if cache is not None:
            cache.zero_()
        t0 = pc()
        for _ in range(per_sample):
            fn()
        sync()
        times.append((pc() - t0) / per_sample)
    return BenchResult(times, label=label, device=str(dev), calls_per_sample=per_sample, flushed_l2=cache is not None)


# ---------------------------------------------------------------- correctness before speed

def default_tolerance(dtype: torch.dtype, tf32: bool = False) -> float:
    """Relative-error tolerance ‖out − ref‖ / ‖ref‖ by dtype (reference computed in float64).

    fp32 arithmetic lands far below 1e-4; TF32 (10-bit mantissa) near 3e-4; bf16/fp16 operands
    between 1e-3 and 1e-2; fp8 near 5e-2.
    """
    if dtype in (torch.float64,):
        return 1e-10
    if dtype == torch.float32:
        return 5e-3 if tf32 else 1e-4
    if dtype in (torch.float16, torch.bfloat16):
        return 2e-2
    return 1e-1


@dataclass
class CheckResult:
    rel_error: float
    max_abs_error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.rel_error <= self.tolerance


def check_close(out: torch.Tensor, ref: torch.Tensor, *, tol: float | None = None, what: str = "result") -> CheckResult:
    """Compare `out` with `ref` by relative Frobenius error; raise `CorrectnessError` when off.

    `ref` should be computed in higher precision (float64) on the same inputs. NaN or Inf in
    `out` where `ref` is finite fails, as does a shape mismatch.
    """
    if tuple(out.shape) != tuple(ref.shape):
        raise CorrectnessError(f"{what} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    if not torch.isfinite(o).all() and torch.isfinite(r).all():
        raise CorrectnessError(f"{what} contains NaN or Inf where the reference is finite")
    tol = default_tolerance(out.dtype) if tol is None else tol
    denom = torch.linalg.vector_norm(r).item() or 1.0
    rel = torch.linalg.vector_norm(o - r).item() / denom
    res = CheckResult(rel, (o - r).abs().max().item() if o.numel() else 0.0, tol)
    if not res.ok:
        raise CorrectnessError(f"{what} is wrong: relative error {rel:.2e} exceeds tolerance {tol:.1e} "
                               f"(max abs error {res.max_abs_error:.3g})")
    return res


def bench_checked(fn: Callable[[], torch.Tensor], reference: Callable[[], torch.Tensor] | torch.Tensor, *,
                  tol: float | None = None, **bench_kwargs) -> BenchResult:
    """Check `fn()` against `reference` (a tensor, or a function computing it), then time `fn`."""
    out = fn()
    ref = reference() if callable(reference) else reference
    chk = check_close(out, ref, tol=tol, what=bench_kwargs.get("label") or "kernel output")
    res = bench(fn, **bench_kwargs)
    res.meta["rel_error"] = chk.rel_error
    return res
