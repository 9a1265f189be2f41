"""The job audit (`perflab audit --trace DIR`, `perflab.audit.trace.audit_traces`) as a typed report: one
row per rank, the stragglers, the waits in collectives and the MFU, read by attribute by its table
(`table`: every figure with its unit in its column's name, for a terminal or a notebook's DataFrame) and
its terminal report (`render`). JSON is made once, at the edge (`JobReport.to_json`: exactly JOB_FIELDS,
each rank's row RANK_FIELDS).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from perflab.audit.hta import IDLE_KINDS, SHARES, StepFigures
from perflab.audit.rank_trace import steps_text
from perflab.audit.stragglers import CollectiveWaits, Stragglers
from perflab.core.jsonable import JSON, to_json

# the stable fields of the job's JSON (`--json`), and of each rank's row in it
JOB_FIELDS = ("folder", "world_size", "ranks_found", "steps", "on_gpu", "ranks", "stragglers", "collectives",
              "kernel_wait_us", "mfu", "notes")
RANK_FIELDS = ("rank", "file", "device", "on_gpu", "steps", "step_s", "step_s_median", "compute_s_median",
               "exposed_comm_s", "comm_s", "window", "window_s", "seconds", "shares", "non_compute_share",
               "idle_split", "idle_split_s", "idle_by_stream_s")


@dataclass(frozen=True)
class RankFigures:
    """One rank's row: step times, HTA's shares over its window, the idle split, communication per step."""

    rank: int
    file: str
    device: str | None  # the GPU its deviceProperties name
    on_gpu: bool
    steps: list[int]
    step_s: dict[int, float]  # step → host ProfilerStep length
    step_s_median: float
    compute_s_median: float
    exposed_comm_s: dict[int, float]
    comm_s: dict[int, float]
    window: str  # which span the shares are of, in words
    window_s: float
    seconds: dict[str, float]  # share (SHARES) → seconds of the window
    shares: dict[str, float | None]  # share → fraction of the window (None: a window of no length)
    non_compute_share: float | None
    idle_split: dict[str, float | None] | None  # idle kind (IDLE_KINDS) → fraction of the idle time; None on a CPU
    idle_split_s: dict[str, float] | None
    idle_by_stream_s: dict[str, dict[str, float]]
    per_step: dict[int, StepFigures] = field(default_factory=dict)  # not in the JSON

    JSON_SKIP = ("per_step",)


@dataclass(frozen=True)
class JobMfu:
    """The job's MFU: model FLOPs per step (all ranks together) at the dense peak of the GPU the traces name."""

    flops_per_step: float
    six_n_flops_per_step: float | None
    dtype: str
    step_s: float  # the median over steps of the slowest rank's step
    gpus: int
    peak_tflops: float | None = None
    mfu: float | None = None
    mfu_6n: float | None = None
    peak_source: str = ""  # the datasheet, or why the peak is unknown
    suspect: str | None = None  # why no MFU is given though the peak is known (above 100 %); not in the JSON

    JSON_SKIP = ("suspect",)


@dataclass
class JobReport:
    """The job audit (module docstring); `to_json()` gives exactly JOB_FIELDS."""

    folder: str
    world_size: int | None
    ranks_found: int
    steps: list[int]
    on_gpu: bool
    ranks: list[RankFigures]
    stragglers: Stragglers
    collectives: CollectiveWaits
    kernel_wait_us: float
    mfu: JobMfu | None
    notes: list[str]

    def to_json(self) -> JSON:
        return {name: to_json(getattr(self, name)) for name in JOB_FIELDS}

    @property
    def json(self) -> JSON:
        """`to_json()`, for what reads the job audit as a mapping."""
        return self.to_json()

    def summary(self) -> str:
        return render(self)

    def table(self):
        """One row per rank (`table`), as a notebook's DataFrame: the columns with a figure for some rank
        (a CPU trace has no idle split, a job without matched collectives no waits), indexed by rank."""
        import pandas as pd

        rows = table(self)
        keep = [c for c in rows[0] if c == "rank" or any(r[c] != "—" for r in rows)] if rows else []
        return pd.DataFrame([{c: r[c] for c in keep} for r in rows]).set_index("rank")

    def __str__(self) -> str:
        return self.summary()


IDLE_COLUMNS = {"host_wait": "host-wait", "kernel_wait": "kernel-wait", "other": "other-wait"}


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x * 1e3:.2f}"


def table(job: JobReport) -> list[dict[str, str]]:
    """One row per rank, every figure formatted with its unit in the column's name (for a terminal or a
    notebook's DataFrame): step time, the shares, the idle split, exposed communication and waits caused."""
    held = job.collectives.held_up_others_s
    out = []
    for r in job.ranks:
        sp = r.idle_split or {}
        exp = statistics.mean(r.exposed_comm_s.values()) if r.exposed_comm_s else None
        row = {"rank": str(r.rank), "step ms": _ms(r.step_s_median)}
        row.update({f"{'comm' if k == 'communication' else k} %": _pct(r.shares[k]) for k in SHARES})
        row.update({f"{IDLE_COLUMNS[k]} %": _pct(sp.get(k)) for k in IDLE_KINDS})
        row["exposed comm ms/step"] = _ms(exp)
        row["held others up ms/step"] = _ms(held.get(r.rank) if job.collectives.matched else None)
        out.append(row)
    return out


def render(job: JobReport) -> str:
    """The terminal report: one row per rank, then stragglers, waits and MFU."""
    rows = job.ranks
    head = (f"Job audit of {job.folder}: {job.ranks_found} rank(s)"
            + (f" of {job.world_size}" if job.world_size else "")
            + f", {len(job.steps)} step(s) ({steps_text(dict.fromkeys(job.steps, (0.0, 0.0)))})"
            + ("" if job.on_gpu else ", CPU traces"))
    rows_text = table(job)
    cols = list(rows_text[0])
    table_ = [list(t.values()) for t in rows_text]
    widths = [max(len(c), *(len(t[i]) for t in table_)) for i, c in enumerate(cols)]
    lines = [head, "", "  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(t, widths)) for t in table_]
    lines.append("")
    lines.append("Shares of each rank's time over " + rows[0].window + "; idle split: shares of the idle time "
                 f"(HTA's idle-time breakdown, streams added, kernel wait under {job.kernel_wait_us} µs)."
                 if job.on_gpu else "Shares of each rank's profiled steps; no idle split on a CPU trace "
                 "(HTA defines it on GPU kernels).")
    st = job.stragglers
    spread = "" if st.step_spread is None else f" (ranks' step times spread {100 * st.step_spread:.1f} % of the median)"
    lines.append(f"Stragglers: {st.verdict}. Slowest step: rank {st.slowest_rank}{spread}. Rule: {st.rule}.")
    c = job.collectives
    if c.matched:
        lines.append(f"Collectives matched across ranks: {c.matched} ({c.unmatched} unmatched); 'held others up' "
                     "is the time the other ranks waited in them for this rank to arrive (the ranks' clocks read as one).")
    elif len(rows) > 1:
        lines.append("Collectives matched across ranks: none (point-to-point transfers are not matched; a collective "
                     "is matched only where every rank ran as many of it in a step), so no wait is booked.")
    m = job.mfu
    if m:
        if m.mfu is None:
            lines.append(f"MFU: {f'not shown: {m.suspect}' if m.suspect else m.peak_source}.")
        else:
            six = f", {100 * m.mfu_6n:.1f} % by 6N" if m.mfu_6n else ""
            lines.append(f"MFU: {100 * m.mfu:.1f} % (counted FLOPs{six}) at a {_ms(m.step_s)} ms step on "
                         f"{m.gpus} GPU(s), peak {m.peak_tflops:g} TFLOP/s ({m.peak_source}).")
    lines += [f"Note: {n}" for n in job.notes]
    return "\n".join(lines)
