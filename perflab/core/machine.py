"""Lesson 00's readings of this machine, as typed results: the spec sheets, the matmul in every dtype,
copies by buffer size, host→device copies, and the machine in one table.

Each measured figure carries the machine's quietness (`perflab.core.quietness`) into its table's
"machine while measured" column, and a sentence drawn from a figure measured on a busy machine says
that it is inconclusive instead of concluding (`perflab.core.verdicts.busy_text`). Every table has
readable column names with units and numbers formatted by `perflab.core.readout`.

    >>> mm = matmul_by_dtype(1024, "cpu")      # a resumable sweep, one point per dtype
    >>> mm.table(); mm.fp32_percent            # the table, and the fp32 share of the peak (None: unknown)
    >>> cp = copy_by_size([1, 16, 256], "cpu")
    >>> cp.sentence(); summary(mm, cp).table()
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perflab.core.quietness import UNKNOWN, Quietness, as_quietness
from perflab.core.readout import MACHINE, machine, num, percent, plain, seconds

MIB = 2**20
NO_DATASHEET = "not on the datasheet"


def spec_table():
    """Every accelerator of perflab's hardware table (`perflab.core.hardware`, each figure with its
    datasheet): dense peaks, the bf16 peak as datasheets print it (with 2:4 sparsity, twice the dense
    one), memory, bandwidth, SMs and the bf16 ridge point. A figure no datasheet gives says so."""
    import pandas as pd

    from perflab.core.hardware import accelerators

    def fig(x: float | int | None, sig: int = 4) -> str:
        return NO_DATASHEET if x is None else plain(x, sig)

    rows = []
    for a in accelerators():
        bf16 = a.peak("bf16")
        rows.append({"accelerator": a.name, "fp32 (TFLOP/s)": fig(a.peak("fp32")), "tf32 (TFLOP/s)": fig(a.peak("tf32")),
                     "bf16 dense (TFLOP/s)": fig(bf16),
                     "bf16 as printed, sparse (TFLOP/s)": fig(2 * bf16 if bf16 else None),
                     "fp8 dense (TFLOP/s)": fig(a.peak("fp8")), "memory (GB)": fig(a.memory_gb),
                     "bandwidth (GB/s)": fig(a.memory_bandwidth_gbps), "SMs": fig(a.sm_count),
                     "ridge bf16 (FLOP/byte)": fig(a.ridge_point("bf16"), 3)})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- the matmul in every dtype

@dataclass(frozen=True)
class MatmulPoint:
    dtype: str
    n: int  # an n³ matmul
    median_s: float
    tflops: float
    peak_tflops: float | None  # spec sheet (GPU) or estimate (CPU); None: unknown
    rel_error: float  # against float64, checked before timing
    quietness: Quietness = UNKNOWN

    @property
    def peak_fraction(self) -> float | None:
        return self.tflops / self.peak_tflops if self.peak_tflops else None


@dataclass(frozen=True)
class DtypeMatmuls:
    """The n³ matmul in every dtype this device supports (`measure.sweep_matmul`: saved as measured)."""

    n: int
    points: tuple[MatmulPoint, ...]
    peak_label: str  # 'spec sheet' or 'estimate'
    note: str = ""  # how many points were measured now, read back, or failed, and where they are kept

    def point(self, dtype: str) -> MatmulPoint | None:
        return next((p for p in self.points if p.dtype == dtype), None)

    @property
    def fp32_percent(self) -> float | None:
        """The fp32 matmul's share of its peak in %, None when there is no peak to divide by."""
        p = self.point("fp32")
        return 100 * p.peak_fraction if p is not None and p.peak_fraction is not None else None

    @property
    def fp32_quietness(self) -> Quietness:
        p = self.point("fp32")
        return p.quietness if p is not None else UNKNOWN

    @property
    def no_peak(self) -> str:
        return "No fp32 peak is known for this device, so there is no percentage to compare your prediction with."

    def table(self):
        import pandas as pd

        return pd.DataFrame([{"dtype": p.dtype, "size": f"{p.n}³", "time per matmul": seconds(p.median_s),
                              "TFLOP/s": num(p.tflops), f"peak, {self.peak_label} (TFLOP/s)":
                                  num(p.peak_tflops) if p.peak_tflops else "unknown",
                              "share of peak (%)": num(100 * p.peak_fraction) if p.peak_fraction is not None else "–",
                              "error vs float64": num(p.rel_error, 2), MACHINE: machine(p.quietness)}
                             for p in self.points])

    def figures(self) -> dict[str, str]:
        """Label → rate with its unit, for a table beside published figures (`perflab.course.gpu_figures`);
        a rate measured on a busy machine says so."""
        return {f"{p.dtype} {p.n}³ matmul": f"{num(p.tflops)} TFLOP/s" + (" (machine busy: not this device's)"
                                                                         if p.quietness.disturbed else "")
                for p in self.points}


def matmul_by_dtype(n: int, device: Any, *, rep_ms: float = 200, name: str = "00_matmul_by_dtype") -> DtypeMatmuls:
    """Time the n³ matmul in every dtype `device` supports, each checked against float64 first, as a
    resumable sweep (`perflab.core.results`): a point already saved is read back with its quietness."""
    import torch

    from perflab.core.dtypes import supported_matmul_dtypes
    from perflab.core.measure import sweep_matmul

    dev = torch.device(device)
    res = sweep_matmul([{"m": n, "n": n, "k": n, "dtype": d} for d in supported_matmul_dtypes(dev)], dev, name=name,
                       rep_ms=rep_ms)
    points = tuple(MatmulPoint(r["params"]["dtype"], n, r["median_s"], r["tflops"], r.get("peak_tflops"),
                               r.get("rel_error", float("nan")), as_quietness(r.get("quietness")))
                   for r in res.rows if r.get("status") == "ok")
    return DtypeMatmuls(n, points, "spec sheet" if dev.type == "cuda" else "estimate",
                        res.summary() + (f"; {'; '.join(res.messages)}" if res.messages else ""))


# ---------------------------------------------------------------- copies by buffer size

@dataclass(frozen=True)
class CopyPoint:
    nbytes: int  # the buffer; a copy reads and writes it
    gbps: float  # bytes read + written per second, 1e9 bytes
    median_s: float
    quietness: Quietness = UNKNOWN


@dataclass(frozen=True)
class CopySweep:
    """Device-memory copies by buffer size, read against the last-level cache (`compare.copy_levels`)."""

    points: tuple[CopyPoint, ...]
    cache_bytes: int | None  # the last-level cache (None: unknown)
    spec_gbps: float | None = None  # the datasheet's memory bandwidth (a GPU in perflab's table)
    note: str = ""
    caches: tuple[tuple[str, int], ...] = ()  # the cache levels a figure marks: ('L3', bytes), ...

    @property
    def levels(self):
        from perflab.core.compare import copy_levels

        return copy_levels([p.nbytes for p in self.points], [p.gbps for p in self.points], self.cache_bytes,
                           [p.quietness for p in self.points])

    @property
    def largest(self) -> CopyPoint:
        return max(self.points, key=lambda p: p.nbytes)

    def sentence(self) -> str:
        return self.levels.sentence()

    def table(self):
        import pandas as pd

        def level(b: int) -> str:
            if self.cache_bytes is None:
                return "cache size unknown"
            return "fits in the last-level cache" if b <= self.cache_bytes else "past the last-level cache"

        return pd.DataFrame([{"buffer (MiB)": plain(p.nbytes / MIB), "copy bandwidth (GB/s, read + write)": num(p.gbps),
                              "time per copy": seconds(p.median_s), "where it fits": level(p.nbytes),
                              MACHINE: machine(p.quietness)} for p in sorted(self.points, key=lambda p: p.nbytes)])


def copy_by_size(mib: Sequence[int], device: Any, *, rep_ms: float = 100, name: str = "00_copy_by_size") -> CopySweep:
    """Copy a buffer of each size in `mib` (MiB) on `device`, as a resumable sweep (`measure.sweep_copy`),
    read against the device's caches (its L2 on a GPU; a CPU's per-core L2 and its L3)."""
    import torch

    from perflab.core.compare import last_level_cache
    from perflab.core.device import describe
    from perflab.core.measure import sweep_copy

    dev = torch.device(device)
    details = describe(dev).details
    gpu = dev.type == "cuda"
    marks = {"L2": details.get("l2_cache_bytes")} if gpu else {
        "L2 (per core)": details.get("l2_cache_per_core_bytes"), "L3": details.get("l3_cache_bytes")}
    res = sweep_copy([m * MIB for m in mib], dev, name=name, rep_ms=rep_ms)
    points = tuple(CopyPoint(int(r["params"]["nbytes"]), r["gbps"], r["median_s"], as_quietness(r.get("quietness")))
                   for r in res.rows if r.get("status") == "ok")
    spec = next((r.get("spec_gbps") for r in res.rows if r.get("spec_gbps")), None)
    return CopySweep(points, last_level_cache(details, gpu), spec, res.summary(),
                     tuple((k, int(v)) for k, v in marks.items() if v))


# ---------------------------------------------------------------- host → device (a GPU's)

@dataclass(frozen=True)
class HostToDevice:
    """Pinned and pageable host→device copies on a GPU; on any other device, why there is nothing to copy."""

    results: tuple[Any, ...]  # `measure.BandwidthResult`s: pinned, then pageable
    note: str = ""

    def table(self):
        import pandas as pd

        return pd.DataFrame([{"host memory": r.what, "buffer (MiB)": plain(r.nbytes / MIB),
                              "bandwidth (GB/s)": num(r.gbps), "time per copy": seconds(r.median_s),
                              MACHINE: machine(r.quietness)} for r in self.results])

    def __repr__(self) -> str:
        return self.note if not self.results else self.table().to_string(index=False)

    def _repr_html_(self) -> str:
        import html

        return f"<p>{html.escape(self.note)}</p>" if not self.results else self.table().to_html(index=False)


def host_to_device(mib: int, device: Any, *, rep_ms: float = 100) -> HostToDevice:
    """Time a host→device copy of `mib` MiB from pinned and from pageable host memory (a CUDA GPU only)."""
    import torch

    from perflab.core.measure import measure_host_to_device

    dev = torch.device(device)
    if dev.type != "cuda":
        return HostToDevice((), "No GPU here: a CPU has no separate device memory, so there is no host→device copy "
                                "to measure.")
    return HostToDevice(tuple(measure_host_to_device(mib * MIB, pinned=p, device=dev, rep_ms=rep_ms)
                              for p in (True, False)))


# ---------------------------------------------------------------- the machine in one table

@dataclass(frozen=True)
class SummaryRow:
    quantity: str
    measured: float
    unit: str
    peak: float | None  # the datasheet's (or the estimate's) figure for it; None: none
    quietness: Quietness = UNKNOWN


@dataclass(frozen=True)
class MachineSummary:
    """Lesson 00's baseline: every matmul rate and the two copy levels, each beside its peak."""

    rows: tuple[SummaryRow, ...]

    def table(self):
        import pandas as pd

        return pd.DataFrame([{"quantity": r.quantity, "measured": f"{num(r.measured)} {r.unit}",
                              "peak": f"{num(r.peak)} {r.unit}" if r.peak else "none known",
                              "share of peak": percent(r.measured / r.peak) if r.peak else "–",
                              MACHINE: machine(r.quietness)} for r in self.rows])


def summary(matmuls: DtypeMatmuls, copies: CopySweep) -> MachineSummary:
    lv = copies.levels
    by_bytes: Mapping[int, CopyPoint] = {p.nbytes: p for p in copies.points}
    rows = [SummaryRow(f"matmul {p.dtype} {p.n}³", p.tflops, "TFLOP/s", p.peak_tflops, p.quietness)
            for p in matmuls.points]
    for r, nbytes in zip(lv.rows(), (lv.best_bytes, lv.largest_bytes), strict=True):
        rows.append(SummaryRow(r["quantity"], r["measured"], "GB/s", copies.spec_gbps,
                               by_bytes[nbytes].quietness if nbytes in by_bytes else UNKNOWN))
    return MachineSummary(tuple(rows))


# ---------------------------------------------------------------- the panel's matmul

def square_matmul(n: int, dtype: str, *, device: Any, rep_ms: float = 50, warmup_ms: float = 10, min_reps: int = 3):
    """One n³ matmul measured here (checked against float64 first): what lesson 00's panel shows for a
    size and a dtype (`perflab.core.measure.MatmulResult`, a readout with the machine's quietness)."""
    from perflab.core.measure import measure_matmul

    return measure_matmul(n, n, n, dtype, device, rep_ms=rep_ms, warmup_ms=warmup_ms, min_reps=min_reps)
