"""What an MFU is divided by: the one basis lesson 02, `perflab audit` and the ladder share.

    >>> b = mfu_basis(device, "bf16")      # the spec peak where perflab's table has one, else the ceiling
    >>> b.label()                          # 'bf16 spec peak 989.4 TFLOP/s (...)' or the ceiling with its date
    >>> utilization(step_s, flops_by_dtype, bases_for(device, flops_by_dtype))   # perflab.flops.mfu

The rule, per dtype that ran:

1. the spec-sheet peak for that dtype, where perflab's hardware table has one (a GPU it knows);
2. otherwise the ceiling stored for that dtype on this device: the fastest call of a matmul at one
   fixed shape (`ceiling_shape`: the same for every caller), kept in perflab's one ceiling store
   (`perflab.core.ceiling`, kind `basis`) per dtype, shape and torch version. The first stored
   version stays the basis: a later lesson's run does not replace it;
3. with none stored (or `remeasure=True`) it is measured now, again while the machine is busy (up to
   `CEILING_ATTEMPTS` times), and offered to the store, which keeps it only under its one rule
   (`perflab.core.ceiling.admit`: not above the peak, measured on a quiet machine, never in place of a
   quieter version). A ceiling not stored is used for this run only, and its label says why.

An estimated CPU peak is never the basis: it assumes every core's vector units busy at the nominal
clock, which no training step reaches. A MAMF search's best (`perflab.gemm.mamf`) is never the
basis either (`perflab.core.ceiling` says why); `matmul_ceiling` hands it to lesson 13.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perflab.core.dtypes import DType
from perflab.core.jsonable import JSON, to_json
from perflab.core.quietness import Quietness

if TYPE_CHECKING:  # pragma: no cover
    from perflab.core.ceiling import CeilingRecord
    from perflab.core.hardware import Peaks

CEILING_SHAPE_CPU = (1024, 4096, 128)  # the course's CPU model's largest GEMM (its logits: tokens × vocab × hidden)
CEILING_SHAPE_GPU = (8192, 8192, 8192)
CEILING_ATTEMPTS = 3  # measurements of a ceiling while the machine stays busy, before it is used unstored


def ceiling_shape(device) -> tuple[int, int, int]:
    """The one (m, n, k) a device's MFU ceiling is measured at, whoever asks (audit, ladder, lessons),
    so that every MFU on one machine divides by the same figure for the same dtype."""
    kind = getattr(device, "type", None) or str(device or "cpu").split(":")[0]
    return CEILING_SHAPE_GPU if kind == "cuda" else CEILING_SHAPE_CPU


@dataclass(frozen=True)
class Basis:
    """What an MFU is divided by, named: the spec peak of the dtype that ran, or a ceiling measured
    for that dtype (with its figure, shape, statistic, date, version and the machine's quietness)."""

    JSON_EXTRA = ("label",)

    tflops: float | None
    kind: str  # 'spec peak', 'given peak', 'estimated peak', 'measured ceiling' or 'unknown'
    dtype: str
    what: str  # the spec sheet, or the matmul that was timed
    when: str | None = None  # date of the measurement
    shape: tuple[int, int, int] | None = None  # (m, n, k) of the timed matmul
    version: int | None = None  # 1 for the first ceiling stored for this dtype and shape, 2 after a re-measure
    questioned: str | None = None  # why the measured value was not stored (above the peak, a busy machine)
    replaced: str | None = None  # the earlier version's figure and date, when this is version 2+
    statistic: str | None = None  # 'fastest call' for a measured ceiling
    quietness: Quietness | None = None  # the machine's quietness while it was measured

    @property
    def stored(self) -> bool:
        return self.kind == "spec peak" or self.version is not None

    def label(self) -> str:
        """The basis in words, with its figure and date, for every output that shows an MFU."""
        if self.tflops is None:
            return f"no {self.dtype} peak or ceiling: MFU unknown"
        if self.kind == "estimated peak":
            return f"{self.dtype} estimated peak {self.tflops:.4g} TFLOP/s ({self.what})"
        if self.kind == "given peak":
            return f"{self.dtype} peak {self.tflops:.4g} TFLOP/s (given)"
        if self.kind == "spec peak":
            return f"{self.dtype} spec peak {self.tflops:.4g} TFLOP/s ({self.what})"
        m, n, k = self.shape or (0, 0, 0)
        s = (f"{self.dtype} ceiling {self.tflops * 1e3:.4g} GFLOP/s measured here ({m}×{n}×{k} matmul, "
             f"{self.statistic or 'fastest call'}; {self.when}")
        s += f"; version {self.version}" + (f", replacing {self.replaced}" if self.replaced else "") if self.version \
            else ""
        s += ")"
        if self.questioned:
            s += f"; not stored: {self.questioned}"
        return s

    def as_dict(self) -> JSON:
        """The basis as JSON (its fields and its label), for a command's or a ladder's output."""
        return to_json(self)


def spec_basis(peak_tflops: float | None, dtype: str, what: str, kind: str = "spec peak") -> Basis:
    """A peak as a basis: the spec sheet's (`kind` 'spec peak'), a CPU's estimate ('estimated peak') or
    one a person gave ('given peak')."""
    return Basis(peak_tflops, kind, dtype, what)


def _basis_of(rec: CeilingRecord, prev: CeilingRecord | None, questioned: str | None = None) -> Basis:
    """A stored ceiling as a basis; `prev` the version it replaced."""
    return Basis(rec.tflops, "measured ceiling", rec.dtype, rec.what, rec.date, rec.shape, rec.version, questioned,
                 f"version {prev.version} ({prev.tflops * 1e3:.4g} GFLOP/s, {prev.date})" if prev else None,
                 rec.statistic or "fastest call", rec.quietness)


def mfu_basis(device, dtype: str, shape: tuple[int, int, int] | None = None, *, remeasure: bool = False,
              watch=None, peaks: Peaks | None = None) -> Basis:
    """The basis an MFU of a step that ran in `dtype` is computed against, on `device` (the rule in
    the module docstring).

    `watch(device)` is the context manager whose `.result` is the measurement's quietness (default
    `perflab.core.quietness.watch`); `peaks` the device's peaks (default
    `perflab.core.hardware.peaks_for`). Tests inject both."""
    import torch

    from perflab.core.device import describe
    from perflab.core.hardware import peaks_for

    dev = torch.device(device) if device is not None else None
    info = describe(dev)
    peaks = peaks if peaks is not None else peaks_for(info)
    if peaks.source == "spec sheet" and peaks.get(dtype):
        spec = peaks.spec
        src = spec.sources.get("peak_tflops", spec.name) if spec is not None else info.name
        return spec_basis(float(peaks.get(dtype) or 0), dtype, f"{info.name}; {src}")
    return measured_basis(device, dtype, shape, remeasure=remeasure, watch=watch, peaks=peaks)


def measured_basis(device, dtype: str, shape: tuple[int, int, int] | None = None, *, remeasure: bool = False,
                   watch=None, peaks: Peaks | None = None) -> Basis:
    """Rules 2 and 3 of `mfu_basis` on any device (a GPU with a spec sheet too): the measured ceiling
    for `dtype`, stored only under `perflab.core.ceiling.admit`. Lesson 02 shows it beside the spec
    peak."""
    import time

    import torch

    from perflab.core import ceiling
    from perflab.core import measure as M
    from perflab.core.device import describe
    from perflab.core.hardware import peaks_for
    from perflab.core.quietness import of_bench
    from perflab.core.quietness import watch as watching

    dev = torch.device(device) if device is not None else None
    info = describe(dev)
    peaks = peaks if peaks is not None else peaks_for(info)
    shp: tuple[int, int, int] = (int(shape[0]), int(shape[1]), int(shape[2])) if shape is not None \
        else ceiling_shape(dev)
    path = ceiling.store_path(info.slug)
    slot = ceiling.read(path).slot(ceiling.slot_key("basis", dtype, shp, torch.__version__))
    if slot.current is not None and not remeasure:
        return _basis_of(slot.current, slot.previous)
    m, n, k = shp
    on_gpu = dev is not None and dev.type == "cuda"
    for _ in range(CEILING_ATTEMPTS):  # a disturbed measurement is taken again, within this budget
        with (watch or watching)(dev if dev is not None else "cpu") as w:
            r = M.measure_matmul(m, n, k, "fp32" if dtype == "tf32" and not on_gpu else dtype, dev,
                                 warmup_ms=50 if on_gpu else 25, rep_ms=300 if on_gpu else 150, check=False,
                                 min_reps=3)
        q = of_bench(getattr(r, "bench", None), w)
        if not q.disturbed:
            break
    # a ceiling is what the device can do: the fastest of the timed calls
    tflops = 2 * m * n * k / r.min_s / 1e12
    what = f"fastest of {r.n_reps} timed {m}×{n}×{k} {dtype} matmuls"
    date = time.strftime("%Y-%m-%d %H:%M")
    kept = ceiling.offer(ceiling.CeilingRecord(tflops, dtype, shp, "fastest call", what, date, q, torch.__version__,
                                               info.name, kind="basis"), peaks, path)
    if kept.stored:
        return _basis_of(kept, slot.current)
    if slot.current is not None:  # a re-measure: the stored ceiling stays the basis; the new figure is named
        return _basis_of(slot.current, slot.previous,
                         f"a re-measure gave {tflops * 1e3:.4g} GFLOP/s ({date}): {kept.questioned}")
    return Basis(tflops, "measured ceiling", dtype, what, date, shp, None, kept.questioned, None, "fastest call", q)


def bases_for(device, dtypes: Iterable[str], shape: tuple[int, int, int] | None = None, *, remeasure: bool = False,
              watch=None, peaks: Peaks | None = None) -> dict[str, Basis]:
    """One basis per dtype that ran (`mfu_basis`), the denominators of `perflab.flops.mfu.utilization`."""
    return {d: mfu_basis(device, d, shape, remeasure=remeasure, watch=watch, peaks=peaks) for d in dict.fromkeys(dtypes)}


# ---------------------------------------------------------------- lesson 13's ceiling


@dataclass
class Ceiling:
    tflops: float
    label: str
    source: str  # 'mamf' or 'matmul'
    size: int | None = None


_CEILINGS: dict[tuple[str, str, int], Ceiling] = {}


def matmul_ceiling(device=None, dtype: DType | str = "fp32", size: int | None = None, *,
                   searched: Callable[..., float | None] | None = None,
                   cache: dict[tuple[str, str, int], Ceiling] | None = None) -> Ceiling:
    """The device's measured matmul ceiling in TFLOP/s for `dtype`, to compare a kernel with.

    The best of a maximum-achievable-matmul search stored for this device (`searched(device, dtype)`,
    default `perflab.gemm.mamf.measured_ceiling`) when there is one; otherwise one large square matmul
    timed here (8192³ on a GPU, 2048³ on a CPU unless `size` says otherwise), remembered in `cache`
    (default: this process's) and never stored: it is not an MFU basis."""
    import torch

    from perflab.core.device import pick_device
    from perflab.core.dtypes import parse_dtype

    dev = torch.device(device) if device is not None else pick_device()
    dt = parse_dtype(dtype)  # a DType passes through as it is; a name from a notebook is parsed here
    if searched is None:
        from perflab.gemm import mamf

        searched = mamf.measured_ceiling
    v = searched(dev, dt.name)
    if v:
        return Ceiling(float(v), "measured ceiling (maximum achievable matmul FLOPs search)", "mamf")
    cache = _CEILINGS if cache is None else cache
    n = size or (8192 if dev.type == "cuda" else 2048)
    key = (str(dev), dt.name, n)
    if key not in cache:
        from perflab.core.measure import measure_matmul

        r = measure_matmul(n, n, n, dt.name, dev, warmup_ms=50 if dev.type == "cuda" else 25,
                           rep_ms=300 if dev.type == "cuda" else (200 if n >= 1024 else 50))
        cache[key] = Ceiling(r.tflops, f"measured matmul ceiling (largest square matmul measured here: {n}³ {dt})",
                             "matmul", n)
    return cache[key]
