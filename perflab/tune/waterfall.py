"""Where a step's time went, and how each rung of the ladder moved it.

    >>> trace = profile_steps(one_step, device)          # one step under torch.profiler (a Chrome trace dict)
    >>> breakdown_of_trace(trace, step_s)                # seconds per category, summing to step_s
    >>> table(rows)                                      # one row per rung: seconds per category, copyable

Categories (`CATEGORIES`), from one profiled step (lesson 09's diagnosis, `perflab.profiling.diagnose`):

* **optimizer**: the span of torch's `Optimizer.step` range (all its ops);
* **data wait**: idle time the diagnosis gives to the DataLoader fetch (the step's `data` range);
* **host sync**: idle time it gives to a synchronising op (`item`, a device-to-host copy);
* **launch overhead**: idle time between runs of tiny ops (the host issuing ops more slowly than
  the device runs them; on a CPU trace, the tiny ops themselves);
* **compute**: the rest of the step (the device working, and host work no category names).

Before the diagnosis the optimizer's ops are replaced by one op over its span, so no second is
counted twice (on a GPU the span is the host's: its kernels may run a little later).
Shares of the profiled step are turned into seconds of the *measured* step (the profiler slows
small ops down; its shares are used, not its absolute times).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from perflab.core.jsonable import JSON

CATEGORIES = ("compute", "data_wait", "host_sync", "launch_overhead", "optimizer")
LABELS = {"compute": "compute", "data_wait": "data wait", "host_sync": "host sync",
          "launch_overhead": "launch overhead", "optimizer": "optimizer"}


def profile_steps(step: Callable[[], Any], device, steps: int = 1) -> JSON:
    """Run `step()` `steps` times under torch.profiler (one ProfilerStep range each); the Chrome trace
    it exports, as read back from that file. The profiler's own log lines stay off stderr
    (`perflab.core.stderr`)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from perflab.core.stderr import quiet_stderr

    acts = [ProfilerActivity.CPU]
    if getattr(device, "type", str(device)) == "cuda":
        acts.append(ProfilerActivity.CUDA)
    fd, path = tempfile.mkstemp(suffix=".json", prefix="perflab-tune-")
    os.close(fd)
    try:
        with quiet_stderr(), profile(activities=acts) as prof:
            for _ in range(steps):
                step()
                if getattr(device, "type", "") == "cuda":
                    torch.cuda.synchronize(device)
                prof.step()
        prof.export_chrome_trace(path)
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


def _optimizer_spans(raw: dict[str, Any]) -> list[tuple[float, float, Any]]:
    return [(float(e["ts"]), float(e["ts"]) + float(e["dur"]), e.get("tid")) for e in raw["traceEvents"]
            if isinstance(e, dict) and e.get("ph") == "X" and str(e.get("name", "")).startswith("Optimizer.step#")]


def breakdown_of_trace(raw: dict[str, Any], step_s: float | None = None) -> dict[str, float]:
    """Seconds per category (CATEGORIES) of one profiled step, scaled so they sum to `step_s`
    (default: the profiled step's own length)."""
    from perflab.profiling.diagnose import diagnose
    from perflab.profiling.trace import load

    t = load(raw)
    total = sum(s.dur for s in t.steps) / max(len(t.steps), 1)
    spans = _optimizer_spans(raw)
    opt_us = sum(b - a for a, b, tid in spans if tid == t.main_tid) / max(len(t.steps), 1)
    # the trace without the optimizer's events (host ops inside its span), diagnosed for the rest
    inside = [(a, b) for a, b, tid in spans if tid == t.main_tid]

    def keep(e) -> bool:
        if not (isinstance(e, dict) and e.get("ph") == "X" and e.get("tid") == t.main_tid):
            return True
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            return True
        ts = float(e.get("ts", 0.0))
        return not any(a <= ts < b for a, b in inside)

    pid = next((e.get("pid") for e in raw["traceEvents"] if isinstance(e, dict) and e.get("tid") == t.main_tid), 0)
    # one long op over each optimizer span: to the diagnosis the device is busy there, so no gap in it
    # is counted again as launch overhead or idle
    spans_ev = [{"ph": "X", "cat": "cpu_op", "name": "optimizer span", "ts": a, "dur": b - a, "pid": pid,
                 "tid": t.main_tid} for a, b in inside]
    rest = {**raw, "traceEvents": [e for e in raw["traceEvents"] if keep(e)] + spans_ev}
    d = diagnose(rest)
    by = {c.cause: c.seconds for c in d.causes}
    shares = {"optimizer": opt_us * 1e-6 / total if total else 0.0}
    for key, cause in (("data_wait", "data_wait"), ("host_sync", "host_sync"), ("launch_overhead", "launch_bound")):
        shares[key] = by.get(cause, 0.0) / total if total else 0.0
    named = sum(shares.values())
    if named > 1.0:  # cannot happen with disjoint spans; guard against a malformed trace
        shares = {k: v / named for k, v in shares.items()}
        named = 1.0
    shares["compute"] = 1.0 - named
    scale = total if step_s is None else step_s
    return {k: shares[k] * scale for k in CATEGORIES}


def breakdown_table(row: dict[str, Any]):
    """One rung's waterfall (a ladder row, `perflab.tune.runner`): each category's seconds per step and
    its share of the step."""
    import pandas as pd

    from perflab.core.readout import percent, seconds

    bd = row.get("breakdown") or {}
    return pd.DataFrame([{"category": LABELS[c], "per step": seconds(bd.get(c, 0.0)),
                          "share": percent(bd.get(c, 0.0) / row["step_s"])} for c in CATEGORIES])


def largest(row: dict[str, Any]) -> str:
    """The label of the category that took the most of a rung's step."""
    bd = row.get("breakdown") or {}
    return LABELS[max(CATEGORIES, key=lambda c: bd.get(c, 0.0))]


def table(rows: Sequence[dict[str, Any]]):
    """The waterfall as a DataFrame: one row per rung, milliseconds per category, step time, the
    change against the previous row and the lesson that explains the rung (three significant digits:
    what a step timed on a shared machine supports)."""
    import pandas as pd

    from perflab.core.readout import num

    out = []
    prev = None
    for r in rows:
        bd = r.get("breakdown") or {}
        rec: dict[str, Any] = {"rung": r["rung"]}
        for c in CATEGORIES:
            rec[f"{LABELS[c]} (ms)"] = num(bd.get(c, 0.0) * 1e3) if bd else None
        rec["step (ms)"] = num(r["step_s"] * 1e3)
        rec["Δ step (ms)"] = None if prev is None else num((r["step_s"] - prev["step_s"]) * 1e3)
        rec["verdict"] = r.get("verdict") or ("adopted" if r.get("adopted") else
                                              ("n/a" if not r.get("applicable", True) else "kept out"))
        rec["lesson"] = r.get("lesson", "")
        out.append(rec)
        if r.get("adopted") or prev is None:
            prev = r
    return pd.DataFrame(out)


def moved(base: dict[str, Any], row: dict[str, Any]) -> dict[str, float]:
    """Seconds each category moved from the baseline to `row` (negative: saved)."""
    a, b = base.get("breakdown") or {}, row.get("breakdown") or {}
    return {c: b.get(c, 0.0) - a.get(c, 0.0) for c in CATEGORIES}


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The waterfall table as Markdown, to paste into a report."""
    df = table(rows)
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for rec in df.to_dict("records"):
        lines.append("| " + " | ".join("–" if rec[c] is None or rec[c] != rec[c] else str(rec[c]) for c in cols) + " |")
    return "\n".join(lines)
