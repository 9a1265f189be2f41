"""Lesson 12's figures: the bubble against m, FSDP's memory per rank, a pipeline's timeline."""

from __future__ import annotations

from typing import Any

from perflab.shard import formulas as F
from perflab.shard.report import PipelineRun

MB = 1e6


def bubble_figure(p: int, ms: list[int], measured: dict[int, list[PipelineRun]] | None = None,
                  title: str | None = None):
    """(p−1)/(m+p−1) against m for `p` stages; measured runs (`ShardReport.details.runs` by p) on top."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    top = max(ms + [r.m for runs in (measured or {}).values() for r in runs])
    grid = list(range(1, max(top, 2) + 1))
    stages = sorted({p, *(measured or {}).keys()})
    for q in stages:
        line, = ax.plot(grid, [F.bubble_fraction(q, m) for m in grid], label=f"(p−1)/(m+p−1), p = {q}")
        for r in (measured or {}).get(q, []):
            ax.plot(r.m, r.replayed_bubble, "o", color=line.get_color())
            ax.plot(r.m, r.wall_bubble, "x", color=line.get_color())
    if measured:
        ax.plot([], [], "ko", label="measured, hand-offs replayed as instant")
        ax.plot([], [], "kx", label="measured, wall clock")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("bubble: idle fraction of each stage")
    ax.set_ylim(0, 1)
    ax.set_title(title or "Pipeline bubble: predicted and measured")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fsdp_memory_figure(cfg, ns: list[int], measured: dict[int, list[dict[str, Any]]] | None = None):
    """Model-state bytes per rank under FSDP: lesson 03's prediction (bars) and measured ranks (dots)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    xs = list(range(len(ns)))
    bottoms = [0.0] * len(ns)
    for part, label in (("param", "parameters"), ("grad", "gradients"), ("optim", "AdamW states")):
        vals = [getattr(F.fsdp_memory(cfg, n).estimate, part) / MB for n in ns]
        ax.bar(xs, vals, bottom=bottoms, label=f"predicted {label}")
        bottoms = [b + v for b, v in zip(bottoms, vals, strict=True)]
    for i, n in enumerate(ns):
        for row in (measured or {}).get(n, []):
            ax.plot(i, (row["param_bytes"] + row["grad_bytes"] + row["optim_bytes"]) / MB, "kD")
    if measured:
        ax.plot([], [], "kD", label="measured, one dot per rank")
    ax.set_xticks(xs, [f"{n} rank{'s' if n > 1 else ''}" for n in ns])
    ax.set_ylabel("MB per rank")
    ax.set_title(f"FSDP (ZeRO-3) model states per rank, {cfg.name}, fp32 + AdamW")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def timeline_figure(run: PipelineRun, title: str = ""):
    """Each stage's forwards (light) and backwards (dark) on a shared time axis (one measured step)."""
    import matplotlib.pyplot as plt

    events = run.events
    fig, ax = plt.subplots(figsize=(7.2, 0.5 + 0.5 * len(events)))
    for s, evs in enumerate(events):
        for k, a, b in evs:
            ax.broken_barh([(a, b - a)], (s - 0.4, 0.8), color="tab:blue" if k == "F" else "tab:orange",
                           edgecolor="white")
    ax.set_yticks(range(len(events)), [f"stage {s}" for s in range(len(events))])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the step began")
    ax.set_title(title or f"m = {run.m}: forward (blue), backward (orange), idle (white)")
    fig.tight_layout()
    return fig


def explore(ranks: int, microbatches: int, measured_pp: dict[int, list[PipelineRun]] | None = None,
            measured_fsdp: dict[int, list[dict[str, Any]]] | None = None, cfg=None):
    """The slider's view: the bubble of `ranks` stages at `microbatches`, and FSDP's per-rank states."""
    from perflab.core.readout import nbytes, percent

    b = F.bubble_fraction(ranks, microbatches)
    lines = [f"{ranks} stages, {microbatches} micro-batches: bubble (p−1)/(m+p−1) = {percent(b)}"]
    figs = [bubble_figure(ranks, [1, 2, 4, 8, 16, 32, microbatches], measured_pp)]
    if cfg is not None:
        mem = F.fsdp_memory(cfg, ranks)
        total = mem.estimate.total
        lines.append(f"FSDP on {ranks} ranks: {nbytes(total)} of model states per rank ({cfg.name}, fp32 + AdamW)")
        figs.append(fsdp_memory_figure(cfg, sorted({1, 2, 4, ranks}), measured_fsdp))
    return ("\n".join(lines), *figs)
