"""The measured data wait, typed: one `WorkerPoint` per worker count, with the machine's quietness.

    >>> sweep = measure([0, 2], batch=4, batches=16, io_ms=5, transform_ms=0, step=step)
    >>> sweep.table()          # milliseconds, shares in %, the model beside, and the machine while it ran
    >>> sweep.wait_ms(2)       # the median data wait with 2 workers, ms; None when that point was disturbed
    >>> print(sweep.verdict()) # each point against the model, or why a point says nothing

`loader.sweep_workers` measures and records the rows (`perflab.core.results`); `WorkerSweep.from_sweep`
reads them typed. Every point carries what else ran on the machine while it was measured
(`perflab.core.quietness`): a point measured while other programs used the cores says
"inconclusive: the machine was busy (...)" instead of comparing its wait with the model
(`perflab.core.verdicts.busy_text`), in the lesson's table, in `perflab dataloader`'s readout and JSON.

Section 6's experiments (persistent workers, prefetch depth) and section 9's faults return typed
results here too, each with its `table()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perflab.core.jsonable import JSON
from perflab.core.quietness import Quietness, as_quietness
from perflab.core.readout import num, percent
from perflab.core.verdicts import busy_text
from perflab.dataloading.loader import within_tolerance
from perflab.dataloading.verdict import plural


def _ms(seconds: float | None) -> str:
    """Milliseconds to the two digits a shared machine's timing supports."""
    return "–" if seconds is None else f"{num(seconds * 1e3, 2)} ms"


@dataclass(frozen=True)
class WorkerPoint:
    """One worker count, measured (seconds), with the model's prediction and the machine's quietness;
    `status` is 'ok' or why the point failed (`reason`)."""

    workers: int
    status: str = "ok"
    reason: str = ""
    step_s: float | None = None
    data_wait_s: float | None = None  # median time blocked in next() per step, first step left out
    predicted_wait_s: float | None = None  # the model's median wait, first step left out
    first_wait_s: float | None = None  # the first step's wait: starting the workers included
    compute_share: float | None = None  # share of the loop's wall time the step computed
    handover_s: float = 0.0  # one batch's handover from a worker (measured, given to the model)
    quietness: Quietness = as_quietness(None)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def disturbed(self) -> bool:
        return self.quietness.disturbed

    @property
    def wait_fraction(self) -> float | None:
        if self.data_wait_s is None or not self.step_s:
            return None
        return self.data_wait_s / self.step_s

    @property
    def within_tolerance(self) -> bool | None:
        """Whether the measured wait lies within the lesson's tolerance of the model (None: not measured)."""
        if self.data_wait_s is None or self.predicted_wait_s is None or self.step_s is None:
            return None
        return within_tolerance(self.data_wait_s, self.predicted_wait_s, self.step_s)

    def line(self) -> str:
        """This point against the model, in one line; a disturbed point draws no conclusion."""
        if not self.ok:
            return f"{plural(self.workers, 'worker')}: {self.status} ({self.reason})"
        head = f"{plural(self.workers, 'worker')}: measured {_ms(self.data_wait_s)}, model {_ms(self.predicted_wait_s)}"
        if self.disturbed:
            return f"{head} → {busy_text(self.quietness.cause)}"
        return f"{head} → {'within' if self.within_tolerance else 'outside'} the tolerance (2 ms + 15% of the step)"

    def to_json(self) -> JSON:
        """What `perflab dataloader --json` prints for this point (its keys as they were, plus the machine)."""
        if not self.ok:
            return {"workers": self.workers, "status": self.status, "reason": self.reason}
        return {"workers": self.workers, "step_s": self.step_s, "data_wait_s": self.data_wait_s,
                "wait_fraction": self.wait_fraction, "predicted_wait_s": self.predicted_wait_s,
                "first_wait_s": self.first_wait_s, "compute_share": self.compute_share,
                "disturbed": self.disturbed, "quietness": self.quietness.to_json()}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> WorkerPoint:
        """A point from a recorded sweep row (`perflab.core.results`: params, status, metrics)."""
        workers = int((row.get("params") or {}).get("workers", row.get("workers", 0)))
        if row.get("status", "ok") != "ok":
            return cls(workers, str(row.get("status")), str(row.get("reason") or ""))

        def f(key: str) -> float | None:
            v = row.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        return cls(workers, "ok", "", f("step_s"), f("data_wait_s"), f("predicted_wait_s"), f("first_wait_s"),
                   f("compute_share"), f("handover_s") or 0.0, as_quietness(row.get("quietness")))


@dataclass(frozen=True)
class WorkerSweep:
    """Every worker count of one sweep, typed, and where its rows were recorded."""

    points: tuple[WorkerPoint, ...]
    summary: str = ""  # '4 measured, 0 already in …, 0 failed'

    @classmethod
    def from_sweep(cls, res: Any) -> WorkerSweep:
        """From `loader.sweep_workers`' result (a `perflab.core.results.SweepResult`)."""
        pts = sorted((WorkerPoint.from_row(r) for r in res.rows), key=lambda p: p.workers)
        return cls(tuple(pts), res.summary())

    def point(self, workers: int) -> WorkerPoint | None:
        return next((p for p in self.points if p.workers == workers), None)

    @property
    def ok_points(self) -> list[WorkerPoint]:
        return [p for p in self.points if p.ok]

    @property
    def disturbed(self) -> list[WorkerPoint]:
        return [p for p in self.points if p.ok and p.disturbed]

    @property
    def failed(self) -> int:
        return sum(not p.ok for p in self.points)

    @property
    def handover_s(self) -> float:
        """The handover of one batch from a worker, as this sweep measured it (seconds)."""
        return max((p.handover_s for p in self.ok_points), default=0.0)

    def wait_ms(self, workers: int) -> float | None:
        """The median data wait with `workers` workers (ms), or None when not measured or disturbed."""
        p = self.point(workers)
        if p is None or not p.ok or p.disturbed or p.data_wait_s is None:
            return None
        return p.data_wait_s * 1e3

    def table(self):
        """One row per worker count: milliseconds, shares in %, the model, and the machine meanwhile."""
        import pandas as pd

        rows = []
        for p in self.points:
            if not p.ok:
                rows.append({"workers": p.workers, "step": "–", "data wait": "–", "model wait": "–",
                             "wait, % of step": "–", "first step's wait": "–", "compute, % of wall": "–",
                             "machine": f"{p.status}: {p.reason}"})
                continue
            rows.append({"workers": p.workers, "step": _ms(p.step_s), "data wait": _ms(p.data_wait_s),
                         "model wait": _ms(p.predicted_wait_s), "wait, % of step": percent(p.wait_fraction, 2),
                         "first step's wait": _ms(p.first_wait_s), "compute, % of wall": percent(p.compute_share, 2),
                         "machine": p.quietness.line()})
        return pd.DataFrame(rows).set_index("workers")

    def verdict(self, fewer: int = 0, more: int = 2) -> str:
        """The waits with `fewer` and `more` workers side by side, then every point against the model.
        A disturbed point says "inconclusive: the machine was busy (…)" and takes no part in a comparison."""
        lines = []
        a, b = self.point(fewer), self.point(more)
        if a is not None and b is not None and a.ok and b.ok:
            if a.disturbed or b.disturbed:
                cause = "; ".join(f"{plural(p.workers, 'worker')}: {p.quietness.cause}" for p in (a, b) if p.disturbed)
                lines.append(f"data wait, {fewer} against {more} workers: {busy_text(cause)}")
            else:
                wa, wb = a.data_wait_s or 0.0, b.data_wait_s or 0.0
                lines.append(f"data wait: {_ms(wa)} with {fewer} workers, {_ms(wb)} with {more} "
                             f"({'more' if wb < wa / 2 else 'less'} than a halving)")
        lines += ["  " + p.line() for p in self.points]
        return "\n".join(lines)

    @property
    def frame(self):
        """The points as the plots read them: seconds, one row per worker count, `status` 'ok' or not."""
        import pandas as pd

        return pd.DataFrame([{"workers": p.workers, "status": p.status, "step_s": p.step_s, "data_wait_s": p.data_wait_s,
                              "predicted_wait_s": p.predicted_wait_s, "wait_fraction": p.wait_fraction,
                              "disturbed": p.disturbed} for p in self.points])

    def figure(self, title: str = ""):
        """Measured median wait against num_workers, the model beside, disturbed points marked."""
        from perflab.dataloading.plots import workers_plot

        return workers_plot(self.frame, title=title)


def measure(worker_counts: Sequence[int], *, batch: int, batches: int, io_ms: float, transform_ms: float, step: Any,
            timeout: float = 30.0, progress: bool = True) -> WorkerSweep:
    """Measure each worker count (a fresh DataLoader each, `loader.sweep_workers`) and read it typed."""
    from perflab.dataloading import loader

    if progress:
        print(f"measuring {len(worker_counts)} worker counts × {batches} batches (a fresh DataLoader each)…", flush=True)
    res = loader.sweep_workers(list(worker_counts), batch=batch, batches=batches, io_ms=io_ms, transform_ms=transform_ms,
                               step=step, timeout=timeout)
    return WorkerSweep.from_sweep(res)


# ----------------------------------------------------------------------------- section 6: epochs and prefetch
@dataclass(frozen=True)
class EpochPoint:
    persistent: bool
    epoch: int
    first_wait_s: float
    data_wait_s: float
    quietness: Quietness


@dataclass(frozen=True)
class EpochTable:
    """Two epochs with persistent_workers off, then on: the first step's wait and the median wait."""

    points: tuple[EpochPoint, ...]

    def table(self):
        import pandas as pd

        return pd.DataFrame([{"persistent_workers": p.persistent, "epoch": p.epoch,
                              "first step's wait": _ms(p.first_wait_s), "median wait": _ms(p.data_wait_s),
                              "machine": p.quietness.line()} for p in self.points])


def persistent_epochs(*, workers: int, batch: int, batches: int, io_ms: float, step: Any, epochs: int = 2) -> EpochTable:
    """`epochs` epochs each way (persistent_workers=False, then True), no transform work."""
    from perflab.dataloading import loader

    pts = []
    for persistent in (False, True):
        eps = loader.measure_loop(workers=workers, batch=batch, batches=batches, io_ms=io_ms, transform_ms=0, step=step,
                                  persistent=persistent, epochs=epochs)
        pts += [EpochPoint(persistent, i + 1, e.first_wait_s, e.data_wait_s, as_quietness(e.extra.get("quietness")))
                for i, e in enumerate(eps)]
    return EpochTable(tuple(pts))


@dataclass(frozen=True)
class PrefetchPoint:
    prefetch_factor: int
    batch: int
    data_wait_s: float
    model_wait_s: float
    quietness: Quietness


@dataclass(frozen=True)
class PrefetchTable:
    """One worker, each prefetch_factor × batch size: the measured and the model's median wait."""

    points: tuple[PrefetchPoint, ...]

    def table(self):
        import pandas as pd

        return pd.DataFrame([{"prefetch_factor": p.prefetch_factor, "batch": p.batch, "measured wait": _ms(p.data_wait_s),
                              "model's median wait": _ms(p.model_wait_s), "machine": p.quietness.line()}
                             for p in self.points])


def prefetch_depths(factors: Sequence[int], batch_sizes: Sequence[int], *, batches: int, io_ms: float, compute_ms: float,
                    step: Any, handover_s: float) -> PrefetchTable:
    """One worker at each prefetch_factor and batch size, beside the model with the measured handover."""
    from perflab.dataloading import loader, starvation

    pts = []
    for pf in factors:
        for b in batch_sizes:
            e = loader.measure_loop(workers=1, batch=b, batches=batches, io_ms=io_ms, transform_ms=0, step=step,
                                    prefetch_factor=pf)[0]
            p = starvation.predict(b, io_ms / 1e3, 0, compute_ms / 1e3, 1, batches, prefetch_factor=pf,
                                   overhead_s=handover_s)
            pts.append(PrefetchPoint(pf, b, e.data_wait_s, p.median_wait_s, as_quietness(e.extra.get("quietness"))))
    return PrefetchTable(tuple(pts))


# ----------------------------------------------------------------------------- section 9: faults
@dataclass(frozen=True)
class FaultDemo:
    """A worker that raised (its one-line message) and a sweep with a worker that hung."""

    raised: str
    hung: WorkerSweep


def fault_demo(device: Any) -> FaultDemo:
    """Plant a corrupt sample (sample 3, one worker) and a sample that sleeps past the loader's timeout."""
    from perflab.dataloading import compute, loader

    tiny = compute.calibrate(1, device, budget_s=0.02)
    raised = "no fault raised"
    try:
        loader.measure_loop(workers=1, batch=2, batches=3, io_ms=0, transform_ms=0, step=tiny, fail_at=3)
    except loader.LoaderFault as e:
        raised = str(e).splitlines()[0]
    hung = loader.sweep_workers([0, 1], batch=2, batches=3, io_ms=0, transform_ms=0, step=tiny, timeout=0.3,
                                hang_at=1, hang_s=1.0)
    return FaultDemo(raised, WorkerSweep.from_sweep(hung))
