"""GEMM shapes (lessons 04 and 05): the names the lessons call, in one place.

The ideas live in their own modules, and every name is re-exported here:

* `perflab.gemm.waves`: tile and wave quantization, the predicted time and its staircase;
* `perflab.gemm.alignment`: Tensor Core alignment per dtype and architecture;
* `perflab.gemm.sizing`: the model-sizing checklist;
* `perflab.gemm.tilefit`: which tile explains a measured staircase.

Here: where a GEMM sits on a chip's roofline (`roofline_bound`), a sweep along one dimension
(`sweep_dimension`, which measures: perflab.core.measure is imported lazily), the SM count and the GPU
a lesson's model describes (`model_target`), and one GEMM through every model (`explain_gemm`).
Peaks come from `perflab.core.hardware.spec_peak`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, fields_json
from perflab.core.validate import positive_int
from perflab.gemm.alignment import (
    ALIGNMENT_SOURCE,
    ARCHS,
    AlignmentCheck,
    AlignmentRule,
    alignment_table,
    arch_of,
    check_alignment,
    nearest_multiples,
    tensor_core_alignment,
)
from perflab.gemm.sizing import (
    CHECKLIST_SOURCE,
    VOCAB_SOURCE,
    CheckItem,
    Checklists,
    checklist_frame,
    checklist_text,
    checklists,
    largest_pow2_divisor,
    pad_to_multiple,
    sizing_checklist,
    vocab_item,
    vocab_rule,
)
from perflab.gemm.tilefit import TileFit, fit_tile, fitted_staircase
from perflab.gemm.waves import (
    CPU_BLOCKS,
    DIMS,
    TILE_SHAPES,
    CliffPrediction,
    GuideExample,
    WavePrediction,
    ceil_div,
    cliffs,
    full_wave_sizes,
    parse_tile,
    predict_cliffs,
    predicted_tflops,
    predicted_time_s,
    shape_along,
    staircase,
    tile_count,
    wave_count,
    wave_model,
)
from perflab.gemm.waves import shape_along as _shape  # the name gemm.plots calls

__all__ = [
    "ALIGNMENT_SOURCE", "ARCHS", "CHECKLIST_SOURCE", "CPU_BLOCKS", "DEFAULT_GPU", "DIMS", "THIS_GPU", "TILE_SHAPES",
    "VOCAB_SOURCE", "AlignmentCheck", "AlignmentRule", "CheckItem", "Checklists", "CliffPrediction", "GuideExample",
    "ModelTarget", "RooflineBound", "TileFit", "WavePrediction", "alignment_table", "arch_of", "ceil_div",
    "check_alignment", "checklist_frame", "checklist_text", "checklists", "cliffs", "explain_gemm", "explain_what_if",
    "fine_values", "fit_sweep", "fit_tile", "fitted_staircase", "full_wave_sizes", "gpu_choices",
    "largest_pow2_divisor", "model_target", "nearest_multiples", "pad_to_multiple", "parse_tile", "predict_cliffs",
    "predicted_tflops", "predicted_time_s", "roofline_bound", "shape_along", "sizing_checklist", "sm_count_of",
    "staircase", "sweep_dimension", "sweep_dtype", "sweep_points", "sweep_quietness", "tensor_core_alignment",
    "tile_count", "vocab_item", "vocab_rule", "wave_count", "wave_model",
]


# ---------------------------------------------------------------- roofline per dtype

@dataclass(frozen=True)
class RooflineBound:
    """Where a GEMM sits on one chip's roofline for one dtype (`roofline_bound`)."""

    dtype: str
    itemsize: int
    arithmetic_intensity: float  # FLOPs per byte
    peak_tflops: float | None  # the chip's dense peak for the dtype (None: no such mode)
    bandwidth_gbps: float | None
    ridge: float | None = None  # FLOPs per byte where the roof bends
    bound: str | None = None  # 'memory-bound' or 'compute-bound'
    attainable_tflops: float | None = None  # min(peak, intensity × bandwidth)

    def to_json(self) -> JSON:
        """Every field, for `perflab waves --json`."""
        return fields_json(self)


def roofline_bound(m: int, n: int, k: int, dtype: str, spec) -> RooflineBound:
    """Where a GEMM sits on chip `spec`'s roofline for `dtype`.

    intensity = 2mnk / ((mk + kn + mn) · itemsize) FLOPs per byte; ridge = peak / bandwidth;
    attainable = min(peak, intensity × bandwidth). `spec` is a perflab.core.hardware.AcceleratorSpec
    (its peak through `perflab.core.hardware.spec_peak`).
    """
    from perflab.core.dtypes import parse_dtype
    from perflab.core.hardware import spec_peak
    from perflab.core.roofline import matmul_intensity

    dt = parse_dtype(dtype)
    itemsize = dt.itemsize if dt.name != "tf32" else 4
    ai = matmul_intensity(m, n, k, itemsize)
    peak = spec_peak(spec, dt.name).tflops if spec is not None else None
    bw = spec.memory_bandwidth_gbps if spec is not None else None
    if not (peak and bw):
        return RooflineBound(dt.name, itemsize, ai, peak, bw)
    ridge = peak * 1e12 / (bw * 1e9)
    return RooflineBound(dt.name, itemsize, ai, peak, bw, ridge, "memory-bound" if ai < ridge else "compute-bound",
                         min(peak, ai * bw * 1e9 / 1e12))


# ---------------------------------------------------------------- measuring along one dimension

def sweep_points(dim: str, values: Iterable[int], fixed: dict[str, int], dtype: str) -> list[dict[str, Any]]:
    """The {m, n, k, dtype} points of a sweep over one dimension."""
    pts = []
    for v in values:
        m, n, k = _shape(dim, positive_int(dim, v), fixed)
        pts.append({"m": m, "n": n, "k": k, "dtype": dtype})
    return pts


def sweep_dimension(dim: str, values: Iterable[int], fixed: dict[str, int], dtype: str = "bf16", device=None, *,
                    name: str | None = None, rep_ms: float = 50, warmup_ms: float = 10, progress: bool = True):
    """Measure the GEMM at every value of `dim` (others fixed) on `device`, as a resumable sweep.

    Returns perflab.core.results.SweepResult; each row has median_s, tflops, peak_fraction, intensity.
    """
    from perflab.core.measure import sweep_matmul

    pts = sweep_points(dim, values, fixed, dtype)
    label = name or f"gemm_{dim}_sweep"
    return sweep_matmul(pts, device, name=label, rep_ms=rep_ms, warmup_ms=warmup_ms, progress=progress)


def fine_values(start: int, stop: int, step: int, name: str = "range") -> list[int]:
    """start, start+step, ... up to and including stop; sizes below 1 are skipped. `name` labels
    the one-line error (e.g. '--m-range')."""
    try:
        start, stop, step = int(start), int(stop), int(step)
    except (TypeError, ValueError):
        raise InputError(f"{name} needs three whole numbers: START STOP STEP") from None
    if step < 1:
        raise InputError(f"{name} step must be ≥ 1 (got {step})")
    if stop < start:
        raise InputError(f"{name} {start} {stop} {step} is empty: STOP must be ≥ START")
    vals = [v for v in range(start, stop + 1, step) if v >= 1]
    if not vals:
        raise InputError(f"{name} {start} {stop} {step} holds no size ≥ 1: raise STOP")
    return vals


def sweep_dtype(device) -> str:
    """The dtype lesson 04 measures GEMMs in: bf16 on a CUDA GPU (its Tensor Cores), fp32 elsewhere (a CPU's
    bf16 matmuls can be a hundred times slower than its fp32 ones)."""
    kind = getattr(device, "type", None) or str(device or "cpu").split(":")[0]
    return "bf16" if kind == "cuda" else "fp32"


def sweep_quietness(sweep):
    """The machine's quietness over a measured sweep's points (`perflab.core.quietness.Quietness.combine`):
    disturbed when any point was measured while other programs used the device."""
    from perflab.core.quietness import Quietness, as_quietness

    return Quietness.combine(as_quietness(r.get("quietness")) for r in sweep.rows if r.get("status") == "ok")


def fit_sweep(sweep, dim: str, fixed: dict[str, int], info, target: ModelTarget) -> TileFit:
    """`fit_tile` on a measured sweep (`sweep_dimension`'s result): on a GPU the SMs run tiles (the target's SM
    count, cuBLAS's tile shapes); on a CPU the threads run a BLAS kernel's blocks (torch's threads, `CPU_BLOCKS`).
    The fit keeps the measured points, the unit it counted in (for `perflab.gemm.plots.sweep_fit`) and the
    sweep's quietness (`TileFit.verdict`)."""
    df = sweep.ok_frame()
    if getattr(info, "kind", None) == "cuda":
        units, unit, candidates = target.sms, "SM", TILE_SHAPES
    else:
        units, unit, candidates = max(1, int(info.details.get("torch_threads") or 1)), "thread", CPU_BLOCKS
    fit = fit_tile(list(df[dim]), list(df["median_s"]), dim, fixed, sms=units, tiles=candidates, unit=unit,
                   tflops=list(df["tflops"]))
    fit.quietness = sweep_quietness(sweep)
    return fit


def sm_count_of(device_info=None, gpu: str | None = None) -> tuple[int | None, str]:
    """SM count for the model and where it came from: a table id/name `gpu`, else the current CUDA
    device, else (None, reason)."""
    if gpu:
        from perflab.core.hardware import lookup

        spec = lookup(gpu)
        if spec is None:
            raise InputError(f"unknown GPU {gpu!r}: use an id from `perflab env`'s table, e.g. a100-sxm-80gb or h100-sxm")
        if not spec.sm_count:
            raise InputError(f"{spec.name}'s SM count is not published; pass --sms")
        return int(spec.sm_count), f"{spec.name} ({spec.sources.get('sm_count', 'datasheet')})"
    if device_info is not None and device_info.kind == "cuda":
        return int(device_info.details["sm_count"]), f"{device_info.name} (reported by the driver)"
    return None, "no CUDA GPU here"


# ---------------------------------------------------------------- helpers the lessons call

@dataclass(frozen=True)
class ModelTarget:
    """The GPU a lesson's model describes: this machine's GPU, or one chosen from the hardware table."""

    spec: Any  # perflab.core.hardware.AcceleratorSpec or None (a GPU not in the table)
    sms: int
    label: str
    this_machine: bool

    def peak(self, dtype: str) -> float | None:
        """The GPU's dense peak TFLOP/s for `dtype` (`perflab.core.hardware.spec_peak`); None: not in the table."""
        from perflab.core.hardware import spec_peak

        return spec_peak(self.spec, dtype).tflops

    @property
    def bandwidth_gbps(self) -> float | None:
        return self.spec.memory_bandwidth_gbps if self.spec is not None else None

    @property
    def choice(self) -> str:
        """The target as a 'which GPU' control names it (`gpu_choices`)."""
        return THIS_GPU if self.this_machine or self.spec is None else self.spec.id


THIS_GPU = "this GPU"
DEFAULT_GPU = "a100-sxm-80gb"  # the guide's worked example is on an A100


def model_target(info, gpu: str | None = None) -> ModelTarget:
    """The GPU the model describes: `gpu` (an id or name from the hardware table), or — when `gpu`
    is None or THIS_GPU — this machine's GPU if it has one (SM count from the driver), else an A100."""
    from perflab.core.hardware import lookup

    if gpu in (None, THIS_GPU):
        if info is not None and getattr(info, "kind", None) == "cuda":
            spec = lookup(info.name)
            return ModelTarget(spec, int(info.details["sm_count"]), f"{info.name} (this machine)", True)
        gpu = DEFAULT_GPU
    spec = lookup(gpu)
    if spec is None or not spec.sm_count:
        raise InputError(f"{gpu!r} is not a GPU with a published SM count in perflab's table: try a100-sxm-80gb or h100-sxm")
    here = info is not None and getattr(info, "kind", None) == "cuda" and lookup(info.name) is spec
    return ModelTarget(spec, int(spec.sm_count), spec.name + (" (this machine)" if here else " (model only: not this machine)"),
                       here)


def gpu_choices(info=None) -> list[str]:
    """Options for a 'which GPU' control: this GPU (when there is one), then every table id with an SM count."""
    from perflab.core.hardware import accelerators

    ids = [a.id for a in accelerators() if a.sm_count]
    return ([THIS_GPU] if info is not None and getattr(info, "kind", None) == "cuda" else []) + ids


def explain_gemm(m: int, n: int, k: int, *, dtype: str, target: ModelTarget, tile=(256, 128), extra_sms: int = 0):
    """One GEMM through every model, as a two-column table: tiles, waves, utilization, intensity,
    roofline, predicted TFLOP/s and Tensor Core alignment (with `extra_sms` more SMs when asked)."""
    import pandas as pd

    from perflab.core.dtypes import parse_dtype

    dt = parse_dtype(dtype)
    itemsize = 4 if dt.name == "tf32" else dt.itemsize
    sms = target.sms + int(extra_sms)
    w = wave_model(m, n, k, sms=sms, tile=tile, itemsize=itemsize)
    rows = [("SMs (wave size)", f"{sms} × 1 block = {w.wave_size}" + (f"  (+{extra_sms} what-if)" if extra_sms else "")),
            ("tiles", f"{w.tiles_m} × {w.tiles_n} = {w.tiles}"),
            ("waves", f"{w.waves} (last wave {w.last_wave_tiles}/{w.wave_size} busy)"),
            ("tile utilization", f"{w.tile_utilization:.1%}"), ("wave utilization", f"{w.wave_utilization:.1%}"),
            ("utilization", f"{w.utilization:.1%}"),
            ("arithmetic intensity", f"{w.arithmetic_intensity:.1f} FLOPs/byte")]
    peak = target.peak(dt.name)
    if peak and extra_sms:  # the what-if chip: each SM as fast as before, so the peak grows with the SM count
        peak = peak * sms / target.sms
    if target.spec is not None:
        rb = roofline_bound(m, n, k, dt.name, target.spec)
        if peak:
            pred = predicted_tflops(m, n, k, sms=sms, tile=tile, peak_tflops=peak, bandwidth_gbps=target.bandwidth_gbps,
                                    itemsize=itemsize)
            rows += [("roofline", f"{rb.bound} (ridge {rb.ridge:.0f} FLOPs/byte)"),
                     ("predicted time", f"{2 * m * n * k / pred / 1e12 * 1e3:.4g} ms"),
                     ("predicted", f"{pred:.4g} TFLOP/s of {peak:.4g} peak ({pred / peak:.0%})")]
        else:
            rows.append(("roofline", f"{target.spec.name} has no dense {dt.name} mode"))
        for c in check_alignment(m, n, k, dt.name, target.spec.id):
            rows.append((f"alignment {c.dim}", c.reason))
    return pd.DataFrame(rows, columns=["quantity", "value"]).set_index("quantity")


def explain_what_if(m: int, n: int, k: int, *, dtype: str, target: ModelTarget, tile=(256, 128), extra_sms: int = 4):
    """`explain_gemm`'s SMs, waves, utilization and prediction for the chip as built and with `extra_sms` more
    SMs (each as fast as before), side by side."""
    import pandas as pd

    keep = ["SMs (wave size)", "waves", "utilization", "predicted"]
    cols = {label: explain_gemm(m, n, k, dtype=dtype, target=target, tile=tile, extra_sms=extra)["value"]
            for label, extra in (("as built", 0), (f"{extra_sms} more SMs", extra_sms))}
    return pd.DataFrame(cols).reindex([q for q in keep if q in cols["as built"].index])
