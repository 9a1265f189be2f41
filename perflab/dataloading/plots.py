"""Figures and tables for lesson 07. Each figure says which curve is the model, which is this
machine's measurement, and which is published data from elsewhere."""

from __future__ import annotations

from collections.abc import Sequence


def _fig(ncols: int = 1, size=(8, 4)):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=size, squeeze=False)
    return fig, list(axes[0])


def wait_table(frame):
    """A person's table of a worker sweep: milliseconds, shares in %, failures with their reason."""
    import pandas as pd

    rows = []
    for _, r in frame.iterrows():
        if r.get("status", "ok") != "ok":
            rows.append({"workers": int(r["workers"]), "status": r["status"], "reason": r.get("reason", "")})
            continue
        rows.append({"workers": int(r["workers"]), "step ms": round(r["step_s"] * 1e3, 1),
                     "data wait ms": round(r["data_wait_s"] * 1e3, 1),
                     "model wait ms": round(r["predicted_wait_s"] * 1e3, 1),
                     "wait % of step": round(100 * r["wait_fraction"], 1),
                     "first step wait ms": round(r["first_wait_s"] * 1e3, 1),
                     "compute % of wall": round(100 * r["compute_share"], 1), "status": "ok"})
    return pd.DataFrame(rows)


def workers_plot(frame, title: str = ""):
    """Measured median data wait per step over num_workers, the model's prediction overlaid."""
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    fig, (ax,) = _fig()
    ax.plot(ok["workers"], ok["data_wait_s"] * 1e3, "o-", label="measured here (median wait per step)")
    ax.plot(ok["workers"], ok["predicted_wait_s"] * 1e3, "s--", label="model (simulated schedule)")
    ax.plot(ok["workers"], ok["step_s"] * 1e3, ":", color="grey", label="measured step time")
    ax.set_xlabel("num_workers")
    ax.set_ylabel("milliseconds per step")
    ax.set_xticks(list(ok["workers"]))
    ax.set_title(title or "Data wait vs num_workers")
    ax.legend()
    fig.tight_layout()
    return fig


def published_workers_plot(df):
    fig, (ax,) = _fig(size=(6, 3.2))
    ax.bar(df["num_workers"].astype(str), df["avg_time_s"], color="tab:grey")
    ax.set_xlabel("num_workers")
    ax.set_ylabel("average time, s (published)")
    ax.set_title("Published: a slow-transform benchmark (not measured here)", fontsize=9)
    fig.tight_layout()
    return fig


def shuffle_cost_plot(rows: Sequence[dict]):
    """Seconds and peak memory (MB) to generate a whole permutation, per method and N (log-log)."""
    import pandas as pd

    df = pd.DataFrame(rows)
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


def shuffle_table(rows: Sequence[dict]):
    import pandas as pd

    return pd.DataFrame([{"method": r["kind"], "N": f"{r['n']:.0e}", "seconds": round(r["seconds"], 3),
                          "peak MB": round(r["peak_bytes"] / 1e6, 2)} for r in rows])
