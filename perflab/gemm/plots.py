"""Figures for lessons 04–05: predicted staircases, measured sweeps with the fitted staircase,
head sizes, SwiGLU widths and the MAMF search. Each returns a matplotlib Figure; every axis says
its unit, and every curve says whether it is a prediction, this machine's measurement, or
reference/published data from elsewhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from perflab.gemm import shapes


def _fig(nrows: int = 1, size=(8, 4.2), sharex: bool = False):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, 1, figsize=size, sharex=sharex, squeeze=False)
    return fig, [a[0] for a in axes]


def predicted_staircase(dim: str, values: Sequence[int], fixed: dict[str, int], *, sms: int,
                        tiles: Sequence = ((256, 128),), peak_tflops: float | None = None,
                        bandwidth_gbps: float | None = None, itemsize: int = 2, extra_sms: int = 0,
                        mark: int | None = None, title: str = "", gpu_label: str = "", ax=None):
    """Predicted TFLOP/s (or utilization, without a peak) along one dimension, one line per tile;
    with `extra_sms`, the same for a chip with that many more SMs (dashed), each SM as fast as before."""
    if ax is None:
        fig, (ax,) = _fig()
    else:
        fig = ax.figure
    ylab = "predicted TFLOP/s (model)" if peak_tflops else "predicted utilization (model, fraction of the GPU)"
    key = "predicted_tflops" if peak_tflops else "utilization"
    for i, t in enumerate(tiles):
        tm, tn = shapes.parse_tile(t)
        for extra, style in ((0, "-"), (extra_sms, "--")):
            if style == "--" and not extra:
                continue
            # a chip with more SMs has proportionally more peak: the per-SM rate stays the same
            peak = peak_tflops * (sms + extra) / sms if peak_tflops else None
            df = shapes.staircase(dim, values, fixed, sms=sms + extra, tile=(tm, tn), peak_tflops=peak,
                                  bandwidth_gbps=bandwidth_gbps, itemsize=itemsize)
            ax.plot(df[dim], df[key], style, color=f"C{i}", linewidth=max(0.8, 2.6 - 0.8 * i),
                    label=f"{tm}×{tn} tiles, {sms + extra} SMs" + (" (what if)" if extra and style == "--" else ""))
    if mark is not None:
        ax.axvline(mark, color="black", linestyle=":", linewidth=1)
        w = shapes.wave_model(*shapes._shape(dim, mark, fixed), sms=sms, tile=tiles[0])
        ax.text(mark, ax.get_ylim()[1], f" {dim}={mark}: {w.tiles} tiles, {w.waves} wave(s), {w.utilization:.0%}",
                va="top", fontsize=8)
    if peak_tflops:
        ax.axhline(peak_tflops, color="tab:red", linewidth=0.8, linestyle=":", label=f"peak {peak_tflops:g} TFLOP/s")
    others = ", ".join(f"{d}={v}" for d, v in fixed.items() if d != dim)
    ax.set_xlabel(f"{dim} (elements; {others})")
    ax.set_ylabel(ylab)
    ax.set_title(title or f"Tile and wave model{(' for ' + gpu_label) if gpu_label else ''}")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def measured_with_fit(values: Sequence[int], tflops: Sequence[float], times_s: Sequence[float], fit: shapes.TileFit,
                      dim: str, fixed: dict[str, int], *, title: str = "", device_label: str = "this device",
                      show: int = 2, unit: str = "SM"):
    """Two panels: measured TFLOP/s along `dim`; measured time with the best-fitting staircases."""
    fig, (a1, a2) = _fig(2, size=(8, 6.4), sharex=True)
    a1.plot(values, tflops, "o-", markersize=3, linewidth=0.8, color="black", label=f"measured on {device_label}")
    a1.set_ylabel("measured TFLOP/s")
    a1.set_title(title or f"GEMM sweep over {dim} on {device_label}")
    a1.legend(fontsize=8)
    a2.plot(values, [t * 1e3 for t in times_s], "o", markersize=3, color="black", label="measured time")
    for i, row in enumerate(fit.table.head(show).to_dict("records")):
        pred = shapes.fitted_staircase(row, values, dim, fixed, fit.sms)
        a2.plot(values, [p * 1e3 for p in pred], "-", color=f"C{i}", linewidth=1.4,
                label=f"model fit: {row['tile']} blocks, {row['blocks_per_sm']} per {unit}, {fit.sms} {unit}s "
                      f"(rel. RMS {row['rel_rms']:.1%})")
    others = ", ".join(f"{d}={v}" for d, v in fixed.items() if d != dim)
    a2.set_xlabel(f"{dim} (elements; {others})")
    a2.set_ylabel("time per GEMM (ms)")
    a2.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def guide_staircase(ex: shapes.GuideExample, step: int = 16):
    """The guide's worked example predicted along n, up to its third full wave, for its tile and two others."""
    return predicted_staircase("n", range(step, ex.full_waves()[-1] + 1, step), ex.fixed, sms=ex.sms,
                               tiles=[ex.tile, (128, 256), (128, 128)], title="The guide's example, predicted")


def sweep_fit(fit: shapes.TileFit, *, device_label: str = "this device", title: str = ""):
    """`measured_with_fit` for a fit that kept its measured points (`perflab.gemm.shapes.fit_sweep`)."""
    return measured_with_fit(list(fit.values), list(fit.tflops), list(fit.times_s), fit, fit.dim, fit.fixed or {},
                             device_label=device_label, unit=fit.unit, title=title)


def recording_prediction(rec: dict[str, Any], target, *, title: str = ""):
    """The model's staircase for the sweep a GPU reference recording measures (`rec`, as
    `perflab.course.reference.recording_sizes('waves')` gives it) on `target`, for three tiles."""
    return predicted_staircase(rec["dim"], shapes.fine_values(rec["start"], rec["stop"], rec["step"]), rec["fixed"],
                               sms=target.sms, tiles=[(256, 128), (128, 256), (128, 128)],
                               peak_tflops=target.peak(rec["dtype"]), bandwidth_gbps=target.bandwidth_gbps,
                               title=title or f"The model's prediction for {target.label}")


def reference_waves(ref, *, title: str = ""):
    """A recorded GPU sweep (perflab.course.reference.Reference of kind 'waves') with its fitted staircase."""
    df = ref.frame
    p = ref.params
    dim, fixed, sms = p["dim"], p["fixed"], int(p["sms"])
    fit = shapes.fit_tile(list(df[dim]), list(df["median_s"]), dim, fixed, sms=sms)
    return measured_with_fit(list(df[dim]), list(df["tflops"]), list(df["median_s"]), fit, dim, fixed,
                             title=title or f"Reference: {ref.label}", device_label=ref.provenance.get("device", "GPU"))


def head_sizes(frame, *, predicted: Sequence[float] | None = None, title: str = "", label: str = "measured", ax=None):
    """TFLOP/s of attention against head size d = h/a; optional predicted utilization on a second axis."""
    if ax is None:
        fig, (ax,) = _fig()
    else:
        fig = ax.figure
    df = frame.sort_values("d")
    ax.plot(df["d"], df["tflops"], "o-", color="black", label=label)
    for d, a, t in zip(df["d"], df["a"], df["tflops"], strict=True):
        ax.annotate(f"a={a}", (d, t), textcoords="offset points", xytext=(0, 5), fontsize=7, ha="center")
    ax.set_xlabel("head size d = h/a (elements)")
    ax.set_ylabel("attention TFLOP/s (forward, 4·b·s²·h FLOPs)")
    if predicted is not None:
        ax2 = ax.twinx()
        ax2.plot(df["d"], predicted, "s--", color="tab:blue", alpha=0.7, label="model: head size padded to a multiple of 32")
        ax2.set_ylabel("predicted utilization (model, fraction)", color="tab:blue")
        ax2.set_ylim(0, 1.05)
        ax2.legend(fontsize=8, loc="lower right")
    ax.set_title(title or "Attention speed by head size")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def head_sweep(run, *, device_label: str = "this device"):
    """A measured head-size sweep (`perflab.gemm.heads.HeadSizes`) with the part of the model a CPU shares: the
    head size padded to a multiple of 32."""
    from perflab.gemm import heads

    df = run.frame
    return head_sizes(df, predicted=[heads.padded_efficiency(int(d)) for d in df["d"]],
                      label=f"measured on {device_label}",
                      title=f"h = {run.h}, b = {run.b}, s = {run.s}: attention by head size")


def swiglu_widths(frame, baseline: int, *, title: str = "", published=None, ax=None, label: str = "measured"):
    """TFLOP/s against d_ff, coloured by the largest power of two dividing d_ff; the 8/3·h baseline in red.
    A width measured on a busy machine every time (the frame's `disturbed` column) is crossed out in red."""
    if ax is None:
        fig, (ax,) = _fig()
    else:
        fig = ax.figure
    df = frame.sort_values("d_ff")
    ax.plot(df["d_ff"], df["tflops"], "-", color="lightgray", linewidth=1, zorder=1)
    groups = [("multiple of 64", lambda x: x >= 64, "tab:green"), ("multiple of 8 (not 64)", lambda x: 8 <= x < 64, "tab:blue"),
              ("not a multiple of 8", lambda x: x < 8, "tab:orange")]
    mult = [shapes.largest_pow2_divisor(int(w)) for w in df["d_ff"]]
    for name, test, color in groups:
        sel = [test(m) for m in mult]
        if any(sel):
            ax.scatter(df["d_ff"][sel], df["tflops"][sel], s=18, color=color, label=f"{label}: d_ff {name}", zorder=2)
    base = df[df["d_ff"] == baseline]
    if len(base):
        ax.scatter(base["d_ff"], base["tflops"], s=80, facecolors="none", edgecolors="tab:red", linewidths=2, zorder=3,
                   label=f"⌊8/3·h⌋ = {baseline}")
    if "disturbed" in df and df["disturbed"].astype(bool).any():
        busy = df[df["disturbed"].astype(bool)]
        ax.scatter(busy["d_ff"], busy["tflops"], marker="x", s=70, color="tab:red", zorder=4,
                   label="machine busy every time: not this device's")
    if published is not None:
        ax.scatter(published["d_ff"], published["tflops"], marker="x", color="purple", s=40,
                   label="published (other hardware; see source)")
    ax.set_xlabel("MLP width d_ff (elements)")
    ax.set_ylabel("TFLOP/s of the MLP GEMMs (fwd + bwd)")
    ax.set_title(title or "SwiGLU MLP speed by width")
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


def mamf_search(frame, best: dict[str, Any] | None, *, stat: str = "mean", peak_tflops: float | None = None,
                published: dict[str, Any] | None = None, title: str = ""):
    """Every point the search measured, in order, coloured by stage; the best, the peak and the published MAMF."""
    fig, (ax,) = _fig()
    df = frame.reset_index(drop=True)
    stages = list(dict.fromkeys(df["stage"])) if "stage" in df else ["points"]
    for i, st in enumerate(stages):
        sel = df[df["stage"] == st] if "stage" in df else df
        ax.scatter(sel.index, sel[stat], s=10, color=f"C{i % 10}", label=st)
    if best:
        ax.axhline(best["tflops"], color="black", linewidth=1,
                   label=f"best: {best['tflops']:.4g} TFLOP/s at {best['m']}×{best['n']}×{best['k']}")
    if peak_tflops:
        ax.axhline(peak_tflops, color="tab:red", linestyle=":", label=f"spec/estimated peak {peak_tflops:.4g} TFLOP/s")
    if published:
        ax.axhline(published["tflops"], color="purple", linestyle="--",
                   label=f"published MAMF, {published['accelerator']}: {published['tflops']:g} TFLOP/s")
    ax.set_xlabel("points in the order the search looked at them")
    ax.set_ylabel(f"TFLOP/s ({stat} over timed calls)")
    ax.set_title(title or "Maximum achievable matmul FLOP/s: the search")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.set_size_inches(10, 4.2)
    fig.tight_layout()
    return fig


def head_model(h: int, b: int, s: int, *, target, pad: int = 32, title: str = ""):
    """The model's predicted utilization of attention for every split of h into heads, on `target`."""
    from perflab.gemm import heads

    fig, (ax,) = _fig()
    splits = heads.head_splits(h)
    us = [heads.predicted_head_utilization(b, a, s, d, sms=target.sms, pad=pad) for a, d in splits]
    ds = [d for _a, d in splits]
    ax.plot(ds, [u.utilization for u in us], "s-", color="tab:blue", label="model: padding × tiles × waves")
    ax.plot(ds, [u.pad_utilization for u in us], ":", color="gray", label=f"head size padded to a multiple of {pad}")
    for (a, d), u in zip(splits, us, strict=True):
        ax.annotate(f"a={a}", (d, u.utilization), textcoords="offset points", xytext=(0, 5), fontsize=7, ha="center")
    ax.set_ylim(0, 1.08)
    ax.set_xlabel("head size d = h/a (elements)")
    ax.set_ylabel("predicted utilization (model, fraction)")
    ax.set_title(title or f"Model: attention by head size, h={h}, b={b}, s={s} on {target.label}")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def wave_panel(m: int, n: int, k: int, *, dtype: str = "bf16", tile: str = "256x128", gpu: str | None = None,
               more_sms: bool = False, extra: int = 4, info=None, span: float = 2.0, points: int = 400):
    """What the notebook's sliders show: the predicted staircase along n up to span·n, marking the
    chosen n (and, with `more_sms`, the same chip with `extra` more SMs), plus the model's table for
    the chosen GEMM. `gpu` is a hardware-table id (or shapes.THIS_GPU); `info` this machine's DeviceInfo."""
    from perflab.core.dtypes import parse_dtype

    dt = parse_dtype(dtype)
    target = shapes.model_target(info, gpu)
    itemsize = 4 if dt.name == "tf32" else dt.itemsize
    hi = max(int(n * span), n + 16)
    step = max(1, hi // points)
    values = sorted({*range(step, hi + 1, step), n})
    peak = target.peak(dt.name)
    fig = predicted_staircase("n", values, {"m": m, "k": k}, sms=target.sms, tiles=(shapes.parse_tile(tile),),
                              peak_tflops=peak, bandwidth_gbps=target.bandwidth_gbps, itemsize=itemsize,
                              extra_sms=extra if more_sms else 0, mark=n, gpu_label=target.label,
                              title=f"{dt.name} GEMM on {target.label}")
    table = shapes.explain_gemm(m, n, k, dtype=dt.name, target=target, tile=tile, extra_sms=extra if more_sms else 0)
    return fig, table


def swiglu_plan(h: int, radius: int = 100, step: int = 4, tokens: int = 8192, *, dtype: str = "bf16",
                gpu: str | None = None, info=None):
    """The model-only view of a width search (the notebook's sliders): each candidate's parameter
    change against 8/3·h, coloured by the Tensor Core rule on the chosen GPU, with the tile/wave
    model's utilization; returns (figure, the ten candidates the model rates highest:
    `swiglu_model.candidate_view`)."""
    from perflab.gemm import swiglu_model

    target = shapes.model_target(info, gpu)
    table = swiglu_model.candidate_table(h, radius, step, target=target, tokens=tokens, dtype=dtype)
    fig, (a1, a2) = _fig(2, size=(8, 6), sharex=True)
    colors = {"best": "tab:green", "minimum": "tab:blue", "fails": "tab:orange"}
    rule = table["Tensor Core rule"] if "Tensor Core rule" in table else ["fails"] * len(table)
    for verdict, color in colors.items():
        sel = [r == verdict for r in rule]
        if any(sel):
            a1.scatter(table["d_ff"][sel], table["params_delta_pct"][sel], s=16, color=color,
                       label=f"Tensor Core rule ({dtype}): {verdict}")
    base = table.loc[table["baseline"]]
    a1.scatter(base["d_ff"], base["params_delta_pct"], s=80, facecolors="none", edgecolors="tab:red", linewidths=2,
               label=f"⌊8/3·h⌋ = {int(base['d_ff'].iloc[0])}")
    a1.axhline(0, color="gray", linewidth=0.8)
    a1.set_ylabel("parameters vs 8/3·h (%)")
    a1.set_title(f"Candidates near 8/3·h for h={h}: the model, before measuring\n{target.label}", fontsize=10)
    a1.legend(fontsize=7)
    a2.plot(table["d_ff"], table["model utilization"], ".-", color="tab:blue")
    a2.set_ylabel(f"model utilization, fwd GEMM\n({tokens}×{h} by {h}×d_ff)")
    a2.set_xlabel("MLP width d_ff (elements)")
    a2.set_ylim(0, 1.05)
    fig.tight_layout()
    return fig, swiglu_model.candidate_view(table, dtype=dtype)
