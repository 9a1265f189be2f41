"""Lesson 15's figures and its panel: per-GPU memory by part against the GPU's, for several plans."""

from __future__ import annotations

from typing import Any

from perflab.plan.step import PARTS

COLORS = {"parameters": "#4c72b0", "gradients": "#dd8452", "optimizer state": "#55a868", "activations": "#c44e52",
          "temporaries": "#8172b3"}


def memory_figure(plans: dict[str, Any], title: str = "per-GPU memory at the peak, by part"):
    """Stacked bars, one per plan (label -> Plan), in GB, with each plan's usable memory marked. The axis
    spans the bars; a usable memory far beyond them is written at the axis' end instead of squeezing the
    bars to a sliver."""
    import matplotlib.pyplot as plt

    labels = list(plans)
    fig, ax = plt.subplots(figsize=(7.5, 0.8 + 0.55 * len(labels)))
    top = max(plans[k].peak_bytes for k in labels) / 1e9
    usable = [plans[k].usable_bytes / 1e9 for k in labels]
    right = max(top, *(u for u in usable if u <= 2 * top)) * 1.1 if any(u <= 2 * top for u in usable) else top * 1.25
    for i, label in enumerate(labels):
        left = 0.0
        for part in PARTS:
            v = plans[label].parts[part] / 1e9
            ax.barh(i, v, left=left, color=COLORS[part], label=part if i == 0 else None)
            left += v
        u = usable[i]
        if u <= right:
            ax.plot([u] * 2, [i - 0.4, i + 0.4], color="black", lw=2, label="usable" if i == 0 else None)
        else:
            ax.annotate(f"usable: {u:.3g} GB →", (right, i), xytext=(-4, 0), textcoords="offset points",
                        ha="right", va="center", fontsize=8)
    ax.set_xlim(0, right)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("GB (1e9 bytes) per GPU")
    ax.set_title(title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(labels) < 3 else -0.2), ncol=3, fontsize=8)
    fig.tight_layout()
    return fig


_PLANS: dict[tuple, Any] = {}


def cached_plan(build, *, gpu: str = "h100", gpus: int = 8, tp: int = 1, fsdp: bool = False, ac: str = "none",
                budget_gb: float | None = None, sp: bool = False):
    """`plan(...)` without suggestions, remembered for this `build` and layout: the panel moving back to a
    layout already planned (or to the one a lesson cell planned) plans nothing again."""
    from perflab.plan.run import plan

    key = (build, gpu, gpus, tp, fsdp, ac, budget_gb, sp)
    if key not in _PLANS:
        _PLANS[key] = plan(build, gpu=gpu, gpus=gpus, tp=tp, fsdp=fsdp, ac=ac, budget_gb=budget_gb, sp=sp,
                           suggest=False)
    return _PLANS[key]


def explore(gpus: int, tp: int, fsdp: str | bool, ac: str, *, build, gpu: str = "h100", budget_gb: float | None = None):
    """The panel's view: the plan of `build` for the controls' layout (`fsdp`: True or 'FSDP' shards, 'DDP'
    does not; tensor parallelism runs with sequence parallelism), as a line and the memory figure."""
    from perflab.core.readout import percent, seconds

    shard = fsdp is True or fsdp == "FSDP"
    p = cached_plan(build, gpu=gpu, gpus=gpus, tp=tp, fsdp=shard, ac=ac, budget_gb=budget_gb, sp=tp > 1)
    line = (f"{p.name} on {gpus} × {p.cluster.gpu_name}, tp {tp}{' with SP' if tp > 1 else ''}, dp {p.layout.dp}"
            f"{' FSDP' if shard else ' DDP'}, recompute {ac}: peak {p.peak_bytes / 1e9:.3g} GB per GPU "
            f"({'fits' if p.fits else 'does not fit'}), step {seconds(p.step.step_s)} of which "
            f"{seconds(p.step.exposed_s)} exposed communication, MFU {percent(p.mfu)} (estimate)")
    return line, memory_figure({"this layout": p})
