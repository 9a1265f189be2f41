"""A report as one standalone HTML page: every figure embedded as a base64 PNG, the style inline,
nothing fetched from the network (it opens from a file on a box with no internet).

The figures are drawn from the report's data (report.json), with the lessons' own plot functions
where one exists, so a report read back from disk renders the same page.
"""

from __future__ import annotations

import base64
import html
import io
from typing import TYPE_CHECKING, Any

from perflab.core.readout import nbytes, num, percent

if TYPE_CHECKING:
    from perflab.course.report_types import PartEntry, Report

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:60rem;color:#222;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin:0 0 .4rem}
.meta{color:#555;margin-bottom:1.5rem}
section{border:1px solid #ddd;border-radius:6px;padding:1rem 1.2rem;margin:1rem 0}
section.failed-part{border-color:#c0392b;background:#fdf0ee}
.badge{display:inline-block;font-size:.75rem;padding:.1rem .5rem;border-radius:3px;margin-left:.5rem;vertical-align:middle}
.ok{background:#e3f4e8;color:#1e7b3a}.bad{background:#c0392b;color:#fff}.resumed{background:#eef;color:#335}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}td,th{border-bottom:1px solid #eee;padding:.2rem .8rem;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;height:auto;display:block;margin:.5rem 0}
.note{color:#555;font-size:.9rem}.summary{font-weight:600}
nav a{margin-right:.8rem}
"""


def _e(x: Any) -> str:
    return html.escape(str(x))


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _table(head: list[str], rows: list[list[Any]]) -> str:
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td class='n'>{_e(c)}</td>" if i else f"<td>{_e(c)}</td>"
                                   for i, c in enumerate(r)) + "</tr>")
    out.append("</table>")
    return "".join(out)


# ---------------------------------------------------------------- one figure per part

def _fig_matmul(d):
    from perflab.course.plots import bars_vs_peak

    rows = d["rows"]
    return bars_vs_peak([f"{r['dtype']}\n{r['n']}³" for r in rows], [r["tflops"] for r in rows],
                        [r.get("peak_tflops") for r in rows], title="Square matmul per dtype (measured) vs peak")


def _fig_mamf(d):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    pts = d.get("points") or []
    x = [2 * p["m"] * p["n"] * p["k"] / 1e9 for p in pts]
    ax.scatter(x, [p["tflops"] for p in pts], s=18, label="shapes measured (mean TFLOP/s)")
    b = d["best"]
    ax.scatter([2 * b["m"] * b["n"] * b["k"] / 1e9], [b["tflops"]], marker="*", s=200, color="tab:red",
               label=f"best: {b['m']}×{b['n']}×{b['k']} → {num(b['tflops'])} TFLOP/s", zorder=3)
    if d.get("peak_tflops"):
        ax.axhline(d["peak_tflops"], color="grey", linestyle="--", label=f"peak {num(d['peak_tflops'])} TFLOP/s")
    if d.get("stored_ceiling"):
        ax.axhline(d["stored_ceiling"], color="tab:green", linestyle=":", label="stored ceiling (perflab mamf)")
    ax.set_xscale("log")
    ax.set_xlabel("GFLOPs per matmul (2·m·n·k / 1e9)")
    ax.set_ylabel(f"TFLOP/s ({d['dtype']})")
    ax.set_ylim(bottom=0)
    ax.set_title(f"MAMF search: {d['evaluated']} of {d['grid_points']} shapes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _fig_memory(d):
    import matplotlib.pyplot as plt

    from perflab.course.plots import bandwidth_vs_size

    copy = d["copy"]
    if not d.get("h2d"):
        return bandwidth_vs_size([r["nbytes"] for r in copy], [r["gbps"] for r in copy],
                                 spec_gbps=copy[0].get("spec_gbps"), title="Device-memory copy (read + write)")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    bandwidth_vs_size([r["nbytes"] for r in copy], [r["gbps"] for r in copy], spec_gbps=copy[0].get("spec_gbps"),
                      title="Device-memory copy", ax=a1)
    a2.bar([h["kind"] for h in d["h2d"]], [h["gbps"] for h in d["h2d"]], color="tab:blue")
    a2.set_ylabel("GB/s")
    a2.set_title(f"host→device, {nbytes(d['h2d'][0]['nbytes'])}")
    fig.tight_layout()
    return fig


def _fig_waves(d):
    import matplotlib.pyplot as plt

    rows = d["rows"]
    fig, ax = plt.subplots(figsize=(7, 4))
    ns = [r["n"] for r in rows]
    ax.plot(ns, [r["tflops"] for r in rows], "o-", ms=3, label="measured here")
    model = d.get("model")
    if model and model.get("predicted_tflops"):
        xs = sorted(ns) if len(model["predicted_tflops"]) != len(ns) else ns
        ax.plot(xs[:len(model["predicted_tflops"])], model["predicted_tflops"], "--", color="grey",
                label=f"wave model, {model['tile']} tiles on {model['sms']} SMs")
        for c in model.get("cliffs", []):
            ax.axvline(c, color="tab:red", alpha=0.25, linewidth=1)
    ax.set_xlabel(f"n (m = {d['fixed']['m']}, k = {d['fixed']['k']})")
    ax.set_ylabel(f"TFLOP/s ({d['dtype']})")
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput along n" + (" and where new waves start (red)" if model else " (a CPU: no waves)"))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _fig_collectives(d):
    from perflab.distributed.busbw import plot

    return plot(d["rows"], title=f"{d['op']} on {d['nproc']} ranks ({d['backend']})")


def _fig_numa(d):
    from perflab.numa.plots import draw_topology
    from perflab.numa.topology import GPU, Node, Topology

    t = d["topology"]
    topo = Topology([Node(**n) for n in t["nodes"]], t["distances"], [GPU(**g) for g in t["gpus"]], t["affinity"],
                    source=t.get("source", "sysfs"))
    return draw_topology(topo, title="NUMA nodes, their CPUs and GPUs")


def _fig_dataloader(d):
    import pandas as pd

    from perflab.dataloading.plots import workers_plot

    return workers_plot(pd.DataFrame(d["rows"]),
                        title=f"Data wait per step vs num_workers (IO {num(d['io_ms'])} ms/sample, "
                              f"compute {num(d['compute_ms'])} ms/step, {d['cores']} cores)")


FIGURES = {"matmul": _fig_matmul, "mamf": _fig_mamf, "memory": _fig_memory, "waves": _fig_waves,
           "collectives": _fig_collectives, "numa": _fig_numa, "dataloader": _fig_dataloader}


def _extra(name: str, d: dict[str, Any]) -> str:
    """A part's own table, beside its figures."""
    if name == "device":
        dev = d.get("device", {})
        rows = [[k.removesuffix("_bytes").replace("_", " "),
                 nbytes(v) if k.endswith("_bytes") and isinstance(v, (int, float)) else v]
                for k, v in dev.items() if v not in (None, "", [])]
        rows += [[k, v] for k, v in (("torch version", d.get("torch_version")), ("CUDA", d.get("cuda_version") or "–"),
                                     ("python version", d.get("python"))) if k not in {r[0] for r in rows}]
        rows.append(["matmul dtypes", ", ".join(d.get("supported_dtypes", []))])
        peaks = [[k, num(v) if v is not None else "–"] for k, v in (d.get("peak_tflops") or {}).items()]
        return (_table(["", ""], rows) + f"<p class='note'>peak TFLOP/s ({_e(d.get('peak_source'))}):</p>"
                + _table(["dtype", "peak TFLOP/s"], peaks))
    if name == "matmul":
        return _table(["dtype", "size", "TFLOP/s", "median time", "spread", "of peak"],
                      [[r["dtype"], f"{r['n']}³", num(r["tflops"]), num(r["median_s"] * 1e3) + " ms",
                        percent(r.get("spread"), 2), percent(r.get("peak_fraction"))] for r in d["rows"]])
    if name == "collectives":
        return _table(["size S", "time", "algbw GB/s", "busbw GB/s"],
                      [[nbytes(r["bytes"]), num(r["seconds"] * 1e6) + " µs", num(r["algbw_gbps"]), num(r["busbw_gbps"])]
                       for r in d["rows"]])
    if name == "numa":
        t = d["topology"]
        rows = [[f"node {n['id']}", f"{len(n['cpus'])} CPUs", nbytes(n.get("memory_bytes"))] for n in t["nodes"]]
        rows += [[f"GPU{g['index']} ({g['bus_id']})", f"node {g['numa_node']}", f"{len(g['cpus'])} local CPUs"]
                 for g in t["gpus"]]
        return _table(["", "", ""], rows) + f"<p class='note'>distances: {_e(t['distances'])}</p>"
    if name == "dataloader":
        return _table(["workers", "step", "data wait", "model wait", "wait share"],
                      [[r["workers"], num(r["step_s"] * 1e3) + " ms", num(r["data_wait_s"] * 1e3) + " ms",
                        num(r["predicted_wait_s"] * 1e3) + " ms", percent(r["wait_fraction"])] for r in d["rows"]])
    return ""


def _section(name: str, part: PartEntry) -> str:
    ok = part.ok
    badge = "<span class='badge ok'>measured</span>" if ok else "<span class='badge bad'>failed</span>"
    if part.resumed:
        badge += f"<span class='badge resumed'>from an earlier run ({_e(part.measured)})</span>"
    out = [f"<section id='{_e(name)}' class='{'part' if ok else 'failed-part'}'><h2>{_e(part.title)}{badge}</h2>"]
    if not ok:
        out.append(f"<p>This part failed and the others went on: <code>{_e(part.reason)}</code></p></section>")
        return "".join(out)
    out.append(f"<p class='summary'>{_e(part.summary or '')}</p>")
    if part.figures:
        out.append(_table(["figure", "value", "unit"], [[f.label, num(f.value), f.unit] for f in part.figures]))
    data = part.data or {}
    try:
        out.append(_extra(name, data))
    except Exception as e:  # a table that cannot be drawn never hides the rest
        out.append(f"<p class='note'>table not drawn: {_e(e)}</p>")
    if name in FIGURES:
        try:
            out.append(f"<img alt='{_e(part.title)}' src='{_png(FIGURES[name](data))}'>")
        except Exception as e:
            out.append(f"<p class='note'>figure not drawn: {_e(type(e).__name__)}: {_e(e)}</p>")
    for n in part.notes or []:
        out.append(f"<p class='note'>{_e(n)}</p>")
    out.append(f"<p class='note'>measured in {num(part.wall_s)} s, {_e(part.measured)}</p></section>")
    return "".join(out)


def render(doc: Report) -> str:
    """The whole page for one report."""
    parts = doc.parts
    failed = [n for n, p in parts.items() if not p.ok]
    title = f"perflab report: {doc.device_name} on {doc.host if doc.host is not None else '?'}"
    head = (f"<p class='meta'>{_e(doc.created)} · perflab {_e(doc.perflab_version)} · "
            f"{'quick mode (small sizes)' if doc.quick else 'full sizes'} · {len(parts) - len(failed)} of "
            f"{len(parts)} parts measured" + (f" · failed: {_e(', '.join(failed))}" if failed else "")
            + (" · interrupted: run again to resume" if doc.interrupted else "") + "</p>")
    nav = "<nav>" + "".join(f"<a href='#{_e(n)}'>{_e(n)}</a>" for n in parts) + "</nav>"
    body = "".join(_section(n, p) for n, p in parts.items())
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{_e(title)}</h1>{head}{nav}{body}</body></html>\n")
