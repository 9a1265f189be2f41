"""The denominator of an honest MFU: each dtype's FLOPs at that dtype's own dense peak.

    time at peak = Σ_dtype FLOPs_dtype / peak_dtype          (seconds the step would take at the peaks)
    MFU          = time at peak (model FLOPs) / step time
    HFU          = time at peak (hardware FLOPs: recompute included) / step time

So a bf16 autocast step whose logits stay fp32 is not measured against one peak for both, and an
fp8 step gets the weighted peak its own mix of dtypes implies (the effective peak reported is
Σ FLOPs / time at peak). Peaks come from perflab's hardware table (`perflab.core.hardware`,
dense figures, each with its datasheet); sparsity figures are never used. A device the table does
not list (this includes every CPU: its estimate of cores × clock × FLOPs/cycle is not a datasheet
figure) has its peak *unknown*; MFU is then measured against the device's measured matmul ceiling
for each dtype that ran (lesson 04's maximum achievable matmul FLOP/s, searched quickly at shapes like
the step's own products), and the basis says so. Another device's peak is never borrowed.

`select_peak` is the one place a peak is chosen (the rules of `perflab.flops.mfu` may replace it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class PeakChoice:
    tflops: float | None  # dense peak TFLOP/s for the dtype; None: unknown
    source: str  # where it comes from, in words


def select_peak(device_name: str, device_kind: str, dtype: str) -> PeakChoice:
    """The dense datasheet peak of `dtype` on this device, from perflab's hardware table, or unknown.

    CPUs and accelerators missing from the table get None ('peak unknown'); so does a dtype the
    table has no dense figure for on a known accelerator. Never another device's number.
    """
    from perflab.core.hardware import lookup

    if device_kind == "cpu":
        return PeakChoice(None, f"peak unknown: a CPU ({device_name}) is not in perflab's hardware table")
    spec = lookup(device_name)
    if spec is None:
        return PeakChoice(None, f"peak unknown: {device_name!r} is not in perflab's hardware table")
    p = spec.peak(dtype)
    if p is None:
        return PeakChoice(None, f"peak unknown: {spec.name} has no dense {dtype} figure in perflab's hardware table")
    return PeakChoice(float(p), f"{spec.name} {dtype} dense, {spec.sources.get('peak_tflops', 'datasheet')}")


def quick_ceiling(device: torch.device, dtype: str, shapes: Sequence[tuple[int, int, int]] = (),
                  budget_points: int = 4) -> tuple[float, str]:
    """(TFLOP/s, how) of the device's measured matmul ceiling for `dtype`: lesson 04's saved maximum
    achievable matmul search for this device when there is one, else the fastest of a few products
    measured now at the step's own largest shapes (m, n, k) and one square of their largest side."""
    from perflab.gemm import mamf

    saved = mamf.measured_ceiling(device, dtype)
    if saved:
        return float(saved), f"measured ceiling for {dtype} (saved maximum achievable matmul search, lesson 04)"
    pts = list(dict.fromkeys(tuple(int(x) for x in s) for s in shapes))[:budget_points - 1]
    side = max([max(s) for s in pts] + [256])
    side = min(side, 4096 if device.type == "cuda" else 1024)
    pts.append((side, side, side))
    best, where = 0.0, ""
    for m, n, k in pts:
        try:
            r = mamf.measure_point(m, n, k, dtype, device, warmup_ms=10, rep_ms=40)
        except Exception:  # noqa: BLE001 - a shape the device refuses is skipped; the others decide
            continue
        tf = float(r["median_tflops"])
        if tf > best:
            best, where = tf, f"{m}×{n}×{k}"
    if best <= 0:
        from perflab.core.measure import measure_matmul

        best = measure_matmul(side, side, side, dtype, device, warmup_ms=10, rep_ms=50).tflops
        where = f"{side}³"
    return best, (f"measured matmul ceiling for {dtype} (lesson 04's maximum achievable matmul, searched quickly "
                  f"over {len(pts)} shapes like the step's; best {where})")


@dataclass
class Utilization:
    mfu: float | None
    hfu: float | None
    peak_tflops: float | None  # effective dense peak (FLOPs-weighted over the dtypes that ran); None: unknown
    basis: str
    per_dtype: dict[str, dict[str, Any]] = field(default_factory=dict)


def utilization(step_s: float, model_by_dtype: Mapping[str, float], hardware_by_dtype: Mapping[str, float], *,
                device: torch.device, device_name: str, shapes: Sequence[tuple[int, int, int]] = (),
                ceiling=quick_ceiling) -> Utilization:
    """MFU and HFU of a step of `step_s` seconds that ran these FLOPs per dtype (see the module docstring)."""
    dtypes = [d for d, n in hardware_by_dtype.items() if n > 0]
    if not dtypes or step_s <= 0:
        return Utilization(None, None, None, "no matmul-class FLOPs counted: MFU undefined")
    choices = {d: select_peak(device_name, device.type, d) for d in dtypes}
    known = all(c.tflops for c in choices.values())
    per: dict[str, dict[str, Any]] = {}
    if known:
        rates = {d: float(c.tflops or 0.0) for d, c in choices.items()}
        basis = "dense datasheet peak per dtype: " + "; ".join(c.source for c in choices.values())
        peak_tflops: float | None = None
    else:
        rates, hows = {}, []
        for d in dtypes:
            tf, how = ceiling(device, "fp32" if d == "tf32" else d, shapes)
            rates[d] = tf
            hows.append(how)
        unknown = next(c.source for c in choices.values() if not c.tflops)
        basis = f"{unknown}; MFU against the " + "; ".join(hows)
        peak_tflops = None
    t_model = sum(model_by_dtype.get(d, 0) / (rates[d] * 1e12) for d in dtypes)
    t_hw = sum(hardware_by_dtype[d] / (rates[d] * 1e12) for d in dtypes)
    if known:
        peak_tflops = sum(hardware_by_dtype[d] for d in dtypes) / t_hw / 1e12
    for d in dtypes:
        per[d] = {"flops": hardware_by_dtype[d], "rate_tflops": rates[d], "peak_known": bool(choices[d].tflops)}
    return Utilization(t_model / step_s, t_hw / step_s, peak_tflops, basis, per)
