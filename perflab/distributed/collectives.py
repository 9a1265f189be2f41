"""Every collective primitive verified on N ranks, the lesson's tables and figures, and the ring.

    >>> rep = run_all(4)                 # launch perflab.distributed.workers.collectives on 4 ranks
    >>> rep.summary                      # one row per primitive: ok on every rank, native or its equivalent
    >>> rep.reports[0].primitives["broadcast"].demo   # what rank 0 held before and after

The primitives themselves, what each rank must hold after them and how they are checked inside a
rank live in `perflab.distributed.primitives`; the ring all-reduce in `perflab.distributed.ring`.
Their public names are importable from here too, as the lesson and the lab use them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perflab.core.jsonable import JSON, to_json
from perflab.distributed.primitives import (
    DESCRIPTIONS,
    EQUIVALENTS,
    PRIMITIVES,
    BarrierTiming,
    PrimitiveCheck,
    PrimitiveRun,
    barrier_ok,
    barrier_with_slow_ranks,
    call_equivalent,
    call_native,
    check_all,
    expected,
    is_unsupported,
    rank_input,
    run_primitive,
)
from perflab.distributed.ring import (
    RingCheck,
    RingSend,
    RingStep,
    check_ring,
    chunk_sizes,
    fmt_values,
    naive_root_bytes,
    plot_traffic,
    ring_all_reduce,
    ring_bytes_formula,
    ring_bytes_sent,
    ring_schedule,
    ring_steps,
    simulate_ring,
)

__all__ = ["PRIMITIVES", "DESCRIPTIONS", "EQUIVALENTS", "BarrierTiming", "PrimitiveCheck", "PrimitiveRun", "barrier_ok",
           "barrier_with_slow_ranks", "call_equivalent", "call_native", "check_all", "expected", "is_unsupported",
           "rank_input", "run_primitive", "RingCheck", "RingSend", "RingStep", "check_ring", "chunk_sizes",
           "naive_root_bytes", "plot_traffic", "ring_all_reduce", "ring_bytes_formula", "ring_bytes_sent",
           "ring_schedule", "ring_steps", "simulate_ring", "RankReport", "CollectivesRun", "run_all", "summarize",
           "demo_table", "demo_frame", "predictions", "plot_barrier"]


# ----------------------------------------------------------------------------- what one rank reported
@dataclass
class RankReport:
    """What one rank of perflab.distributed.workers.collectives reported: every primitive it checked,
    its wait at the barrier with slow ranks, its ring all-reduce, and the addresses it listened on."""

    rank: int
    world_size: int
    local_rank: int
    node: int
    backend: str
    device: str
    primitives: dict[str, PrimitiveCheck] = field(default_factory=dict)
    barrier_timing: BarrierTiming | None = None
    ring: RingCheck | None = None
    listening: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RankReport:
        """The rank's result file (`perflab.distributed.workers.collectives.body`), typed."""
        barrier, ring = d.get("barrier_timing"), d.get("ring")
        return cls(int(d["rank"]), int(d["world_size"]), int(d["local_rank"]), int(d["node"]), str(d["backend"]),
                   str(d["device"]), {p: PrimitiveCheck.from_json(e) for p, e in (d.get("primitives") or {}).items()},
                   BarrierTiming.from_json(barrier) if barrier else None, RingCheck.from_json(ring) if ring else None,
                   list(d.get("listening") or []))


def _report(r: RankReport | Mapping[str, Any] | None) -> RankReport | None:
    return RankReport.from_json(r) if isinstance(r, Mapping) else r


# ----------------------------------------------------------------------------- summaries (launcher side)
def summarize(reports: Sequence[RankReport | Mapping[str, Any] | None]):
    """One row per primitive over all ranks: ok on every rank, native or via its equivalent."""
    import pandas as pd

    typed = [_report(r) for r in reports]
    rows = []
    n = len(typed)
    for p in PRIMITIVES:
        entries = [r.primitives[p] for r in typed if r is not None and p in r.primitives]
        if not entries:
            continue
        native = all(e.native for e in entries)
        rows.append({"primitive": p, "ok": len(entries) == n and all(bool(e.ok) for e in entries),
                     "native": native, "equivalent_ok": all(bool(e.equivalent_ok) for e in entries),
                     "what it does": DESCRIPTIONS[p],
                     "equivalent": EQUIVALENTS[p],
                     "note": "" if native else f"not in this backend ({entries[0].native_error}): ran the equivalent"})
    return pd.DataFrame(rows)


def demo_table(reports: Sequence[RankReport | Mapping[str, Any] | None], primitive: str):
    """Per rank: its buffer before, after, and what it must be, for one primitive's demo."""
    import pandas as pd

    rows = []
    for rank, r in enumerate(_report(x) for x in reports):
        if r is None:
            continue
        d = r.primitives[primitive].demo
        rows.append({"rank": rank, "before": fmt_values(d.before), "after": fmt_values(d.after),
                     "expected": "(unspecified)" if d.expected is None else fmt_values(d.expected), "ok": d.ok})
    return pd.DataFrame(rows).set_index("rank")


# ----------------------------------------------------------------------------- one call: launch and verify
@dataclass
class CollectivesRun:
    """Every primitive verified on n ranks: the launch, each rank's report, and the summaries."""

    launch: Any  # perflab.distributed.outcome.LaunchResult
    slow_s: float

    @property
    def results(self) -> list[Any]:
        """What each rank wrote to its result file (JSON), indexed by rank; `reports` reads them typed."""
        return self.launch.results

    @property
    def reports(self) -> list[RankReport | None]:
        """Each rank's report, typed (None where a rank reported nothing), indexed by rank."""
        return [_report(r) if r else None for r in self.results]

    @property
    def summary(self):
        df = summarize(self.reports)
        timing = self.barrier_rows()
        if len(df) and timing:
            ok = barrier_ok(timing, self.slow_s)
            df.loc[df["primitive"] == "barrier", "ok"] = bool(df.loc[df["primitive"] == "barrier", "ok"].all() and ok)
        return df

    def barrier_rows(self) -> list[BarrierTiming]:
        return [r.barrier_timing for r in self.reports if r is not None and r.barrier_timing is not None]

    def ring_rows(self) -> list[tuple[int, RingCheck]]:
        """(rank, its ring check) for every rank that reported one."""
        return [(i, r.ring) for i, r in enumerate(self.reports) if r is not None and r.ring is not None]

    def ring_table(self):
        """The ring checks as a table, one row per rank (index: rank)."""
        import pandas as pd

        return pd.DataFrame([{"rank": i, **to_json(c)} for i, c in self.ring_rows()]).set_index("rank")

    @property
    def ring_ok(self) -> bool | None:
        rows = self.ring_rows()
        if not rows:
            return None
        return all(c.ok and c.bytes_sent == c.bytes_exact for _, c in rows) and len(rows) == self.launch.world_size

    @property
    def ok(self) -> bool:
        s = self.summary
        return bool(self.launch.ok and len(s) == len(PRIMITIVES) and s["ok"].all() and self.ring_ok is not False)

    # ------------------------------------------------------------------ what the lesson shows
    def table(self):
        """The summary for a person: each primitive, whether every rank holds what it must, natively or
        through its equivalent, and what it does."""
        s = self.summary
        if not len(s):
            import pandas as pd

            return pd.DataFrame(columns=["primitive", "every rank right", "native in this backend",
                                         "equivalent right too", "what it does", "its equivalent"]).set_index("primitive")
        yes = {True: "yes", False: "no"}
        out = s[["primitive", "ok", "native", "equivalent_ok", "what it does", "equivalent"]].copy()
        for col in ("ok", "native", "equivalent_ok"):
            out[col] = [yes[bool(v)] for v in out[col]]
        out.columns = ["primitive", "every rank right", "native in this backend", "equivalent right too", "what it does",
                       "its equivalent"]
        return out.set_index("primitive")

    def verdict(self) -> str:
        """One line: whether every primitive checked out on every rank (the report above says where not)."""
        n, backend = self.launch.world_size, self.launch.backend.name
        if self.ok:
            return f"every primitive checked out on {n} ranks ({backend}), and the ring all-reduce with them"
        return f"not every primitive checked out on {n} ranks ({backend}): see the report above"

    def native_line(self) -> str:
        """Which primitives this backend lacks (their equivalents ran instead), or that it lacks none."""
        import torch

        s = self.summary
        backend, version = self.launch.backend.name, torch.__version__
        missing = [r for r in s.to_dict("records") if not r["native"]] if len(s) else []
        if missing:
            return (f"{backend} in torch {version} lacks: "
                    + "; ".join(f"{r['primitive']} (ran its equivalent: {r['equivalent']})" for r in missing))
        return (f"{backend} in torch {version} has every primitive natively; each equivalent above was run and "
                "checked too.")

    def longest_wait(self) -> BarrierTiming | None:
        """The rank that waited longest at the barrier with slow ranks."""
        return max(self.barrier_rows(), key=lambda r: r.waited_s, default=None)

    def barrier_table(self):
        """Per rank: the work before the barrier, when it arrived and left, and how long it waited."""
        import pandas as pd

        from perflab.core.readout import seconds

        return pd.DataFrame([{"rank": r.rank, "work": seconds(r.work_s), "arrived": seconds(r.arrive_s),
                              "left": seconds(r.leave_s), "waited": seconds(r.waited_s)}
                             for r in sorted(self.barrier_rows(), key=lambda r: r.rank)]).set_index("rank")

    def ring_view(self):
        """Per rank: the ring all-reduce's size, its error against dist.all_reduce, its sends and bytes
        against the formula 2(N−1)K/N × 4 bytes."""
        import pandas as pd

        from perflab.core.readout import num

        return pd.DataFrame([{"rank": i, "elements": f"{c.numel:,}", "largest relative error": num(c.max_rel_error, 2),
                              "sends": c.sends, "bytes sent": f"{c.bytes_sent:,}",
                              "bytes by the formula": f"{round(c.bytes_formula):,}"}
                             for i, c in self.ring_rows()]).set_index("rank")

    def traffic_figure(self):
        """Lesson 06's figure of ring against root traffic, with this job's measured bytes on it."""
        rows = self.ring_rows()
        if not rows:
            return None
        return plot_traffic(rows[0][1].numel, measured={self.launch.world_size: float(max(c.bytes_sent for _, c in rows))})

    def as_dict(self) -> JSON:
        """What `perflab collectives --json` prints."""
        s = self.summary
        out = {"ok": self.ok, "nproc": self.launch.world_size, "backend": self.launch.backend.name,
               "device": self.launch.backend.device, "backend_reason": self.launch.backend.reason,
               "seconds": round(self.launch.seconds, 3), "message": self.launch.message,
               "primitives": [{"primitive": r["primitive"], "ok": bool(r["ok"]), "native": bool(r["native"]),
                               "equivalent": r["equivalent"], "equivalent_ok": bool(r["equivalent_ok"]),
                               "note": r["note"]} for r in s.to_dict("records")] if len(s) else []}
        timing = self.barrier_rows()
        if timing:
            out["barrier_with_slow_ranks"] = {"delay_s": self.slow_s, "ok": barrier_ok(timing, self.slow_s),
                                              "ranks": to_json(timing)}
        ring = self.ring_rows()
        if ring:
            out["ring_all_reduce"] = {"ok": self.ring_ok, "ranks": [{"rank": i, **to_json(c)} for i, c in ring]}
        if not self.launch.ok:
            out["ranks"] = [r.as_dict() for r in self.launch.ranks]
        return out


def run_all(nproc: int = 4, *, backend: str | None = None, timeout: float = 120.0, check_k: int = 4096,
            slow_s: float = 0.2, ring_numel: int = 4096, nnodes: int = 1) -> CollectivesRun:
    """Launch perflab.distributed.workers.collectives on nproc ranks and gather the verdicts."""
    from perflab.core.validate import positive_int
    from perflab.distributed.torchrun import launch

    check_k = positive_int("check_k", check_k, maximum=2**24)
    ring_numel = positive_int("ring_numel", ring_numel, maximum=2**26)
    if not 0 <= slow_s <= 10:
        from perflab.core.errors import InputError

        raise InputError(f"slow_s must be between 0 and 10 seconds (got {slow_s})")
    res = launch("perflab.distributed.workers.collectives", nproc,
                 ["--check-k", check_k, "--slow-s", slow_s, "--ring-numel", ring_numel],
                 nnodes=nnodes, timeout=timeout, backend=backend)
    return CollectivesRun(res, slow_s)


# ----------------------------------------------------------------------------- tables and figures for the lesson
def predictions(n: int, k: int = 2, root: int = 0):
    """What every rank must hold after each primitive (closed forms), before anything runs."""
    import pandas as pd

    rows = []
    for p in PRIMITIVES[:-1]:
        for r in range(n):
            want = expected(p, r, n, k, root=root)
            rows.append({"primitive": p, "rank": r, "holds before": fmt_values(rank_input(p, r, n, k, root=root).tolist()),
                         "must hold after": "(unspecified)" if want is None else fmt_values(want.tolist())})
    return pd.DataFrame(rows).set_index(["primitive", "rank"])


def demo_frame(reports: Sequence[RankReport | Mapping[str, Any] | None]):
    """Every primitive's demo on every rank: before, after, expected, ok (rows: primitive × rank)."""
    import pandas as pd

    typed = [_report(r) for r in reports]
    frames = []
    for p in PRIMITIVES[:-1]:
        t = demo_table(typed, p).reset_index()
        t.insert(0, "primitive", p)
        frames.append(t)
    return pd.concat(frames).set_index(["primitive", "rank"])


def plot_barrier(rows: list[BarrierTiming], *, title: str = ""):
    """Per rank: its work, then its wait at the barrier (s); everyone leaves with the slowest."""
    import matplotlib.pyplot as plt

    rows = sorted(rows, key=lambda r: r.rank)
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * len(rows) + 1.2))
    ranks = [f"rank {r.rank}" for r in rows]
    ax.barh(ranks, [r.arrive_s for r in rows], color="tab:blue", label="working")
    ax.barh(ranks, [r.waited_s for r in rows], left=[r.arrive_s for r in rows], color="tab:gray",
            label="waiting in dist.barrier()")
    ax.axvline(max(r.arrive_s for r in rows), color="tab:red", linestyle=":", label="the slowest rank arrives")
    ax.invert_yaxis()
    ax.set_xlabel("time since the start (s)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig

