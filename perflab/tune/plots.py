"""Figures of lesson 11. Each function takes measured rows of the ladder and returns a Figure;
every axis says its unit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.rcParams.setdefault("figure.dpi", 100)

COLORS = {"compute": "tab:blue", "data_wait": "tab:orange", "host_sync": "tab:red",
          "launch_overhead": "tab:purple", "optimizer": "tab:green"}


def waterfall(rows: Sequence[dict[str, Any]], *, title: str = ""):
    """One horizontal bar per rung, split into the waterfall's categories (milliseconds per step),
    with the rung's speed-up against the baseline at its end; rungs not adopted are hatched,
    rungs that do not apply here are drawn pale."""
    import matplotlib.pyplot as plt

    from perflab.tune.waterfall import CATEGORIES, LABELS

    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.6))
    names = [r["rung"] for r in rows]
    ys = list(range(len(rows)))[::-1]
    for y, r in zip(ys, rows):
        bd = r.get("breakdown") or {c: (r["step_s"] if c == "compute" else 0.0) for c in CATEGORIES}
        left = 0.0
        pale = not r.get("applicable", True)
        hatch = None if (r.get("adopted") or r["rung"] == "baseline" or pale) else "//"
        for c in CATEGORIES:
            w = bd.get(c, 0.0) * 1e3
            ax.barh(y, w, left=left, color=COLORS[c], alpha=0.35 if pale else 0.9, hatch=hatch,
                    edgecolor="white", label=LABELS[c] if y == ys[0] else None)
            left += w
        ax.text(left, y, f"  {r['speedup_vs_baseline']:.2f}×", va="center", fontsize=9)
    ax.set_yticks(ys)
    ax.set_yticklabels(names)
    ax.set_xlabel("milliseconds per optimizer step (measured; split by the profiled step's shares)")
    ax.set_title(title or "where the step's time goes, rung by rung (hatched: not adopted; pale: not applicable)")
    ax.legend(loc="lower right", fontsize=8, ncol=len(CATEGORIES))
    ax.margins(x=0.12)
    fig.tight_layout()
    return fig
