"""Plots the lessons share. Each function takes data (usually a DataFrame) and returns a Figure;
every axis says its unit."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeGuard

import matplotlib

matplotlib.rcParams.setdefault("figure.dpi", 100)


def _fig(ax=None, size=(7, 4)):
    import matplotlib.pyplot as plt

    if ax is not None:
        return ax.figure, ax
    fig, ax = plt.subplots(figsize=size)
    return fig, ax


def _known(x: float | None) -> TypeGuard[float]:
    return x is not None and not (isinstance(x, float) and math.isnan(x)) and x > 0


BUSY_LABEL = "machine busy: not this device's"  # how a figure marks a figure measured on a busy machine


def bars_vs_peak(labels: Sequence[str], measured: Sequence[float], peaks: Sequence[float | None], *, unit: str = "TFLOP/s",
                 title: str = "", peak_label: str = "peak", ax=None, disturbed: Sequence[bool] | None = None):
    """Measured bars with each bar's peak drawn as a red tick; value and fraction of peak written on top.
    A bar measured on a busy machine (`disturbed`) is hatched grey and says so."""
    fig, ax = _fig(ax)
    x = list(range(len(labels)))
    busy = list(disturbed) if disturbed is not None else [False] * len(labels)
    labelled: set[bool] = set()
    for i, (m, b) in enumerate(zip(measured, busy, strict=True)):
        ax.bar([i], [m], color="lightgray" if b else "tab:blue", hatch="//" if b else None,
               label="_nolegend_" if b in labelled else (BUSY_LABEL if b else "measured"))
        labelled.add(b)
    top = max([m for m in measured] + [p for p in peaks if _known(p)] + [0])
    first = True
    for i, (m, p) in enumerate(zip(measured, peaks)):
        if _known(p):
            ax.hlines(p, i - 0.4, i + 0.4, colors="tab:red", linewidth=2, label=peak_label if first else "_nolegend_")
            first = False
            note = f"{m:.3g} {unit}\n{m / p:.0%} of peak"
        else:
            note = f"{m:.3g} {unit}\npeak unknown"
        if busy[i]:
            note += "\n(machine busy)"
        ax.text(i, max(m, p if _known(p) else 0.0) + 0.02 * top, note, ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, top * 1.25 if top else 1)
    ax.set_xticks(x, labels)
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.legend(loc="upper right")
    fig.tight_layout()
    return fig


def bandwidth_vs_size(sizes_bytes: Sequence[float], gbps: Sequence[float], *, marks: dict[str, float] | None = None,
                      spec_gbps: float | None = None, title: str = "", ax=None, label: str = "measured",
                      disturbed: Sequence[bool] | None = None):
    """GB/s against buffer size (log x), with cache sizes marked as vertical lines; a point measured on a
    busy machine (`disturbed`) is crossed out in red."""
    fig, ax = _fig(ax)
    ax.plot([s / 2**20 for s in sizes_bytes], gbps, "o-", label=label)
    busy = [(s / 2**20, g) for s, g, b in zip(sizes_bytes, gbps, disturbed or [False] * len(gbps), strict=True) if b]
    if busy:
        ax.scatter(*zip(*busy, strict=True), marker="x", s=80, color="tab:red", zorder=3, label=BUSY_LABEL)
    for name, nbytes in (marks or {}).items():
        if nbytes:
            ax.axvline(nbytes / 2**20, color="gray", linestyle=":", linewidth=1)
            ax.text(nbytes / 2**20, ax.get_ylim()[1] * 0.95, f" {name}", rotation=90, va="top", fontsize=8, color="gray")
    if spec_gbps:
        ax.axhline(spec_gbps, color="tab:red", linestyle="--", label=f"spec {spec_gbps:g} GB/s")
    ax.set_xscale("log", base=2)
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.set_xlabel("buffer size (MiB; a copy touches twice this: source and destination)")
    ax.set_ylabel("copy bandwidth (GB/s, read + write)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


def roofline(peak_tflops: float | None, bandwidth_gbps: float | None, points=None, *, ceilings: dict[str, float] | None = None,
             title: str = "", ax=None, intensity_range: tuple[float, float] = (0.05, 5000)):
    """A roofline (log-log): attainable TFLOP/s = min(peak, intensity × bandwidth), with measured points.

    points: DataFrame or list of dicts with 'intensity' (FLOPs/byte), 'tflops' and optional 'label'.
    ceilings: extra horizontal roofs, e.g. {"measured best": 0.18}.
    """
    import numpy as np

    fig, ax = _fig(ax)
    xs = np.logspace(np.log10(intensity_range[0]), np.log10(intensity_range[1]), 200)
    if peak_tflops and bandwidth_gbps:
        ys = np.minimum(peak_tflops, xs * bandwidth_gbps / 1e3)
        ax.plot(xs, ys, color="black", label=f"roofline: {peak_tflops:.3g} TFLOP/s, {bandwidth_gbps:.3g} GB/s")
        ridge = peak_tflops * 1e3 / bandwidth_gbps
        ax.axvline(ridge, color="gray", linestyle=":", linewidth=1)
        ax.text(ridge, peak_tflops * 1.1, f"ridge {ridge:.3g} FLOP/B", fontsize=8, color="gray")
    for name, value in (ceilings or {}).items():
        ax.axhline(value, linestyle="--", linewidth=1, label=f"{name}: {value:.3g} TFLOP/s")
    if points is not None:
        rows = points.to_dict("records") if hasattr(points, "to_dict") else list(points)
        first_busy = True
        for r in rows:
            if r.get("disturbed"):  # measured on a busy machine: crossed out, and said so once in the legend
                ax.scatter(r["intensity"], r["tflops"], zorder=3, s=60, marker="x", color="tab:red",
                           label=BUSY_LABEL if first_busy else "_nolegend_")
                first_busy = False
            else:
                ax.scatter(r["intensity"], r["tflops"], zorder=3, s=30)
            if r.get("label"):
                ax.annotate(str(r["label"]), (r["intensity"], r["tflops"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:  # no roofline drawn (peak unknown) and no ceilings: no legend
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


# A slider's measurement costs about this many calls of the matmul at least: the correctness check,
# the first call, one estimate, one warm-up and three timed calls.
SLIDER_CALLS = 7


def predicted_call_s(n: int, dtype: str, device, peak_tflops: float | None = None) -> tuple[float, float]:
    """Predicted seconds of one n³ matmul, and the TFLOP/s it assumes (`core.measure.predicted_tflops`)."""
    from perflab.core.measure import predicted_tflops

    rate = predicted_tflops(dtype, device, peak_tflops)
    return 2 * n**3 / (rate * 1e12), rate


def measure_on_roofline(n: int, dtype: str, device, info, peaks, *, bandwidth_gbps: float | None = None,
                        background=None, rep_ms: float = 100, warmup_ms: float = 10, budget_s: float | None = 2.0):
    """Measure an n³ matmul and draw it on this device's roofline, with `background` points in grey.

    Returns (figure, MatmulResult). Sizes and dtype are validated (InputError / UnsupportedError).
    `budget_s`: a slider should answer in about a second, so a size predicted to take longer than
    this in all (`SLIDER_CALLS` calls) is refused with one line naming the largest size that fits
    (a CPU without native bf16 takes minutes for a 4096³ bf16 matmul); None measures any size.
    """
    from perflab.core.dtypes import parse_dtype
    from perflab.core.errors import InputError
    from perflab.core.measure import measure_matmul
    from perflab.core.roofline import device_roofline, matmul_intensity

    min_reps = 5
    if budget_s is not None:
        dt = parse_dtype(dtype)
        call_s, rate = predicted_call_s(n, dt.name, device, peaks.get(dt.name))
        if call_s * SLIDER_CALLS > budget_s:
            fits = 2 ** int(math.log2(max(1.0, (budget_s / SLIDER_CALLS * rate * 1e12 / 2) ** (1 / 3))))
            raise InputError(f"{n}³ {dt.name} would take about {call_s:.2g} s per call here ({rate:.3g} TFLOP/s "
                             f"measured on a small one), {call_s * SLIDER_CALLS:.2g} s to measure: choose n ≤ {fits}, or "
                             f"time it once with `perflab matmul --m {n} --n {n} --k {n} --dtype {dt.name}`")
        min_reps = 3 if call_s > 0.05 else 5
    r = measure_matmul(n, n, n, dtype, device, rep_ms=rep_ms, warmup_ms=warmup_ms, min_reps=min_reps)
    inten = matmul_intensity(n, n, n, parse_dtype(dtype).itemsize)
    rf, _ = device_roofline(info, peaks, r.dtype, measured_bandwidth_gbps=bandwidth_gbps)
    busy = r.quietness.disturbed
    fig = roofline(rf.peak_flops / 1e12 if rf else None, rf.bandwidth / 1e9 if rf else None,
                   [{"intensity": inten, "tflops": r.tflops, "disturbed": busy,
                     "label": f"{n}³ {r.dtype}: {r.tflops:.3g} TFLOP/s" + (" (machine busy)" if busy else "")}],
                   title=f"live: {n}³ {r.dtype} on {info.name}")
    if background is not None and len(background):
        fig.axes[0].scatter(background["intensity"], background["tflops"], color="lightgray", zorder=2,
                            label="sweep above")
        fig.axes[0].legend(fontsize=8, loc="lower right")
    return fig, r


# ---------------------------------------------------------------- lesson 00's figures, from its typed results

def dtype_bars(matmuls, device_name: str):
    """Lesson 00's matmul in every dtype (`perflab.core.machine.DtypeMatmuls`) against each dtype's peak."""
    pts = matmuls.points
    return bars_vs_peak([p.dtype for p in pts], [p.tflops for p in pts], [p.peak_tflops for p in pts],
                        title=f"{matmuls.n}³ matmul on {device_name}", peak_label=f"{matmuls.peak_label} peak",
                        disturbed=[p.quietness.disturbed for p in pts])


def copy_curve(copies, device_name: str):
    """Lesson 00's copy sweep (`perflab.core.machine.CopySweep`) against buffer size, its caches marked."""
    pts = sorted(copies.points, key=lambda p: p.nbytes)
    return bandwidth_vs_size([p.nbytes for p in pts], [p.gbps for p in pts], marks=dict(copies.caches),
                             spec_gbps=copies.spec_gbps, title=f"device-memory copy on {device_name}",
                             disturbed=[p.quietness.disturbed for p in pts])


def sweep_roofline(run, device_name: str):
    """Lesson 01's roofline (`perflab.flops.rates.RooflineRun`): the roof, its matmuls and a + b, the best matmul
    as a dashed ceiling; a point measured on a busy machine is crossed out."""
    roof = run.roof
    return roofline(roof.peak_flops / 1e12 if roof else None, roof.bandwidth / 1e9 if roof else None, run.frame(),
                    ceilings={"best matmul measured here": run.best_tflops},
                    title=f"{run.dtype} roofline of {device_name}")
