"""`perflab audit --html FILE`: the audit as one standalone page in the style of `perflab report`
(perflab.course.report_html): figures embedded as PNG, the style inline, nothing fetched."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from perflab.core.readout import nbytes, num, percent, seconds
from perflab.course.report_html import CSS, _png, _table


def _e(x: Any) -> str:
    return html.escape(str(x))


def waterfall_figure(json: dict[str, Any]):
    """The step's time split by the waterfall's parts (lesson 11's figure, one bar)."""
    from perflab.tune.plots import waterfall

    bd = json["breakdown_s"]
    row = {"rung": "your step", "step_s": json["step_s"], "speedup_vs_baseline": 1.0, "adopted": True,
           "breakdown": {"compute": bd["compute"], "data_wait": bd["data_wait"], "host_sync": bd["host_sync"],
                         "launch_overhead": bd["launch"], "optimizer": bd["optimizer"]}}
    return waterfall([row], title="where your step's time goes (one profiled step's shares of the measured step)")


def roofline_figure(json: dict[str, Any], ceilings: dict[str, float]):
    """Your top ops on this device's measured roofline: achieved FLOP/s against FLOPs per byte."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    peak, bw = ceilings.get("flops") or 0.0, ceilings.get("bytes") or 0.0
    pts = [r for r in json["top_ops"] if r.get("flops") and r.get("bytes")]
    xs = [r["flops"] / r["bytes"] for r in pts] or [1.0]
    lo, hi = min(xs + [0.1]) / 4, max(xs + [peak / bw if bw else 10.0]) * 4
    if peak and bw:
        import numpy as np

        grid = np.logspace(np.log10(lo), np.log10(hi), 100)
        ax.plot(grid, np.minimum(peak, grid * bw) / 1e9, color="k", lw=1,
                label="measured ceiling (matmul) and copy bandwidth")
    for r in pts:
        ax.scatter(r["flops"] / r["bytes"], r["flops_per_s"] / 1e9, label=f"{r['name']} ({r['bound']}-bound)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte of tensor inputs and outputs)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title("your ops on this device's roofline")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def render(rep) -> str:
    j = rep.json
    parts = [f"<html><head><meta charset='utf-8'><title>perflab audit: {_e(rep.name)}</title><style>{CSS}</style>"
             "</head><body>", f"<h1>perflab audit</h1><div class='meta'>{_e(rep.name)} on {_e(rep.device)}</div>"]
    peak = f"{num(j['peak_tflops'])} TFLOP/s" if j["peak_tflops"] else "peak unknown"
    parts.append("<section><h2>Time and utilization</h2>" + _table(["quantity", "value"], [
        ["step (median)", seconds(j["step_s"])], ["spread (IQR / median)", percent(j["step_s_spread"], 2)],
        ["tokens/s", num(j["tokens_per_s"])], ["samples/s", num(rep.samples_per_s)],
        ["FLOPs per step (counted; causal attention dense)", num(float(j["flops_per_step"]))],
        ["FLOPs per step (causal attention halved)", num(float(j.get("flops_per_step_causal_halved")
                                                             or j["flops_per_step"]))],
        ["6N·tokens", num(j["flops_6n_per_step"])], ["parameters (total / active)",
                                                    f"{j['params_total']:,} / {j['params_active']:,}"],
        ["MFU", percent(j["mfu"])], ["HFU", percent(j["hfu"])], ["peak", peak]])
        + f"<p class='note'>basis: {_e(j['mfu_basis'])}</p>"
        + "".join(f"<p class='note'>not counted: {_e(u['name'])}, {u['calls']} call(s)"
                  + (f", {seconds(u['time_s'])}" if u["time_s"] is not None else "")
                  + ": the counter has no formula for it; its products are missing from the FLOPs and MFU</p>"
                  for u in j.get("flops_uncounted") or [])
        + "".join(f"<p class='note'>cause: {_e(c)}</p>" for c in getattr(rep, "causes", []))
        + "</section>")
    parts.append("<section><h2>Where the time goes</h2>"
                 f"<img src='{_png(waterfall_figure(j))}' alt='waterfall'>" + _table(
                     ["op", "calls", "self time", "GFLOP/s", "GB/s", "bound"],
                     [[r["name"], r["count"], seconds(r["self_s"]),
                       "–" if r["flops_per_s"] is None else num(r["flops_per_s"] / 1e9),
                       "–" if r["bytes_per_s"] is None else num(r["bytes_per_s"] / 1e9), r["bound"] or "–"]
                      for r in j["top_ops"]])
                 + f"<img src='{_png(roofline_figure(j, rep.ceilings))}' alt='roofline'></section>")
    m = j["memory_bytes"]
    parts.append("<section><h2>Memory</h2>" + _table(["part", "bytes"], [[k, nbytes(v)] for k, v in m.items()
                                                                       if v is not None])
                 + "".join(f"<p class='note'>{_e(n)}</p>" for n in rep.memory_notes) + "</section>")
    parts.append("<section><h2>Graph breaks</h2>" + (_table(["where", "reason"], [[b["where"], b["reason"]]
                                                                               for b in j["graph_breaks"]])
                                                      if j["graph_breaks"] else ("<p>none</p>" if rep.breaks_read
                                                                                 else "<p>not read</p>")) + "</section>")
    e = j["energy_j_per_step"]
    parts.append("<section><h2>Energy</h2><p>" + (_e(rep.energy_note) if e is None else f"{num(e)} J per step "
                                                  f"({_e(rep.energy_note)})") + "</p></section>")
    parts.append("<section><h2>What to try</h2>" + (_table(["rung", "why", "measured speed-up", "loss parity"], [
        [r["rung"], r["why"], "–" if r["measured_speedup"] is None else f"{r['measured_speedup']:.3g}×",
         "–" if r["parity_ok"] is None else ("ok" if r["parity_ok"] else "failed")] for r in j["recommendations"]])
        if j["recommendations"] else "<p>no rung of the capstone applies</p>") + "</section></body></html>")
    return "".join(parts)


def write_html(rep, path: str | Path) -> Path:
    """Write the audit's one-page report to `path`."""
    p = Path(path)
    p.write_text(render(rep), encoding="utf-8")
    return p
