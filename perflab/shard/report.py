"""What a sharding run found: one row per rank beside its prediction, the checks, and per strategy
the details a lesson shows (`perflab.shard.run` builds them from the ranks' reports).

    >>> rep.rows                         # one dict per rank (ROW_KEYS and their predicted_* twins)
    >>> rep.checks                       # each claim: Check(name, measured, predicted, tolerance, ok, note)
    >>> rep.details                      # FsdpDetails, TpDetails or PpDetails
    >>> rep.table(), print(rep.text())   # for a person; rep.as_dict() for `perflab shard --json`
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, to_json
from perflab.core.readout import nbytes, num
from perflab.shard.formulas import FsdpComm, Replay, TpComm

# the replayed bubble, averaged over stages, against (p−1)/(m+p−1) (`perflab.shard.run` states every tolerance)
TOL_BUBBLE = 0.05
ROW_KEYS = ("rank", "param_bytes", "grad_bytes", "optim_bytes", "peak_bytes", "comm_calls", "comm_bytes", "idle_s")
ROW_LABELS = {"param_bytes": "parameters", "grad_bytes": "gradients", "optim_bytes": "optimizer states",
              "peak_bytes": "peak memory", "comm_calls": "collective calls", "comm_bytes": "collective traffic",
              "idle_s": "idle time"}


@dataclass
class Check:
    """One claim held against a measurement: what was measured, what was predicted, the tolerance
    (as words), whether it holds, and a note (the largest difference, the named terms, ...)."""

    name: str
    measured: Any
    predicted: Any
    tolerance: str
    ok: bool
    note: str = ""

    def __post_init__(self) -> None:
        self.ok = bool(self.ok)

    def line(self) -> str:
        """'✓ name: measured M, predicted P (tolerance T); note'."""
        return (f"{'✓' if self.ok else '✗'} {self.name}: measured {self.measured}, predicted {self.predicted} "
                f"(tolerance {self.tolerance})" + (f"; {self.note}" if self.note else ""))


# ----------------------------------------------------------------------------- FSDP
@dataclass
class PeakHolds:
    """What one rank's measured peak holds of FSDP's own, by part (bytes): unsharded parameters
    (gathered and kept, and all-gather buffers in flight: the prefetched unit) and unsharded
    gradients (and reduce-scatter buffers). `param_units` counts the parameters in units of the
    average of the two units `formulas.fsdp_peak_unsharded` predicts (2.0: both), `grad_units` the
    gradients in units of the largest block (1.0: one)."""

    parts: dict[str, int]
    unsharded_params_bytes: int
    unsharded_grads_bytes: int
    param_units: float
    grad_units: float
    predicted_params_bytes: int
    predicted_grads_bytes: int


@dataclass
class FsdpRankDetail:
    """One rank's FSDP memory beyond the rows: the named differences from lesson 03's estimate, the
    peak's parts by kind of tensor, the tracker's peak and where the row's peak came from, the peak
    minus the prediction by kind (`peak_remainder`), and FSDP's own share of the peak."""

    named: dict[str, float]
    peak_parts: dict[str, int]
    tracker_peak_bytes: int
    peak_source: str
    peak_remainder: dict[str, int]
    peak_holds: PeakHolds | None = None


@dataclass
class FsdpDetails:
    """FSDP's details: each rank's memory, the collectives formula, the units it sharded, lesson 03's
    components of the prediction, and the losses (averaged over ranks) beside the 1-rank run's."""

    ranks: dict[int, FsdpRankDetail]
    comm_formula: FsdpComm | None = None
    units: list[str] = field(default_factory=list)
    estimate_components: dict[str, int] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)
    reference_losses: list[float] = field(default_factory=list)

    def describe(self) -> str:
        """The collectives per step by formula (units, all-gathers, reduce-scatters, their bytes), and the
        losses beside the 1-rank run's."""
        comm, units = self.comm_formula, len(self.units)
        lines = []
        if comm is not None:
            lines.append(f"{units} units ({units - 1} blocks + root): all-gathers 2·{units - 1} + 1 = "
                         f"{comm.all_gather.calls}, {comm.all_gather.bytes / 1e6:.3f} MB; reduce-scatters "
                         f"{comm.reduce_scatter.calls}, {comm.reduce_scatter.bytes / 1e6:.3f} MB (full padded buffers; "
                         "on a ring each rank sends (n−1)/n of each)")
        lines.append(f"losses, FSDP     : {[round(x, 5) for x in self.losses]}")
        lines.append(f"losses, one rank : {[round(x, 5) for x in self.reference_losses]}")
        return "\n".join(lines)


# ----------------------------------------------------------------------------- tensor and pipeline parallelism
@dataclass
class TpDetails:
    """Tensor parallelism's details: the formula, and the collectives rank 0 counted in each block's
    forward and backward ({collective: {"calls", "bytes"}} per block)."""

    comm_formula: TpComm
    per_block: list[dict[str, dict[str, int]]]
    per_block_backward: list[dict[str, dict[str, int]]]


@dataclass
class PipelineRun:
    """One pipeline step of p stages and m micro-batches: the formula (p−1)/(m+p−1), the measured
    timeline replayed with instant hand-offs (and its bubble averaged over stages), the wall time
    and wall-clock bubble (mean, and per stage), and each stage's events (kind, start s, end s)."""

    p: int
    m: int
    formula: float
    replayed: Replay
    replayed_bubble: float
    wall_s: float
    wall_bubble: float
    measured_bubble: list[float]
    events: list[list[tuple[str, float, float]]]


@dataclass
class PpDetails:
    """The pipeline's details: one run per micro-batch count, and the schedule (gpipe or 1f1b)."""

    runs: list[PipelineRun]
    schedule: str

    def table(self, tolerance: float = TOL_BUBBLE):
        """One row per micro-batch count: the bubble by formula, replayed and by the wall clock, as a share of
        the step ((p−1)/(m+p−1)) and, in Megatron-LM's convention, of the ideal time ((p−1)/m, and the replay
        in it: b = f/(1 − f)), and whether the replay is within `tolerance` of the formula (the check's,
        `TOL_BUBBLE`)."""
        import pandas as pd

        from perflab.shard.formulas import bubble_ratio, ratio_from_step_fraction

        return pd.DataFrame([{"m": r.m, "(p−1)/(m+p−1)": num(r.formula), "replayed": num(r.replayed_bubble),
                              "wall clock": num(r.wall_bubble), "(p−1)/m": num(bubble_ratio(r.p, r.m)),
                              "replayed, of ideal time": num(ratio_from_step_fraction(r.replayed_bubble)),
                              f"within ±{tolerance:g}": abs(r.replayed_bubble - r.formula) <= tolerance}
                             for r in self.runs])

    def run(self, m: int) -> PipelineRun:
        """The run with m micro-batches."""
        for r in self.runs:
            if r.m == m:
                return r
        raise InputError(f"no run with m = {m}: the runs have m = {', '.join(str(r.m) for r in self.runs)}")


Details = FsdpDetails | TpDetails | PpDetails


# ----------------------------------------------------------------------------- the report
@dataclass
class ShardReport:
    """One strategy on `nproc` ranks: its options, one row per rank (the measured ROW_KEYS beside
    their `predicted_*` twins; a pipeline adds `m`, `bubble`, `replayed_bubble`, `stalls_s`,
    `predicted_bubble`, `max_in_flight`), the checks, the strategy's details, and the launch."""

    strategy: str
    nproc: int
    options: dict[str, Any]
    rows: list[dict[str, Any]]
    checks: list[Check]
    details: Details | None = None
    launch: Any = None  # perflab.distributed.outcome.LaunchResult

    @property
    def ok(self) -> bool:
        return bool(self.launch is None or self.launch.ok) and all(c.ok for c in self.checks)

    def as_dict(self) -> JSON:
        """What `perflab shard --json` prints."""
        return {"strategy": self.strategy, "nproc": self.nproc, "options": self.options, "ok": self.ok,
                "backend": self.launch.backend.name if self.launch else None,
                "seconds": round(self.launch.seconds, 2) if self.launch else None,
                "rows": self.rows, "checks": to_json(self.checks), "details": to_json(self.details or {})}

    def table(self):
        """The rows for a person: one row per quantity with its unit, one column per rank (and
        micro-batch count, for a pipeline), and the prediction beside them; a quantity nobody
        predicted says so, and a quantity this strategy does not measure is left out."""
        import pandas as pd

        cols = [k for k in ROW_KEYS if k != "rank"]
        keyed = [(f"rank {r['rank']}" + (f", m = {r['m']}" if "m" in r else ""), r) for r in self.rows]
        out = []
        for c in cols:
            if all(r.get(c) is None for _, r in keyed):
                continue
            rec: dict[str, Any] = {"quantity": ROW_LABELS.get(c, c)}
            for name, r in keyed:
                rec[name] = fmt_cell(c, r.get(c)) if r.get(c) is not None else "not measured"
            preds = [r.get("predicted_" + c) for _, r in keyed]
            shown = list(dict.fromkeys(fmt_cell(c, v) for v in preds if v is not None))
            rec["predicted"] = " / ".join(shown) if shown else "not predicted"
            out.append(rec)
        return pd.DataFrame(out).set_index("quantity") if out else pd.DataFrame()

    def peak_table(self, rank: int = 0):
        """FSDP's peak on one rank, explained: lesson 03's prediction, each named difference between
        it and the measurement (with its sign: + the measurement holds more), and the measured peak."""
        import pandas as pd

        if not isinstance(self.details, FsdpDetails):
            raise InputError(f"the peak table is FSDP's: this is {self.strategy}")
        d = self.details.ranks[rank]
        pred = sum(self.details.estimate_components.values())
        rows = [{"part": "lesson 03's prediction (states + activations)", "bytes": nbytes(pred)}]
        for k, v in d.peak_remainder.items():
            rows.append({"part": f"difference: {k}", "bytes": ("+" if v >= 0 else "−") + nbytes(abs(v))})
        rows.append({"part": "= measured peak (FSDPMemTracker)", "bytes": nbytes(d.tracker_peak_bytes)})
        return pd.DataFrame(rows).set_index("part")

    def states_bytes(self, rank: int = 0) -> int:
        """FSDP's model states on one rank: parameters + gradients + optimizer states, measured."""
        row = next(r for r in self.rows if r["rank"] == rank)
        return int(row["param_bytes"] + row["grad_bytes"] + row["optim_bytes"])

    def checks_text(self, values: bool = False) -> str:
        """One line per check: ✓ or ✗, its name and its note (`values`: the measured and predicted values
        and the tolerance too, `Check.line`)."""
        return "\n".join(c.line() if values else ("✓ " if c.ok else "✗ ") + c.name + (f": {c.note}" if c.note else "")
                         for c in self.checks)

    def holds_table(self):
        """FSDP's own share of each rank's peak, by part (MB): unsharded parameters (gathered and kept, and
        the all-gather buffers of the unit arriving) and unsharded gradients (and the reduce-scatter buffers),
        counted in units of what `formulas.fsdp_peak_unsharded` predicts (two of parameters, one of gradients)."""
        import pandas as pd

        if not isinstance(self.details, FsdpDetails):
            raise InputError(f"the peak's parts are FSDP's: this is {self.strategy}")
        rows = []
        for rank, d in sorted(self.details.ranks.items()):
            h = d.peak_holds
            rows.append({"rank": rank, "peak (MB)": num(d.tracker_peak_bytes / 1e6),
                         **({part: num(v / 1e6) for part, v in h.parts.items()} if h else {}),
                         "parameter units (of 2)": num(h.param_units) if h else "–",
                         "gradient units": num(h.grad_units) if h else "–"})
        return pd.DataFrame(rows)

    def held_table(self):
        """The pipeline's activations per stage and micro-batch count: the micro-batches held at once, the
        bytes the autograd graph saved, GPipe's formula, and what 1F1B would hold (at most p − s micro-batches
        on stage s)."""
        import pandas as pd

        from perflab.shard.formulas import in_flight_microbatches

        if not isinstance(self.details, PpDetails):
            raise InputError(f"the micro-batches held are the pipeline's: this is {self.strategy}")
        return pd.DataFrame([{"m": r["m"], "stage": r["rank"], "held (micro-batches)": r["max_in_flight"],
                              "held (bytes)": nbytes(r["peak_bytes"]), "GPipe formula": nbytes(r["predicted_peak_bytes"]),
                              "1F1B would hold": nbytes(in_flight_microbatches("1f1b", self.nproc, r["m"], r["rank"])
                                                        * r["peak_bytes"] // max(r["max_in_flight"], 1))}
                             for r in self.rows])

    def text(self) -> str:
        head = f"{self.strategy} on {self.nproc} ranks"
        if self.launch is not None:
            head += f" ({self.launch.backend.name}, {self.launch.seconds:.1f} s)"
        cols = [k for k in ROW_KEYS if k != "rank"]
        extra = ["m"] if self.strategy == "pp" else []
        lines = [head, "  ".join(["rank"] + extra + [f"{c} (pred)" for c in cols])]
        for r in self.rows:
            cells = [str(r["rank"])] + [str(r[e]) for e in extra]
            for c in cols:
                cells.append(f"{fmt_cell(c, r.get(c))} ({fmt_cell(c, r.get('predicted_' + c))})")
            lines.append("  ".join(cells))
        lines += [c.line() for c in self.checks]
        return "\n".join(lines)


def fmt_cell(col: str, v: Any) -> str:
    """One cell of a row as `table` and `text` print it: bytes with their unit, seconds, numbers."""
    if v is None:
        return "—"
    if col.endswith("_bytes"):
        return nbytes(v)
    if col == "idle_s":
        return f"{v:.3f} s"
    return num(v) if isinstance(v, float) else str(v)
