"""Spec-sheet facts about accelerators, and an estimate of a CPU's peak.

The table lives in `perflab/core/data/accelerators.json`, one record per accelerator, with the source
of every number. Look-up goes by the name torch reports:

    >>> lookup("NVIDIA H100 80GB HBM3").id
    'h100-sxm'
    >>> lookup("NVIDIA A10G") is None        # a different chip: never another chip's peak
    True

`spec_peak(accelerator, dtype)` is the one look-up of a dense spec peak: every peak perflab divides
by (`AcceleratorSpec.peak`, `peaks_for`, `perflab.flops.mfu.resolve_peak`, a planned cluster's,
a lesson's model GPU, the overlap ratios') comes through it, as TFLOP/s with its source.

`peaks_for(device_info)` gives the peak TFLOP/s per dtype for the current device: the table's
figures for a known accelerator, `None` ("peak unknown") for an unknown one, and for a CPU an
estimate from cores × clock × FLOPs per cycle, labelled as such with its inputs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from perflab.core.dtypes import MATMUL_DTYPES
from perflab.core.jsonable import package_json

if TYPE_CHECKING:  # pragma: no cover
    from perflab.core.device import CPUFacts, DeviceInfo

DTYPE_KEYS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class AcceleratorSpec:
    id: str
    name: str
    peak_tflops: dict[str, float | None]  # dense; None: the chip has no such mode
    memory_gb: float | None
    memory_bandwidth_gbps: float | None
    sm_count: int | None
    l2_mb: float | None
    sources: dict[str, str]
    notes: str = ""
    match: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()

    def peak(self, dtype) -> float | None:
        """Dense peak TFLOP/s for `dtype` (a DType or its name), None when no datasheet gives it
        (`spec_peak`)."""
        return spec_peak(self, dtype).tflops

    def ridge_point(self, dtype: str) -> float | None:
        """FLOPs per byte above which a kernel is compute-bound on this chip (roofline ridge)."""
        p = self.peak(dtype)
        if p is None or not self.memory_bandwidth_gbps:
            return None
        return p * 1e12 / (self.memory_bandwidth_gbps * 1e9)


def normalize_name(name: str) -> str:
    """Lower case, '-', '_' and '/' as spaces, runs of spaces collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"[-_/]", " ", name.lower())).strip()


@lru_cache(maxsize=1)
def accelerators() -> tuple[AcceleratorSpec, ...]:
    """Every record of the table."""
    raw = package_json("perflab.core", "accelerators.json")
    out = []
    for r in raw["accelerators"]:
        out.append(AcceleratorSpec(
            id=r["id"], name=r["name"], peak_tflops=dict(r["peak_tflops"]), memory_gb=r["memory_gb"],
            memory_bandwidth_gbps=r["memory_bandwidth_gbps"], sm_count=r["sm_count"], l2_mb=r["l2_mb"],
            sources=dict(r["sources"]), notes=r.get("notes", ""), match=tuple(r["match"]),
            exclude=tuple(r.get("exclude", ())), examples=tuple(r.get("examples", ())),
        ))
    return tuple(out)


def by_id(spec_id: str) -> AcceleratorSpec:
    """The record with this id (e.g. 'a100-sxm-80gb'); KeyError lists the ids."""
    for a in accelerators():
        if a.id == spec_id:
            return a
    raise KeyError(f"no accelerator {spec_id!r}; known: {', '.join(a.id for a in accelerators())}")


def lookup(name: str) -> AcceleratorSpec | None:
    """The record for the device torch calls `name`, or None when it is unknown or ambiguous.

    Also accepts a record id ('h100-sxm'). Every `match` regex must hit the normalized name and no
    `exclude` regex may; when two records qualify the name is ambiguous and None is returned, so
    a chip never gets another chip's numbers.
    """
    if not name:
        return None
    for a in accelerators():
        if a.id == name.strip().lower():
            return a
    norm = normalize_name(name)
    hits = [a for a in accelerators()
            if all(re.search(p, norm) for p in a.match) and not any(re.search(p, norm) for p in a.exclude)]
    return hits[0] if len(hits) == 1 else None


# ---------------------------------------------------------------- the one peak look-up

@dataclass(frozen=True)
class SpecPeak:
    """One dense spec-sheet peak: TFLOP/s for one dtype of one accelerator, and where it came from."""

    tflops: float | None  # dense TFLOP/s; None: the accelerator is unknown, or has no such mode
    dtype: str
    source: str  # '<name> <dtype> dense (<datasheet>)', or why there is no figure
    spec: AcceleratorSpec | None = None  # None: not in the table

    @property
    def known(self) -> bool:
        return self.tflops is not None


def spec_peak(accelerator: AcceleratorSpec | str | None, dtype) -> SpecPeak:
    """The dense spec peak of `accelerator` for `dtype` (a DType or its name): the one look-up of a peak
    in perflab's table.

    `accelerator` is a record of the table, its id ('h100-sxm') or the name torch reports. An
    accelerator the table does not know (`lookup`), or a dtype it gives no dense figure for, gives
    `tflops` None and a `source` that says which: never another chip's peak."""
    d = str(dtype)
    spec = accelerator if isinstance(accelerator, AcceleratorSpec) else lookup(accelerator or "")
    if spec is None:
        return SpecPeak(None, d, f"{accelerator!r} is not in perflab's table: peak unknown")
    v = spec.peak_tflops.get(d)
    if v is None:
        return SpecPeak(None, d, f"no dense {d} figure for {spec.name} in the spec table", spec)
    return SpecPeak(v, d, f"{spec.name} {d} dense ({spec.sources.get('peak_tflops', 'datasheet')})", spec)


# ---------------------------------------------------------------- CPU estimate

@dataclass(frozen=True)
class CPUPeakEstimate:
    """fp32 (and where the ISA has it, bf16/fp16) peak of a CPU: cores × GHz × FLOPs/cycle/core."""

    cores: int
    clock_ghz: float
    clock_source: str
    flops_per_cycle: dict[str, int]  # per core, per dtype
    basis: str  # which vector unit the FLOPs/cycle assume
    label: str = "estimate"

    def tflops(self, dtype: str) -> float | None:
        f = self.flops_per_cycle.get(dtype)
        return None if f is None else self.cores * self.clock_ghz * 1e9 * f / 1e12

    def explain(self, dtype: str = "fp32") -> str:
        t = self.tflops(dtype)
        if t is None:
            return f"{dtype}: no estimate (no native {dtype} vector unit found)"
        return (f"{dtype} peak (estimate) = {self.cores} cores × {self.clock_ghz:.2f} GHz × "
                f"{self.flops_per_cycle[dtype]} FLOP/cycle = {t * 1e3:.1f} GFLOP/s  [{self.basis}; clock: {self.clock_source}]")


def cpu_flops_per_cycle(facts: CPUFacts) -> tuple[dict[str, int], str]:
    """FLOPs per cycle per core by dtype, and the assumption behind it.

    fp32 lanes × 2 (an FMA is a multiply and an add) × FMA units. The number of FMA units is not
    readable from the OS; the rules below follow the vendors' optimization manuals:
    Intel AVX-512 server cores (Skylake-SP Gold 6xxx/Platinum and later) have two 512-bit FMA
    units; AMD Zen 4 runs AVX-512 on 256-bit datapaths (two FMA pipes); Zen 5 has full 512-bit
    pipes; AVX2 cores since Haswell and Zen 2 have two 256-bit FMA units; Zen 1 two 128-bit.
    Intel AMX-BF16 does 1024 bf16 FLOPs per cycle per core; AVX512-BF16 and AVX512-FP16 double
    the fp32 rate for their dtype.
    """
    f = facts.flags
    vendor = (facts.vendor or "").lower()
    fam = facts.family or 0
    per: dict[str, int] = {}
    if facts.arch in {"x86_64", "AMD64", "i686"}:
        if "avx512f" in f:
            if "amd" in vendor and fam < 0x1A:
                fp32, basis = 32, "AVX-512 on AMD Zen 4: two 256-bit FMA pipes (512-bit ops double-pumped)"
            else:
                fp32, basis = 64, "AVX-512 with two 512-bit FMA units (Xeon Gold/Platinum, Zen 5; one-unit parts reach half)"
        elif "avx2" in f and "fma" in f:
            if "amd" in vendor and fam == 0x17 and (facts.cpu_model or 0) < 0x30:
                fp32, basis = 16, "AVX2 on AMD Zen 1: two 128-bit FMA pipes"
            else:
                fp32, basis = 32, "AVX2 with two 256-bit FMA units"
        elif "avx" in f:
            fp32, basis = 16, "AVX without FMA: one 256-bit add and one 256-bit multiply per cycle"
        else:
            fp32, basis = 8, "SSE: one 128-bit add and one 128-bit multiply per cycle"
        per["fp32"] = fp32
        per["fp64"] = fp32 // 2
        if "amx_bf16" in f:
            per["bf16"], basis = 1024, basis + "; bf16 on AMX tiles (1024 FLOP/cycle)"
        elif "avx512_bf16" in f:
            per["bf16"] = 2 * fp32
        if "amx_fp16" in f:
            per["fp16"] = 1024
        elif "avx512_fp16" in f:
            per["fp16"] = 2 * fp32
    elif facts.arch in {"aarch64", "arm64"}:
        per["fp32"], basis = 16, "Arm NEON: two 128-bit FMA pipes (wider cores such as Apple M or Neoverse V reach 2×)"
        per["fp64"] = 8
        if "bf16" in f:
            per["bf16"] = 32
    else:
        return {}, f"no vector-unit rule for architecture {facts.arch!r}"
    return per, basis


def cpu_peak_estimate(facts: CPUFacts | None = None, threads: int | None = None) -> CPUPeakEstimate | None:
    """Estimate this CPU's peak for the cores torch uses (min of usable cores and torch threads)."""
    from perflab.core.device import cpu_facts

    facts = facts or cpu_facts()
    if not facts.clock_mhz:
        return None
    per, basis = cpu_flops_per_cycle(facts)
    if not per:
        return None
    if threads is None:
        try:
            import torch

            threads = torch.get_num_threads()
        except ImportError:  # pragma: no cover
            threads = facts.usable_cores
    cores = max(1, min(facts.usable_cores, threads))
    return CPUPeakEstimate(cores=cores, clock_ghz=facts.clock_mhz / 1000, clock_source=facts.clock_source,
                           flops_per_cycle=per, basis=basis)


# ---------------------------------------------------------------- the device's peaks

@dataclass
class Peaks:
    """Peak TFLOP/s per dtype for one device, with where each number came from."""

    device_name: str
    tflops: dict[str, float | None]
    source: str  # 'spec sheet', 'estimate' or 'unknown'
    spec: AcceleratorSpec | None = None
    cpu_estimate: CPUPeakEstimate | None = None
    notes: list[str] = field(default_factory=list)

    def get(self, dtype) -> float | None:
        return self.tflops.get(str(dtype))

    def describe(self, dtype: str) -> str:
        v = self.get(dtype)
        if self.cpu_estimate is not None:
            return self.cpu_estimate.explain(dtype)
        if self.spec is None:
            return f"{dtype}: peak unknown" if v is None else f"{dtype}: {v:g} TFLOP/s dense ({self.source})"
        if v is None:
            return f"{dtype}: no dense {dtype} figure for {self.spec.name} in the spec table (no such mode, or none published)"
        return f"{dtype}: {v:g} TFLOP/s dense ({self.spec.name}; {self.spec.sources['peak_tflops']})"

    def as_dict(self) -> dict[str, float | None]:
        """Peak TFLOP/s per matmul dtype (None: unknown), what `perflab env --json` prints."""
        return {k: self.tflops.get(k) for k in MATMUL_DTYPES}


def peaks_for(info: DeviceInfo) -> Peaks:
    """The peaks of the device `info` describes: spec sheet, CPU estimate, or unknown."""
    if info.kind == "cpu":
        est = cpu_peak_estimate()
        t = {d: (est.tflops(d) if est else None) for d in DTYPE_KEYS}
        return Peaks(info.name, t, "estimate" if est else "unknown", cpu_estimate=est,
                     notes=[] if est else ["could not read this CPU's clock or vector unit: peak unknown"])
    spec = lookup(info.name)
    if spec is None:
        return Peaks(info.name, {d: None for d in DTYPE_KEYS}, "unknown",
                     notes=[f"{info.name!r} is not in perflab's table: peak unknown; use the measured ceiling"])
    return Peaks(info.name, {d: spec_peak(spec, d).tflops for d in spec.peak_tflops}, "spec sheet", spec=spec)


# ---------------------------------------------------------------- rules for a measured ceiling

def ceiling_problem(tflops: float, dtype: str, peaks: Peaks) -> str | None:
    """Why a measured matmul ceiling of `tflops` for `dtype` cannot be stored as this device's
    ceiling, or None when it is plausible.

    A ceiling is what the device was seen to do, so it cannot exceed the device's peak: a measured
    figure above the spec-sheet peak, or above the CPU's estimated peak (cores × clock × FLOPs per
    cycle), is a measurement to question (a timer that missed work, a clock above the one read, a
    wrong FLOP count) and is not stored. Without a peak for `dtype` nothing can be checked: None."""
    peak = peaks.get(dtype)
    if peak is None or not tflops > peak:
        return None
    what = "spec-sheet peak" if peaks.source == "spec sheet" else "estimated peak"
    return (f"the measured {dtype} ceiling {tflops * 1e3:.4g} GFLOP/s is {tflops / peak:.0%} of the {what} "
            f"({peak * 1e3:.4g} GFLOP/s): a ceiling cannot exceed the peak, so the measurement is questioned, not "
            "stored").replace("%", " %", 1)
