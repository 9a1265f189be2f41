"""`perflab audit --html FILE`: the audit as one standalone page in the style of `perflab report`
(perflab.course.report_html): figures embedded as PNG, the style inline, nothing fetched. It reads the
typed report (`perflab.audit.report.AuditReport`) by attribute."""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflab.audit.fp8 import HOW
from perflab.core.readout import nbytes, num, percent, seconds
from perflab.course.report_html import CSS, _png, _table

if TYPE_CHECKING:
    from perflab.audit.report import AuditReport


def _e(x: Any) -> str:
    return html.escape(str(x))


def waterfall_figure(rep: AuditReport):
    """The step's time split by the waterfall's parts (lesson 11's figure, one bar)."""
    from perflab.tune.plots import waterfall

    row = {"rung": "your step", "step_s": rep.time.step_s, "speedup_vs_baseline": 1.0, "adopted": True,
           "breakdown": dict(rep.waterfall.seconds)}
    return waterfall([row], title="where your step's time goes (one profiled step's shares of the measured step)")


def roofline_figure(rep: AuditReport):
    """Your top ops on this device's measured roofline: achieved FLOP/s against FLOPs per byte."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    peak, bw = rep.ceilings.flops or 0.0, rep.ceilings.bytes or 0.0
    pts = [(r, r.flops, r.bytes, r.flops_per_s or 0.0) for r in rep.top_ops if r.flops and r.bytes]
    xs = [f / b for _, f, b, _ in pts] or [1.0]
    lo, hi = min(xs + [0.1]) / 4, max(xs + [peak / bw if bw else 10.0]) * 4
    if peak and bw:
        import numpy as np

        grid = np.logspace(np.log10(lo), np.log10(hi), 100)
        ax.plot(grid, np.minimum(peak, grid * bw) / 1e9, color="k", lw=1,
                label="measured ceiling (matmul) and copy bandwidth")
    for r, f, b, rate in pts:
        ax.scatter(f / b, rate / 1e9, label=f"{r.name} ({r.bound}-bound)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte of tensor inputs and outputs)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title("your ops on this device's roofline")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _time_section(rep: AuditReport) -> str:
    t, w, u = rep.time, rep.work, rep.utilization
    peak = f"{num(rep.peak_tflops)} TFLOP/s" if rep.peak_tflops else "peak unknown"
    return ("<section><h2>Time and utilization</h2>" + _table(["quantity", "value"], [
        ["step (median)", seconds(t.step_s)], ["spread (IQR / median)", percent(t.spread, 2)],
        ["tokens/s", num(t.tokens_per_s)], ["samples/s", num(t.samples_per_s)],
        ["FLOPs per step (counted; causal attention dense)", num(float(w.flops_per_step))],
        ["FLOPs per step (causal attention halved)", num(float(w.flops_causal_halved or w.flops_per_step))],
        ["6N·tokens", num(w.six_n)], ["parameters (total / active)", f"{w.params_total:,} / {w.params_active:,}"],
        ["MFU", percent(u.mfu)], ["HFU", percent(u.hfu)], ["peak", peak]])
        + f"<p class='note'>basis: {_e(u.basis_label())}</p>"
        + "".join(f"<p class='note'>not counted: {_e(x.name)}, {x.calls} call(s)"
                  + (f", {seconds(x.time_s)}" if x.time_s is not None else "")
                  + ": the counter has no formula for it; its products are missing from the FLOPs and MFU</p>"
                  for x in w.uncounted)
        + "".join(f"<p class='note'>cause: {_e(c)}</p>" for c in rep.causes)
        + "</section>")


def _fp8_section(rep: AuditReport) -> str:
    """The step's GEMMs, bf16 against fp8 on the chosen GPU (perflab.audit.fp8): every shape, its verdict,
    the step's matmuls in all and the datasheets behind it."""
    f = rep.fp8
    if f is None:
        return ""
    head = "<section><h2>Where fp8 would pay</h2>"
    if f.basis is None:
        return head + f"<p>{_e(f.lines()[0])}</p></section>"
    b = f.basis
    rows = [[x.shape, x.calls, percent(x.share), seconds(x.bf16_s), seconds(x.fp8_s), seconds(x.cast_s),
             "–" if x.speedup is None else f"{num(x.speedup)}×", "fp8 pays" if x.fp8_wins else "keep bf16"]
            for x in f.gemms]
    said = [f.count_line(), f.stay_line(), f.all_line()] if f.gemms else [f.lines()[1]]
    return (head + f"<p>on {_e(b.gpu)} ({_e(f.note)})</p>"
            + _table(["m×n×k", "calls per step", "share of the matmul FLOPs", "bf16 per step",
                      "fp8 per step (casts included)", "casts per step", "fp8 gain", "verdict"], rows)
            + "".join(f"<p class='note'>{_e(line)}</p>" for line in said if line)
            + f"<p class='note'>basis: {_e(b.gpu)}'s dense peaks, bf16 {num(b.bf16_tflops)} and fp8 "
            f"{num(b.fp8_tflops)} TFLOP/s ({_e(b.peaks_source)}); memory bandwidth {num(b.bandwidth_gbps)} GB/s "
            f"({_e(b.bandwidth_source)}); {_e(HOW)}</p></section>")


def _recommendations(rep: AuditReport) -> str:
    if not rep.recommendations:
        return "<p>no rung of the capstone applies</p>"
    return _table(["rung", "why", "measured speed-up", "loss parity"], [
        [r.rung, r.why, "–" if r.measured_speedup is None else f"{r.measured_speedup:.3g}×",
         "–" if r.parity_ok is None else ("ok" if r.parity_ok else "failed")] for r in rep.recommendations])


def render(rep: AuditReport) -> str:
    """The audit as one standalone HTML page."""
    parts = [f"<html><head><meta charset='utf-8'><title>perflab audit: {_e(rep.name)}</title><style>{CSS}</style>"
             "</head><body>", f"<h1>perflab audit</h1><div class='meta'>{_e(rep.name)} on {_e(rep.device)}</div>",
             _time_section(rep)]
    parts.append("<section><h2>Where the time goes</h2>"
                 f"<img src='{_png(waterfall_figure(rep))}' alt='waterfall'>" + _table(
                     ["op", "calls", "self time", "GFLOP/s", "GB/s", "bound"],
                     [[r.name, r.count, seconds(r.self_s), "–" if r.flops_per_s is None else num(r.flops_per_s / 1e9),
                       "–" if r.bytes_per_s is None else num(r.bytes_per_s / 1e9), r.bound or "–"]
                      for r in rep.top_ops])
                 + f"<img src='{_png(roofline_figure(rep))}' alt='roofline'></section>")
    m = rep.memory
    parts.append("<section><h2>Memory</h2>" + _table(["part", "bytes"], [[k, nbytes(v)] for k, v in m.parts()
                                                                       if v is not None])
                 + "".join(f"<p class='note'>{_e(n)}</p>" for n in m.notes) + "</section>")
    gb = rep.breaks
    parts.append("<section><h2>Graph breaks</h2>" + (_table(["where", "reason"], [[b.where, b.reason] for b in gb.sites])
                                                      if gb.sites else ("<p>none</p>" if gb.read else "<p>not read</p>"))
                 + "</section>")
    e = rep.energy
    parts.append("<section><h2>Energy</h2><p>" + (_e(e.note) if e.j_per_step is None else f"{num(e.j_per_step)} J per "
                                                  f"step ({_e(e.note)})") + "</p></section>")
    parts.append(_fp8_section(rep))
    parts.append("<section><h2>What to try</h2>" + _recommendations(rep) + "</section></body></html>")
    return "".join(parts)


def write_html(rep: AuditReport, path: str | Path) -> Path:
    """Write the audit's one-page report to `path`."""
    p = Path(path)
    p.write_text(render(rep), encoding="utf-8")
    return p
