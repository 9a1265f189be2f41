"""Pinned (page-locked) host memory, non_blocking copies and a side stream: what each one buys.

Five ways to get the next batch onto a CUDA GPU while this step computes (`VARIANTS`):

- **pageable** (`.to(dev)`): the driver copies the tensor into a pinned staging buffer, then DMAs
  it; the host waits for the whole copy.
- **pageable + non_blocking**: still staged; the call returns only once the data is in the staging
  buffer (CUDA runtime API, "API synchronization behavior": for pageable host memory "a stream
  sync is performed before the copy is initiated"), so the host barely gains.
- **pinned** (`.pin_memory()` / `DataLoader(pin_memory=True)`): the DMA engine reads the tensor
  directly (no staging copy: a faster copy); the host still waits for it.
- **pinned + non_blocking**: the copy is queued and the host goes on at once (it can prepare the
  next batch or queue the step's kernels). But the copy and the matmul are on the *same* stream, so
  the device still runs them one after the other: the step takes copy + compute.
- **pinned + non_blocking + side stream** (`prefetch`): the next batch's copy is queued on a second
  stream, which the GPU's copy engine runs *while* the compute stream multiplies: the step takes
  about max(copy, compute). Two rules make it correct: the compute stream `wait_stream`s the copy
  stream before it touches the batch, and the batch (allocated on the copy stream) is marked with
  `record_stream(compute stream)` so the caching allocator does not hand its memory to the next
  copy while the compute stream may still read it.

`run_steps` is that loop written once against a small stream interface (`CudaStreams` on a GPU;
the tests drive it with fake streams and check the order of every copy, wait, record and step).
`measure_variants` times the five on a GPU; `predict_step_s` says what each should take from a
copy time and a compute time; `pin_cost` times the pinning itself.

On a CPU there is no device copy to speed up: `pin_memory=True` without an accelerator warns and
does nothing, and `.to("cpu", non_blocking=True)` is a no-op. `cpu_explanation` says so; the
lesson shows published figures (`perflab.dataloading.published.published_2x2`) instead.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from perflab.core.errors import InputError, UnsupportedError


def cpu_explanation() -> str:
    return ("No CUDA device here: pin_memory=True has nothing to speed up (torch warns and skips pinning), and a "
            "non_blocking copy to the CPU is a no-op. The 2×2 below is the published A100 measurement; "
            "`perflab.dataloading.pinned.measure_variants()` measures all five variants on a GPU.")


def gb_per_s(nbytes: int, seconds: float) -> float:
    """Decimal gigabytes per second (1 GB = 1e9 bytes, as nvbandwidth and vendors count)."""
    if seconds <= 0:
        raise ValueError(f"a copy takes a positive time, got {seconds} s")
    return nbytes / seconds / 1e9


@dataclass(frozen=True)
class Variant:
    """One way to copy the next batch: host memory kind, blocking or not, which stream."""

    name: str
    pinned: bool
    non_blocking: bool
    side_stream: bool
    host_waits: str  # what the host does during the copy
    device: str  # whether the device overlaps copy and compute

    def __post_init__(self) -> None:
        if self.side_stream and not (self.pinned and self.non_blocking):
            raise ValueError("a side stream overlaps only a pinned, non_blocking copy (any other copy blocks the host)")


VARIANTS: tuple[Variant, ...] = (
    Variant("pageable", False, False, False, "waits for the whole copy (staged through a pinned buffer)",
            "copy, then compute"),
    Variant("pageable + non_blocking", False, True, False,
            "waits for the stream's earlier work, then for the staging copy (pageable memory cannot be DMA'd directly)",
            "copy, then compute"),
    Variant("pinned", True, False, False, "waits for the copy (a direct DMA, no staging: faster)",
            "copy, then compute"),
    Variant("pinned + non_blocking", True, True, False, "goes on at once", "copy, then compute (one stream)"),
    Variant("pinned + non_blocking + side stream", True, True, True, "goes on at once",
            "copy of the next batch during this compute"),
)


def variant(name: str) -> Variant:
    for v in VARIANTS:
        if v.name == name:
            return v
    raise InputError(f"unknown copy variant {name!r}: use one of {', '.join(v.name for v in VARIANTS)}")


def predict_step_s(v: Variant, copy_s: float, compute_s: float) -> float:
    """A step's time on the device for a copy of `copy_s` (at this variant's copy speed) and a
    compute of `compute_s`: one stream runs them in turn; a side stream runs them side by side."""
    if copy_s < 0 or compute_s < 0:
        raise ValueError("times are not negative")
    return max(copy_s, compute_s) if v.side_stream else copy_s + compute_s


def overlap_fraction(copy_s: float, compute_s: float, step_s: float) -> float:
    """How much of the shorter of copy and compute was hidden: 0 when the step took copy + compute,
    1 when it took max(copy, compute). Measured values can fall slightly outside [0, 1]."""
    hidden = copy_s + compute_s - step_s
    shorter = min(copy_s, compute_s)
    return hidden / shorter if shorter > 0 else 0.0


def variant_table():
    """What each variant buys, as a DataFrame (no measurement: the rules above)."""
    import pandas as pd

    return pd.DataFrame([{"variant": v.name, "the host during the copy": v.host_waits, "the device": v.device}
                         for v in VARIANTS])


class Streams(Protocol):
    """The stream operations `run_steps` needs; `CudaStreams` is the real one."""

    def current(self) -> Any: ...
    def new(self) -> Any: ...
    def use(self, stream: Any) -> contextlib.AbstractContextManager: ...
    def copy(self, host: Any, non_blocking: bool) -> Any: ...
    def wait(self, waiter: Any, waitee: Any) -> None: ...
    def record(self, tensor: Any, stream: Any) -> None: ...


class CudaStreams:
    """`Streams` on a CUDA device (torch.cuda streams, Tensor.record_stream)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def current(self) -> torch.cuda.Stream:
        return torch.cuda.current_stream(self.device)

    def new(self) -> torch.cuda.Stream:
        return torch.cuda.Stream(self.device)

    def use(self, stream: torch.cuda.Stream) -> contextlib.AbstractContextManager:
        return torch.cuda.stream(stream)

    def copy(self, host: torch.Tensor, non_blocking: bool) -> torch.Tensor:
        return host.to(self.device, non_blocking=non_blocking)

    def wait(self, waiter: torch.cuda.Stream, waitee: torch.cuda.Stream) -> None:
        waiter.wait_stream(waitee)

    def record(self, tensor: torch.Tensor, stream: torch.cuda.Stream) -> None:
        tensor.record_stream(stream)


def run_steps(host_batches: Sequence[Any], step: Callable[[Any], Any], streams: Streams, v: Variant) -> list[float]:
    """Copy each batch to the device and run `step` on it, the next batch's copy issued before this
    step's compute. Returns the seconds the host spent inside each copy call.

    With a side stream, per batch: the compute stream waits for the copy stream (the batch is
    complete before it is read), the batch is recorded on the compute stream (its memory, allocated
    on the copy stream, is not reused until the compute stream's work queued so far is done), then
    the next copy is queued on the copy stream and the step on the compute stream. The host
    batches themselves must stay unchanged until their copy has run (here they are never written).
    """
    if not host_batches:
        return []
    main = streams.current()
    side = streams.new() if v.side_stream else None
    blocked: list[float] = []

    def issue(host):
        t0 = time.perf_counter()
        if side is None:
            dev = streams.copy(host, v.non_blocking)
        else:
            with streams.use(side):
                dev = streams.copy(host, v.non_blocking)
        blocked.append(time.perf_counter() - t0)
        return dev

    nxt = issue(host_batches[0])
    for i in range(len(host_batches)):
        cur = nxt
        if side is not None:
            streams.wait(main, side)  # this batch's copy is done before the step reads it
            streams.record(cur, main)  # its memory outlives the step's use on the compute stream
        if i + 1 < len(host_batches):
            nxt = issue(host_batches[i + 1])  # the next copy, queued before this step's compute
        step(cur)
    return blocked


@dataclass
class VariantRun:
    """One copy variant timed on a GPU: seconds per step, and what the copy and the compute took alone."""

    variant: str
    pinned: bool
    non_blocking: bool
    side_stream: bool
    bytes: int  # per batch
    h2d_gb_per_s: float  # the copy alone (GB = 1e9 bytes)
    copy_s: float
    compute_s: float
    step_s: float  # copy and compute as the variant runs them
    predicted_step_s: float  # `predict_step_s` from copy_s and compute_s
    host_in_copy_s: float  # the host's time inside the copy call
    overlap: float  # `overlap_fraction`: how much of the shorter of the two was hidden


def measure_variants(nbytes: int = 64 << 20, compute_n: int = 4096, steps: int = 8,
                     names: Sequence[str] | None = None) -> list[VariantRun]:
    """On a CUDA GPU, for each variant: the copy's GB/s, the compute's and the step's time, the
    host's time inside the copy call, the step predicted from copy and compute, and the overlap.

    The step copies a batch of `nbytes` and multiplies two compute_n² bf16 matrices, adding one
    byte of the batch so the step truly depends on its copy.
    """
    if not torch.cuda.is_available():
        raise UnsupportedError("the copy variants need a CUDA device")
    from perflab.core.validate import positive_int

    nbytes = positive_int("nbytes", nbytes)
    steps = positive_int("steps", steps)
    chosen = [variant(n) for n in names] if names is not None else list(VARIANTS)
    dev = torch.device("cuda", torch.cuda.current_device())
    streams = CudaStreams(dev)
    a = torch.randn(compute_n, compute_n, device=dev, dtype=torch.bfloat16)

    def step(batch):
        return (a @ a) + batch[-1]

    def timed(fn) -> float:
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize(dev)
        return time.perf_counter() - t0

    resident = torch.zeros(1, dtype=torch.uint8, device=dev)  # a batch already on the device
    for _ in range(2):  # cuBLAS and the allocator warmed up
        step(resident)
    compute_s = timed(lambda: [step(resident) for _ in range(steps)]) / steps
    rows = []
    for v in chosen:
        hosts = [torch.empty(nbytes, dtype=torch.uint8) for _ in range(2)]
        if v.pinned:
            hosts = [h.pin_memory() for h in hosts]
        batches = [hosts[i % 2] for i in range(steps)]
        run_steps(batches[:2], step, streams, v)  # warm-up: the side stream and its pool exist
        copy_s = timed(lambda: [streams.copy(h, v.non_blocking) for h in batches]) / steps  # noqa: B023
        blocked: list[float] = []
        step_s = timed(lambda: blocked.extend(run_steps(batches, step, streams, v))) / steps  # noqa: B023
        rows.append(VariantRun(v.name, v.pinned, v.non_blocking, v.side_stream, nbytes, gb_per_s(nbytes, copy_s),
                               copy_s, compute_s, step_s, predict_step_s(v, copy_s, compute_s),
                               sum(blocked) / len(blocked), overlap_fraction(copy_s, compute_s, step_s)))
    return rows


@dataclass
class PinCost:
    """Pinning `bytes` of host memory against the pinned copy it speeds up."""

    bytes: int
    pin_s: float
    pin_gb_per_s: float
    is_pinned: bool
    pinned_copy_s: float  # the pinned tensor's copy to the device
    pin_over_copy: float  # pin_s / pinned_copy_s

    def line(self) -> str:
        """In one sentence."""
        from perflab.core import readout

        return (f"pinning {readout.nbytes(self.bytes)} took {readout.seconds(self.pin_s)} "
                f"({readout.num(self.pin_gb_per_s)} GB/s), {readout.num(self.pin_over_copy)}× the time of the "
                "pinned copy to the device")


def pin_cost(nbytes: int) -> PinCost:
    """Time to pin a tensor of `nbytes` (a page-locked allocation, which torch's host allocator
    caches and may reuse on a later call, plus a copy into it) and the rate in GB/s, against a
    pinned copy's own time to the device (CUDA only). Pinned pages stay in RAM until freed: the OS
    cannot swap them out."""
    if not torch.cuda.is_available():
        raise UnsupportedError("pinning needs a CUDA device; on a CPU it does nothing")
    from perflab.core.validate import positive_int

    nbytes = positive_int("nbytes", nbytes)
    x = torch.empty(nbytes, dtype=torch.uint8)
    x.fill_(1)  # the pages exist before the clock starts
    t0 = time.perf_counter()
    y = x.pin_memory()
    pin_s = time.perf_counter() - t0
    dev = torch.device("cuda", torch.cuda.current_device())
    y.to(dev)
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    y.to(dev, non_blocking=True)
    torch.cuda.synchronize(dev)
    copy_s = time.perf_counter() - t0
    return PinCost(nbytes, pin_s, gb_per_s(nbytes, pin_s), y.is_pinned(), copy_s, pin_s / copy_s)


def measured_table(rows: Sequence[VariantRun]):
    """`measure_variants`' rows for reading: units in the headers, three significant digits."""
    import pandas as pd

    from perflab.core import readout

    return pd.DataFrame([{"variant": r.variant, "copy (GB/s)": readout.num(r.h2d_gb_per_s),
                          "host in the copy call": readout.seconds(r.host_in_copy_s),
                          "compute alone": readout.seconds(r.compute_s), "step": readout.seconds(r.step_s),
                          "step predicted": readout.seconds(r.predicted_step_s),
                          "overlap (of the shorter)": readout.percent(r.overlap)} for r in rows])


def pin_cost_line(cost: PinCost) -> str:
    """`pin_cost`'s result in one sentence (`cost.line()`)."""
    return cost.line()


@dataclass
class CopyCase:
    """One cell of the pin_memory × non_blocking 2×2, as the published one is keyed."""

    pin_memory: bool
    non_blocking: bool
    h2d_gb_per_s: float
    step_s: float


def measure_2x2(nbytes: int = 256 << 20, compute_n: int = 4096, reps: int = 10) -> list[CopyCase]:
    """The four single-stream variants of `measure_variants` (pin_memory × non_blocking), keyed as
    the published 2×2 is; no side stream, so the device runs copy and compute in turn in all four."""
    rows = measure_variants(nbytes, compute_n, reps, names=[v.name for v in VARIANTS if not v.side_stream])
    return [CopyCase(r.pinned, r.non_blocking, r.h2d_gb_per_s, r.step_s) for r in rows]


@dataclass(frozen=True)
class PinnedDemo:
    """Lesson 07's section 7: the five copy variants and the cost of pinning, measured on a CUDA GPU;
    on a CPU nothing to measure, and the published 2×2 stands in (`perflab.dataloading.published`)."""

    rows: tuple[VariantRun, ...] = ()
    cost: PinCost | None = None

    def text(self) -> str:
        from perflab.dataloading import published

        if not self.rows:
            return f"{cpu_explanation()}\nPublished: {published.pin_memory_source()}"
        return (f"{self.cost.line() if self.cost else 'pinning not timed'}\nPublished, for comparison "
                f"({published.pin_memory_source()}): "
                + "; ".join(f"pin_memory={r['pin_memory']}, non_blocking={r['non_blocking']}: {r['avg_time_s']:g} s"
                            for r in published.pin_memory_rows()))

    def table(self):
        """The measured variants on a GPU; the published 2×2 on a CPU."""
        from perflab.dataloading import published

        return measured_table(self.rows) if self.rows else published.pin_memory_table()

    def measured_copies(self) -> dict[str, str] | None:
        """Each variant's copy rate as text, for `perflab.course.gpu_figures.show` (None on a CPU)."""
        from perflab.core.readout import num

        return {r.variant: f"{num(r.h2d_gb_per_s)} GB/s" for r in self.rows} or None


def demo(nbytes: int, steps: int, pin_bytes: int) -> PinnedDemo:
    """On a CUDA GPU: `measure_variants(nbytes, steps=steps)` and `pin_cost(pin_bytes)`; elsewhere empty."""
    if not torch.cuda.is_available():
        return PinnedDemo()
    return PinnedDemo(tuple(measure_variants(nbytes, steps=steps)), pin_cost(pin_bytes))
