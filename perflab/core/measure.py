"""Measurements every lesson uses: matmul TFLOP/s, device-memory copy GB/s, host→device GB/s.

Each function validates its sizes first (one-line `InputError` for a bad one), checks the kernel's
answer before timing it, and returns a small dataclass with units in its field names.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import asdict, dataclass, field

import torch

from perflab.core import validate
from perflab.core.device import describe, free_memory_bytes, pick_device
from perflab.core.dtypes import DType, check_supported, parse_dtype
from perflab.core.errors import UnsupportedError
from perflab.core.hardware import peaks_for
from perflab.core.jsonable import JSON
from perflab.core.quietness import UNKNOWN, Quietness
from perflab.core.readout import Readout, ReadoutMixin, nbytes, num, percent, seconds, spread_note
from perflab.core.timing import BenchResult, bench, check_close, default_tolerance


def matmul_flops(m: int, n: int, k: int) -> int:
    """FLOPs of C[m×n] = A[m×k] · B[k×n]: m·n·k multiply-adds, 2 FLOPs each."""
    return 2 * m * n * k


@contextlib.contextmanager
def tf32_mode(enabled: bool):
    """Temporarily allow (or forbid) TF32 matmuls on CUDA; restores the previous setting."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.backends.cuda.matmul.allow_tf32 = before


@dataclass
class MatmulResult(ReadoutMixin):
    """One timed matmul. In a notebook it shows as a small table (`readout()`), never as a repr."""

    m: int
    n: int
    k: int
    dtype: str
    device: str
    device_name: str
    median_s: float
    tflops: float  # at the median time
    peak_tflops: float | None  # spec sheet (GPU) or estimate (CPU); None when unknown
    peak_source: str
    peak_fraction: float | None
    rel_error: float
    iqr_s: float
    min_s: float
    n_reps: int
    bench: BenchResult = field(repr=False, default=None)  # type: ignore[assignment]

    def as_dict(self) -> JSON:
        d = asdict(self)
        d.pop("bench")
        return d

    @property
    def spread(self) -> float:
        """IQR / median of the timed samples (0.02: the middle half within about ±1 %)."""
        return self.iqr_s / self.median_s if self.median_s > 0 else float("nan")

    def readout(self) -> Readout:
        peak = (f"{num(self.peak_tflops)} TFLOP/s → {percent(self.peak_fraction)} of it ({self.peak_source})"
                if self.peak_tflops else f"unknown ({self.peak_source})")
        return Readout(f"{self.m}×{self.n}×{self.k} {self.dtype} matmul on {self.device_name} [{self.device}]", [
            ("rate", f"{num(self.tflops)} TFLOP/s"),
            ("median time", seconds(self.median_s)),
            ("spread (IQR / median)", percent(self.spread, 2)),
            ("fastest", f"{seconds(self.min_s)} ({num(matmul_flops(self.m, self.n, self.k) / self.min_s / 1e12)} TFLOP/s)"),
            ("timed samples", num(self.n_reps)),
            ("peak", peak),
            ("error vs float64", num(self.rel_error, 2)),
        ], [spread_note(self.spread)] + self._busy_note())

    def _busy_note(self) -> list[str]:
        """One line when the machine was busy while this matmul was timed (its rate is then not this
        device's): the bench's quietness, `perflab.core.quietness`."""
        q = self.quietness
        return [f"{q.line()}: this rate may be the neighbours', not the device's"] if q.disturbed else []

    @property
    def quietness(self) -> Quietness:
        """The machine while this matmul was timed (its bench's), unknown when it was not recorded."""
        q = getattr(self.bench, "quietness", None)
        return q if isinstance(q, Quietness) else UNKNOWN

    def rate_sentence(self) -> str:
        """The count, the time and the rate in one line ('1024³ matmul: 2.15 GFLOPs (a count) in 8.47 ms →
        0.254 TFLOP/s (a rate)'), and what the machine was doing when it was busy."""
        work = matmul_flops(self.m, self.n, self.k)
        size = f"{self.m}³" if self.m == self.n == self.k else f"{self.m}×{self.n}×{self.k}"
        line = (f"{size} matmul: {num(work / 1e9)} GFLOPs (a count) in {seconds(self.median_s)} → "
                f"{num(self.tflops)} TFLOP/s (a rate)")
        return line + "".join(f"; {n}" for n in self._busy_note())


def validate_matmul(m: int, n: int, k: int, dtype: str | DType, device: torch.device) -> tuple[int, int, int, DType]:
    """Sizes and dtype that can run on `device`, or an `InputError`/`UnsupportedError` saying why not."""
    m = validate.positive_int("m", m)
    n = validate.positive_int("n", n)
    k = validate.positive_int("k", k)
    dt = check_supported(dtype, device)
    if dt.name == "fp8":
        for name, v in (("m", m), ("n", n), ("k", k)):
            validate.positive_int(name, v, multiple_of=16)
    out_size = 2 if dt.name == "fp8" else dt.itemsize
    validate.fits_in_memory(f"a {m}×{k} by {k}×{n} {dt.name} matmul", validate.matmul_bytes(m, n, k, dt.itemsize, out_size),
                            free_memory_bytes(device))
    return m, n, k, dt


def make_matmul(m: int, n: int, k: int, dtype: str | DType = "fp32", device: torch.device | str | None = None,
                seed: int = 0):
    """Random operands on `device` and a zero-argument function computing their product.

    Returns (fn, a, b). fp8 uses `torch._scaled_mm` with unit scales and bf16 output.
    """
    dev = torch.device(device) if device is not None else pick_device()
    m, n, k, dt = validate_matmul(m, n, k, dtype, dev)
    g = torch.Generator(device="cpu").manual_seed(seed)
    if dt.name == "fp8":
        a = torch.randn(m, k, generator=g).to(dev).to(torch.float8_e4m3fn)
        bt = torch.randn(n, k, generator=g).to(dev).to(torch.float8_e4m3fn)
        b = bt.t()  # column-major, as _scaled_mm wants
        one = torch.ones((), device=dev)

        def fn():
            return torch._scaled_mm(a, b,  # pyright: ignore[reportPrivateImportUsage]  # fp8 matmul has no public API yet
                                     scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        return fn, a, b
    a = torch.randn(m, k, generator=g, dtype=torch.float32).to(dev, dt.torch_dtype)
    b = torch.randn(k, n, generator=g, dtype=torch.float32).to(dev, dt.torch_dtype)

    def fn():
        return a @ b
    return fn, a, b


def check_matmul(fn, a: torch.Tensor, b: torch.Tensor, dtype: DType, rows: int = 64) -> float:
    """Check the first `rows` rows of fn()'s product against float64; return the relative error."""
    out = fn()
    r = min(rows, a.shape[0])
    ref = a[:r].to("cpu", torch.float64) @ b.to("cpu", torch.float64)
    tol = {"fp8": 1e-1, "tf32": 5e-3}.get(dtype.name, default_tolerance(dtype.torch_dtype))
    return check_close(out[:r], ref, tol=tol, what=f"{dtype.name} matmul").rel_error


def measure_matmul(m: int, n: int, k: int, dtype: str | DType = "fp32", device: torch.device | str | None = None, *,
                   warmup_ms: float = 25, rep_ms: float = 100, flush_l2: bool | None = None,
                   check: bool = True, min_reps: int = 5) -> MatmulResult:
    """Time one m×k by k×n matmul on `device` and report TFLOP/s against the device's peak.
    `min_reps`: timed calls at least (fewer keeps a slow size within a slider's second)."""
    dev = torch.device(device) if device is not None else pick_device()
    dt = parse_dtype(dtype)
    with tf32_mode(dt.name == "tf32") if dev.type == "cuda" else contextlib.nullcontext():
        fn, a, b = make_matmul(m, n, k, dt, dev)
        rel = check_matmul(fn, a, b, dt) if check else float("nan")
        res = bench(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, device=dev, flush_l2=flush_l2, min_reps=min_reps,
                    label=f"matmul {m}×{n}×{k} {dt.name}")
    info = describe(dev)
    peaks = peaks_for(info)
    tflops = matmul_flops(m, n, k) / res.median_s / 1e12
    peak = peaks.get(dt.name)
    return MatmulResult(m, n, k, dt.name, str(dev), info.name, res.median_s, tflops, peak, peaks.source,
                        (tflops / peak) if peak else None, rel, res.iqr_s, res.min_s, res.n, res)


_RATE: dict[tuple[str, str], float] = {}  # (device, dtype) → TFLOP/s of a small probe, per process


def predicted_tflops(dtype: str, device, peak_tflops: float | None = None, probe_n: int = 256) -> float:
    """The matmul rate a prediction of "how long will this take" may assume on `device`: the larger
    of a small probe's measured rate (a 256³ matmul, timed once per device and dtype in this
    process) and half the spec peak where there is one (small matmuls underuse a GPU, so the probe
    alone would be pessimistic there). Used to keep a slider's measurement within its budget."""
    key = (str(device), str(dtype))
    if key not in _RATE:
        _RATE[key] = measure_matmul(probe_n, probe_n, probe_n, dtype, device, rep_ms=20, warmup_ms=2, check=False,
                                    min_reps=1).tflops
    return max(_RATE[key], 0.5 * peak_tflops if peak_tflops else 0.0)


@dataclass
class BandwidthResult(ReadoutMixin):
    what: str
    nbytes: int  # bytes of the buffer
    moved_bytes: int  # bytes counted per call (a device copy reads and writes: 2 × nbytes)
    median_s: float
    gbps: float  # GB/s = 1e9 bytes/s, at the median
    spec_gbps: float | None
    spec_fraction: float | None
    device: str
    n_reps: int
    iqr_s: float = float("nan")
    quietness: Quietness = UNKNOWN  # the machine while it was timed

    def as_dict(self) -> JSON:
        return {**asdict(self), "quietness": self.quietness.to_json()}

    @property
    def spread(self) -> float:
        return self.iqr_s / self.median_s if self.median_s > 0 else float("nan")

    def readout(self) -> Readout:
        spec = f"{num(self.spec_gbps)} GB/s → {percent(self.spec_fraction)} of it" if self.spec_gbps else "–"
        return Readout(f"{self.what} on {self.device}", [
            ("bandwidth", f"{num(self.gbps)} GB/s"),
            ("buffer", nbytes(self.nbytes) + (f" ({nbytes(self.moved_bytes)} moved per call)"
                                               if self.moved_bytes != self.nbytes else "")),
            ("median time", seconds(self.median_s)),
            ("spread (IQR / median)", percent(self.spread, 2)),
            ("timed samples", num(self.n_reps)),
            ("spec sheet", spec),
        ], [spread_note(self.spread)] + ([f"{self.quietness.line()}: this bandwidth may be the neighbours', not the "
                                          "device's"] if self.quietness.disturbed else []))


def measure_copy_bandwidth(nbytes: int = 256 * 2**20, device: torch.device | str | None = None, *,
                           warmup_ms: float = 25, rep_ms: float = 100) -> BandwidthResult:
    """Device-memory copy bandwidth: `dst.copy_(src)`, counting bytes read plus bytes written."""
    dev = torch.device(device) if device is not None else pick_device()
    nbytes = validate.positive_int("nbytes", nbytes)
    validate.fits_in_memory(f"a copy of {nbytes / 1e6:.0f} MB", 2 * nbytes, free_memory_bytes(dev))
    n = max(1, nbytes // 4)
    src = torch.randn(n, device=dev)
    dst = torch.empty_like(src)
    dst.copy_(src)
    if not torch.equal(dst, src):  # a copy that does not copy is not a measurement
        raise AssertionError("copy check failed: destination differs from source")
    res = bench(lambda: dst.copy_(src), warmup_ms=warmup_ms, rep_ms=rep_ms, device=dev, flush_l2=False,
                label=f"copy {n * 4 / 1e6:.0f} MB")
    moved = 2 * n * 4
    gbps = moved / res.median_s / 1e9
    spec = None
    if dev.type == "cuda":
        from perflab.core.hardware import lookup

        s = lookup(describe(dev).name)
        spec = s.memory_bandwidth_gbps if s else None
    return BandwidthResult("device copy", n * 4, moved, res.median_s, gbps, spec, gbps / spec if spec else None,
                           str(dev), res.n, res.iqr_s, res.quietness)


def measure_host_to_device(nbytes: int = 256 * 2**20, pinned: bool = True, device: torch.device | str | None = None, *,
                           warmup_ms: float = 25, rep_ms: float = 100) -> BandwidthResult:
    """Host→device copy bandwidth from pinned (page-locked) or pageable host memory. GPU only."""
    dev = torch.device(device) if device is not None else pick_device()
    if dev.type != "cuda":
        raise UnsupportedError("host→device copies need a CUDA GPU: on a CPU the tensor is already in host memory")
    nbytes = validate.positive_int("nbytes", nbytes)
    validate.fits_in_memory(f"a {nbytes / 1e6:.0f} MB transfer", nbytes, free_memory_bytes(dev))
    n = max(1, nbytes // 4)
    src = torch.randn(n).pin_memory() if pinned else torch.randn(n)
    dst = torch.empty(n, device=dev)
    dst.copy_(src)
    torch.cuda.synchronize(dev)
    if not torch.equal(dst.cpu(), src):
        raise AssertionError("host→device check failed")
    res = bench(lambda: dst.copy_(src, non_blocking=pinned), warmup_ms=warmup_ms, rep_ms=rep_ms, device=dev,
                flush_l2=False, label=f"H2D {'pinned' if pinned else 'pageable'}")
    gbps = n * 4 / res.median_s / 1e9
    return BandwidthResult(f"host→device ({'pinned' if pinned else 'pageable'})", n * 4, n * 4, res.median_s, gbps,
                           None, None, str(dev), res.n, res.iqr_s, res.quietness)


# ---------------------------------------------------------------- sweeps used by the lessons

def sweep_matmul(points: list[dict], device: torch.device | str | None = None, *, name: str = "matmul",
                 rep_ms: float = 100, warmup_ms: float = 25, progress: bool = True):
    """Measure matmuls at `points` ({m, n, k, dtype} each) as a resumable sweep (see perflab.core.results).

    Each row gets median_s, tflops, peak_tflops, peak_fraction, intensity (FLOPs/byte), rel_error, its
    relative spread and the machine's quietness while it was timed (`perflab.core.quietness`).
    """
    from perflab.core.results import run_sweep
    from perflab.core.roofline import matmul_intensity

    dev = torch.device(device) if device is not None else pick_device()

    def one(p):
        r = measure_matmul(p["m"], p["n"], p["k"], p.get("dtype", "fp32"), dev, rep_ms=rep_ms, warmup_ms=warmup_ms)
        itemsize = parse_dtype(r.dtype).itemsize
        return {"median_s": r.median_s, "tflops": r.tflops, "peak_tflops": r.peak_tflops,
                "peak_fraction": r.peak_fraction, "rel_error": r.rel_error, "iqr_s": r.iqr_s,
                "intensity": matmul_intensity(r.m, r.n, r.k, itemsize), "spread": r.spread,
                "quietness": r.quietness.to_json()}

    return run_sweep(name, points, one, device_slug=describe(dev).slug, progress=progress)


def sweep_copy(sizes_bytes: list[int], device: torch.device | str | None = None, *, name: str = "copy",
               rep_ms: float = 50, progress: bool = True):
    """Device-memory copy GB/s for each buffer size, as a resumable sweep; each row carries the machine's
    quietness while it was timed."""
    from perflab.core.results import run_sweep

    dev = torch.device(device) if device is not None else pick_device()

    def one(p):
        r = measure_copy_bandwidth(p["nbytes"], dev, rep_ms=rep_ms)
        return {"gbps": r.gbps, "median_s": r.median_s, "moved_bytes": r.moved_bytes, "spec_gbps": r.spec_gbps,
                "spread": r.spread, "quietness": r.quietness.to_json()}

    return run_sweep(name, [{"nbytes": int(s)} for s in sizes_bytes], one, device_slug=describe(dev).slug,
                     progress=progress)


def host_sync_demo(n: int = 1024, device: torch.device | str | None = None, reps: int = 20) -> dict[str, float]:
    """What a host timer sees around `a @ b` with and without waiting for the device.

    Returns seconds per call (medians of `reps` calls timed one by one): 'no_sync' (time until the
    call returns), 'synced' (until the device has finished) and 'perflab_bench'
    (perflab.core.timing.bench: events on GPU). On a GPU, 'no_sync' is only the launch: the kernel
    runs asynchronously. On a CPU the call returns when the work is done, so the first two should
    agree; `perflab.core.compare.host_sync_timings(...).sentence()` says whether they did.
    """
    from perflab.core.compare import host_sync_timings

    return host_sync_timings(n, device, reps).columns()


@dataclass(frozen=True)
class ElementwiseResult:
    """c = a + b timed: a memory-bound kernel's rate, its bandwidth and where it sits on the roofline."""

    numel: int
    median_s: float
    tflops: float
    gbps: float  # bytes read + written per second, 1e9 bytes
    intensity: float  # FLOPs per byte: 1/(3·itemsize)
    quietness: Quietness = UNKNOWN


def measure_elementwise(numel: int, dtype: str = "fp32", device: torch.device | str | None = None, *,
                        rep_ms: float = 50) -> ElementwiseResult:
    """Time c = a + b over `numel` elements: a memory-bound kernel (intensity 1/(3·itemsize) FLOP/byte)."""
    from perflab.core.roofline import elementwise_flops_and_bytes

    dev = torch.device(device) if device is not None else pick_device()
    dt = check_supported(dtype, dev)
    numel = validate.positive_int("numel", numel)
    validate.fits_in_memory(f"three {numel}-element tensors", 3 * numel * dt.itemsize, free_memory_bytes(dev))
    a = torch.randn(numel, device=dev).to(dt.torch_dtype)
    b = torch.randn(numel, device=dev).to(dt.torch_dtype)
    out = torch.empty_like(a)
    torch.add(a, b, out=out)
    check_close(out, a.double() + b.double(), tol=default_tolerance(dt.torch_dtype), what="a + b")
    r = bench(lambda: torch.add(a, b, out=out), device=dev, rep_ms=rep_ms, flush_l2=False, label=f"add {numel}")
    flops, nbytes = elementwise_flops_and_bytes(numel, dt.itemsize)
    return ElementwiseResult(numel, r.median_s, flops / r.median_s / 1e12, nbytes / r.median_s / 1e9, flops / nbytes,
                             r.quietness)
