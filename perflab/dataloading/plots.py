"""Figures for lesson 07. Each figure says which curve is the model, which is this
machine's measurement, and which is published data from elsewhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _fig(ncols: int = 1, size=(8, 4)):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=size, squeeze=False)
    return fig, list(axes[0])


def workers_plot(frame, title: str = ""):
    """Measured median data wait per step over num_workers, the model's prediction overlaid."""
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    fig, (ax,) = _fig()
    ax.plot(ok["workers"], ok["data_wait_s"] * 1e3, "o-", label="measured here (median wait per step)")
    ax.plot(ok["workers"], ok["predicted_wait_s"] * 1e3, "s--", label="model (simulated schedule)")
    ax.plot(ok["workers"], ok["step_s"] * 1e3, ":", color="grey", label="measured step time")
    if "disturbed" in ok and ok["disturbed"].any():
        bad = ok[ok["disturbed"].astype(bool)]
        ax.plot(bad["workers"], bad["data_wait_s"] * 1e3, "x", color="tab:red", markersize=10,
                label="disturbed: other programs ran meanwhile")
    ax.set_xlabel("num_workers")
    ax.set_ylabel("milliseconds per step")
    ax.set_xticks(list(ok["workers"]))
    ax.set_title(title or "Data wait vs num_workers")
    ax.legend()
    fig.tight_layout()
    return fig


def published_workers_plot(df):
    """The published num_workers benchmark (average time per iteration, s), drawn as published."""
    fig, (ax,) = _fig(size=(6, 3.2))
    ax.bar(df["num_workers"].astype(str), df["avg_time_s"], color="tab:grey")
    ax.set_xlabel("num_workers")
    ax.set_ylabel("average time, s (published)")
    ax.set_title("Published: a slow-transform benchmark (not measured here)", fontsize=9)
    fig.tight_layout()
    return fig


def shuffle_cost_plot(rows: Sequence[dict] | Any):
    """Seconds and peak memory (MB) to generate a whole permutation, per method and N (log-log);
    `rows`: `shuffle.measure_costs`' result or its rows as dicts."""
    import pandas as pd

    df = pd.DataFrame(getattr(rows, "records", rows))
    fig, (a1, a2) = _fig(2, size=(10, 3.8))
    for kind, g in df.groupby("kind"):
        a1.loglog(g["n"], g["seconds"], "o-", label=kind)
        a2.loglog(g["n"], g["peak_bytes"] / 1e6, "o-", label=kind)
    a1.set_xlabel("N items")
    a1.set_ylabel("seconds (measured here)")
    a2.set_xlabel("N items")
    a2.set_ylabel("peak MB (tracemalloc; + the int64 tensor for randperm)")
    a1.legend()
    a2.legend()
    fig.tight_layout()
    return fig
