"""Lesson 14's figure: the waterfall, where each configuration's step time goes, phase by phase."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perflab.hunt.report import Rerun

COLORS = {"data": "#4c72b0", "forward": "#55a868", "backward": "#8172b2", "clip": "#ccb974", "optimizer": "#c44e52",
          "other": "#937860"}


def waterfall(rows: Mapping[str, Mapping[str, float]], title: str = "where the step's time goes"):
    """Horizontal stacked bars: one per configuration, milliseconds per phase (`perflab.hunt.step.PHASES`)."""
    import matplotlib.pyplot as plt

    from perflab.hunt.step import PHASES

    names = list(rows)
    # tall enough for the legend's six rows beside the bars, never over them or the axis
    fig, ax = plt.subplots(figsize=(8, max(1.9, 0.8 + 0.5 * len(names))))
    left = [0.0] * len(names)
    for p in PHASES:
        widths = [rows[n].get(p, 0.0) * 1e3 for n in names]
        ax.barh(names, widths, left=left, color=COLORS[p], label=p)
        left = [a + b for a, b in zip(left, widths)]
    for i, total in enumerate(left):
        ax.text(total, i, f" {total:.3g} ms", va="center", fontsize=9)
    ax.set_xlim(0, max(left, default=0.0) * 1.18 or 1.0)  # room for the totals' labels inside the axis
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per optimizer step (mean of an epoch, median over rounds)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)  # outside the axis
    fig.tight_layout()
    return fig


def phases_of(timed: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """{label: phases} from `perflab.hunt.step.interleaved`'s result."""
    return {k: dict(t.phases) for k, t in timed.items()}


def before_after(res: Rerun, before: str, after: str) -> dict[str, dict[str, float]]:
    """`perflab.hunt.report.rerun`'s two timed steps as waterfall rows, named for the reader."""
    t = res.timed
    return {before: dict(t["before"].phases), after: dict(t["with your fixes"].phases)}
