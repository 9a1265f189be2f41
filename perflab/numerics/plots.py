"""Lesson 16's figures. Each returns a matplotlib Figure (not closed: a lesson cell ending in `;` shows it)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from perflab.numerics.formats import FORMATS, FloatFormat

COLORS = {"fp32": "#4c72b0", "tf32": "#64b5cd", "bf16": "#55a868", "fp16": "#dd8452", "e4m3": "#c44e52",
          "e5m2": "#8172b3", "fp32, random seed 1": "#9fb3d9", "bf16 autocast": "#55a868", "fp8 (emulated)": "#c44e52"}


def formats_figure(ranges: Mapping[str, tuple[float, float]] | None = None,
                   formats: Sequence[FloatFormat] = FORMATS):
    """Each format's range on a log2 axis (subnormals pale, normals solid), with the tensors' ranges
    (`ranges`: what -> (smallest, largest) non-zero |x|) as shaded bands."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.5 * len(formats)))
    for i, f in enumerate(formats):
        lo, mid, hi = math.log2(f.smallest_subnormal), math.log2(f.smallest_normal), math.log2(f.max)
        c = COLORS.get(f.name, "grey")
        ax.barh(i, mid - lo, left=lo, color=c, alpha=0.35, height=0.6)
        ax.barh(i, hi - mid, left=mid, color=c, height=0.6, label=None)
        ax.text(hi + 2, i, f"spacing near 1: 2^{int(math.log2(f.eps))}", va="center", fontsize=8)
    shades = ["#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"]
    for j, (what, (lo, hi)) in enumerate((ranges or {}).items()):
        if lo > 0 and hi > 0:
            ax.axvspan(math.log2(lo), math.log2(hi), color=shades[j % len(shades)], alpha=0.15, lw=0,
                       label=f"{what}: 2^{math.log2(lo):.0f} to 2^{math.log2(hi):.0f}")
    if ranges:
        ax.legend(fontsize=7, loc="lower right", title="one step's |x|", title_fontsize=7)
    ax.set_yticks(range(len(formats)), [f.label for f in formats], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("log2 |x| (powers of two): pale = subnormal, solid = normal")
    ax.set_ylabel("format")
    ax.set_xlim(-155, 175)
    ax.set_title("what each format holds, and where one step's tensors lie (shaded)", fontsize=10)
    fig.tight_layout()
    return fig


def scaling_figure(table, sweep: Mapping[str, Sequence[tuple[float, float]]], chosen: str):
    """Left: each granularity's share of values that lost precision at `table`'s outlier factor, `chosen`
    highlighted. Right: that share against the outlier factor (`sweep`: granularity -> (factor, share))."""
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.2))
    names = [r.granularity for r in table.rows]
    vals = [100 * r.imprecise for r in table.rows]
    a1.bar(names, vals, color=["#c44e52" if n == chosen else "#bbbbbb" for n in names])
    a1.set_ylabel("values that lost precision (%)")
    a1.set_xlabel("granularity (one scale per …)")
    a1.set_title(f"E4M3, outliers × {table.outlier_factor:g}", fontsize=10)
    a1.tick_params(axis="x", labelsize=8)
    for g, pts in sweep.items():
        xs, ys = [p[0] for p in pts], [100 * p[1] for p in pts]
        a2.plot(xs, ys, "o-" if g == chosen else "--", color="#c44e52" if g == chosen else "#888888", label=g, ms=4)
    a2.set_xscale("log", base=2)
    a2.set_xlabel("outlier factor (×, log scale)")
    a2.set_ylabel("values that lost precision (%)")
    a2.legend(fontsize=8)
    fig.tight_layout()
    return fig


def speed_figure(speed, prediction_rows: Sequence = ()):
    """Measured bf16 and fp8 GEMM times over size (log axes)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4))
    if not speed.rows:
        ax.text(0.5, 0.5, speed.verdict(), ha="center", va="center", wrap=True, fontsize=9)
        ax.set_xlabel("m = n = k")
        ax.set_ylabel("time per GEMM (ms)")
        return fig
    xs = [r.size for r in speed.rows]
    ax.plot(xs, [r.bf16_s * 1e3 for r in speed.rows], "o-", color=COLORS["bf16"], label="bf16 a @ b")
    ax.plot(xs, [r.fp8_s * 1e3 for r in speed.rows], "s-", color=COLORS["e4m3"], label="fp8 torch._scaled_mm")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("m = n = k")
    ax.set_ylabel("time per GEMM (ms, log scale)")
    ax.set_title(f"measured on {speed.device}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def prediction_figure(curve: Sequence[Any], marks: Sequence[tuple[str, Any]] = (), crossover: int | None = None):
    """Predicted fp8 speedup over bf16 against square size (`curve`: Fp8Predictions), with named GEMMs."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot([p.m for p in curve], [p.speedup for p in curve], "-", color=COLORS["e4m3"], label="square m = n = k")
    if curve:
        ax.axhline(curve[0].rate_ratio, color="grey", ls=":", label=f"fp8 peak ÷ bf16 peak ({curve[0].basis})")
    ax.axhline(1.0, color="black", lw=0.8)
    for name, p in marks:
        size = (p.m * p.n * p.k) ** (1 / 3)
        ax.plot([size], [p.speedup], "o", color="#4c72b0")
        ax.annotate(name, (size, p.speedup), textcoords="offset points", xytext=(4, -10), fontsize=7)
    if crossover:
        ax.axvline(crossover, color="#c44e52", ls="--", lw=0.8, label=f"fp8 wins from {crossover}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GEMM size (m = n = k; a named GEMM at (m·n·k)^(1/3))")
    ax.set_ylabel("predicted speedup (×)")
    ax.set_title(f"fp8 over bf16 on {curve[0].accelerator if curve else '?'}: roofline with the casts", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def loss_figure(result):
    """The runs' loss curves on one plot (`perflab.numerics.parity.ParityResult`)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, losses in result.runs.items():
        ax.plot(range(1, len(losses) + 1), losses, "--" if "random seed 1" in label else "-", color=COLORS.get(label, "grey"),
                label=label, lw=1.2)
    n = len(next(iter(result.runs.values()))) if result.runs else 0
    if n:
        ax.axvspan(n - result.window + 0.5, n + 0.5, color="grey", alpha=0.1, lw=0, label="steps compared")
    ax.set_xlabel("training step")
    ax.set_ylabel("loss (cross-entropy, nats per token)")
    ax.set_title("the same model and batches in three formats", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
