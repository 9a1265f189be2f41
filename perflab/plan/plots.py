"""Lesson 15's figures and its panel: per-GPU memory by part against the GPU's, for several plans."""

from __future__ import annotations

from typing import Any

from perflab.plan.step import PARTS

COLORS = {"parameters": "#4c72b0", "gradients": "#dd8452", "optimizer state": "#55a868", "activations": "#c44e52",
          "temporaries": "#8172b3"}


def memory_figure(plans: dict[str, Any], title: str = "per-GPU memory at the peak, by part"):
    """Stacked bars, one per plan (label -> Plan), in GB, with each plan's usable memory marked."""
    import matplotlib.pyplot as plt

    labels = list(plans)
    fig, ax = plt.subplots(figsize=(7.5, 0.6 + 0.55 * len(labels)))
    for i, label in enumerate(labels):
        left = 0.0
        for part in PARTS:
            v = plans[label].parts[part] / 1e9
            ax.barh(i, v, left=left, color=COLORS[part], label=part if i == 0 else None)
            left += v
        ax.plot([plans[label].usable_bytes / 1e9] * 2, [i - 0.4, i + 0.4], color="black", lw=2,
                label="usable" if i == 0 else None)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("GB (1e9 bytes) per GPU")
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


_PLANS: dict[tuple, Any] = {}


def cached_plan(build, *, gpu: str = "h100", gpus: int = 8, tp: int = 1, fsdp: bool = False, ac: str = "none",
                budget_gb: float | None = None):
    """`plan(...)` without suggestions, remembered for this `build` and layout: the panel moving back to a
    layout already planned (or to the one a lesson cell planned) plans nothing again."""
    from perflab.plan.run import plan

    key = (build, gpu, gpus, tp, fsdp, ac, budget_gb)
    if key not in _PLANS:
        _PLANS[key] = plan(build, gpu=gpu, gpus=gpus, tp=tp, fsdp=fsdp, ac=ac, budget_gb=budget_gb, suggest=False)
    return _PLANS[key]


def explore(build, gpus: int, tp: int, fsdp: bool, ac: str, gpu: str = "h100", budget_gb: float | None = None):
    """The panel's view: the plan of `build` for the controls' layout, as a line and the memory figure."""
    from perflab.core.readout import percent, seconds

    p = cached_plan(build, gpu=gpu, gpus=gpus, tp=tp, fsdp=fsdp, ac=ac, budget_gb=budget_gb)
    line = (f"{p.name} on {gpus} × {p.cluster.gpu_name}, tp {tp}, dp {p.layout.dp}{' FSDP' if fsdp else ''}, "
            f"recompute {ac}: peak {p.peak_bytes / 1e9:.3g} GB per GPU ({'fits' if p.fits else 'does not fit'}), "
            f"step {seconds(p.step.step_s)} of which {seconds(p.step.exposed_s)} exposed communication, "
            f"MFU bound {percent(p.mfu) if p.mfu is not None else 'unknown'}")
    return line, memory_figure({"this layout": p})
