"""Lesson 09's figures: a trace's timeline, where a step's time went, ETTR against the checkpoint interval."""

from __future__ import annotations

from perflab.profiling.diagnose import CAUSES, Diagnosis
from perflab.profiling.ops import lanes
from perflab.profiling.trace import load

COLORS = {"data_wait": "tab:orange", "host_sync": "tab:red", "launch_bound": "tab:purple", "communication": "tab:blue"}


def _tight(ax) -> None:
    """tight_layout on the figure of `ax`; an axes in a subfigure is left to its parent's layout."""
    from matplotlib.figure import Figure

    fig = ax.figure
    if isinstance(fig, Figure):
        fig.tight_layout()


def timeline(trace, *, title: str = "", ax=None, max_steps: int = 1):
    """The main thread's outermost ranges, DataLoader fetches and the device's ops, one lane each
    (the first `max_steps` profiled steps), in milliseconds from the first step's start."""
    import matplotlib.pyplot as plt

    t = load(trace)
    steps = t.steps[:max_steps]
    lo, hi = steps[0].start, steps[-1].end
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 2.4))
    ln = lanes(t)
    names = list(ln)
    for y, name in enumerate(reversed(names)):
        spans = [((s - lo) * 1e3, d * 1e3) for s, d, _ in ln[name] if s < hi and s + d > lo]
        color = {"main thread": "tab:gray", "DataLoader": "tab:orange", "device": "tab:green"}[name]
        ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=color)
    ax.set_yticks(range(len(names)), list(reversed(names)))
    ax.set_xlim(0, (hi - lo) * 1e3)
    ax.set_xlabel("ms from the step's start")
    dev = "GPU" if t.on_gpu else "device = main-thread compute ops (CPU)"
    ax.set_title(title or f"timeline ({dev})")
    _tight(ax)
    return ax


def breakdown(diagnoses: dict[str, Diagnosis], *, ax=None, threshold: float | None = None):
    """One stacked bar per trace: device busy, each cause's share, unattributed idle."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3))
    labels = list(diagnoses)
    for i, key in enumerate(labels):
        d = diagnoses[key]
        left = d.device_busy
        ax.barh(i, left, color="tab:green", label="device busy" if i == 0 else None)
        by = {c.cause: c.share for c in d.causes}
        for c in CAUSES:
            if by.get(c):
                ax.barh(i, by[c], left=left, color=COLORS[c], label=c if c not in ax.get_legend_handles_labels()[1] else None)
                left += by[c]
        rest = max(1 - left, 0)
        ax.barh(i, rest, left=left, color="lightgray", label="unattributed" if i == 0 else None)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the step")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=6, fontsize=8, frameon=False)
    _tight(ax)
    return ax


def ettr_curve(curve, *, optimal=None, young=None, ax=None, title: str = "", first_order=None):
    """ETTR against the checkpoint interval (minutes), with the optimum (the curve's peak) and Young's
    interval marked; `first_order`, the first-order model's curve, drawn beside it when given."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3))
    xs, ys = zip(*curve)
    ax.plot(xs, [100 * y for y in ys], color="tab:blue", label="exact (Daly 2006)")
    if first_order:
        fx, fy = zip(*first_order)
        ax.plot(fx, [100 * y for y in fy], color="tab:orange", ls="-.", label="first order (Young 1974)")
    if optimal:
        ax.axvline(optimal, color="tab:red", ls="--", label=f"optimum {optimal:.3g} min")
    if young:
        ax.axvline(young, color="tab:gray", ls=":", label=f"Young {young:.3g} min")
    ax.set_xscale("log")
    ax.set_xlabel("checkpoint interval (min)")
    ax.set_ylabel("ETTR (%)")
    ax.set_title(title)
    ax.legend()
    _tight(ax)
    return ax


def ettr_panel(gpus: int, mtbf_khours: float, ckpt_s: float, restart_min: float):
    """What lesson 09's ETTR panel draws: a month-long job's ETTR against the checkpoint interval, exact and
    first order, with Young's and the optimal interval marked (MTBF per GPU in thousands of hours, δ in
    seconds, R in minutes)."""
    from perflab.core.readout import percent
    from perflab.profiling import ettr

    e = ettr.ettr(24 * 30, gpus, mtbf_khours * 1000, ckpt_s / 60, restart_min)
    curve = ettr.curve_around_optimum(gpus, mtbf_khours * 1000, ckpt_s / 60, restart_min)
    first = ettr.sweep_intervals(gpus, mtbf_khours * 1000, ckpt_s / 60, restart_min, [t for t, _ in curve],
                                 model="first_order")
    ax = ettr_curve(curve, optimal=e.optimal_interval_min, young=e.young_interval_min, first_order=first,
                    title=f"{gpus} GPUs: ETTR {percent(e.ettr)} at the best interval")
    return ax.figure
