"""ETTR: the share of a job's wall time that trains, given failures, checkpoints and restarts.

    >>> e = ettr(hours=24 * 30, gpus=16384, mtbf_hours=50_000, ckpt_minutes=2, restart_minutes=10)
    >>> e.ettr, e.interval_min, e.optimal_interval_min, e.ettr_first_order

Symbols: δ, the time to write one (blocking) checkpoint; M, the job's mean time between failures
(failures arrive at random, Poisson, at rate gpus / MTBF_per_GPU, so M = MTBF_per_GPU / gpus);
R, the restart time from a failure to training again; τ, the training time between checkpoints.

**The model used (exact under those assumptions; Daly 2006, the exponential model).** Work runs in segments of
τ of training then δ of checkpoint. A failure can strike anywhere, also during a checkpoint or a
restart, and costs the restart plus the segment's lost progress. The expected wall time of one
segment is M·e^{R/M}·(e^{(τ+δ)/M} − 1), so

    ETTR(τ) = τ / (M · e^{R/M} · (e^{(τ+δ)/M} − 1))

and the best τ is the argmax of that curve, found numerically (`optimal_interval`): the interval
the report recommends is the peak of the curve it shows.

**The first-order model (Young 1974), kept beside it.** Each failure costs R plus half a cycle:
ETTR ≈ (1 − (R + (τ + δ)/2) / M) · τ / (τ + δ), whose optimum is about Young's √(2δM). It is
pessimistic once δ is a sizeable part of M (δ = 30 min, R = 20 min, M = 293 min: 0.543 against
the exact 0.573; a Monte Carlo run of the same job, `monte_carlo`, agrees with the exact one).
Daly's closed-form higher-order estimate of the optimum (eq. 37) is reported too.

Sources (in `data/published_ettr.json`): J. W. Young, "A first order approximation to the optimum
checkpoint interval", CACM 17(9), 1974; J. T. Daly, "A higher order estimate of the optimum
checkpoint interval for restart dumps", FGCS 22(3), 2006. Published ETTRs of real runs are in
`published()`; they are what a team reported, not this model's output.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, to_json

DATA = Path(__file__).parent / "data" / "published_ettr.json"


def _pos(name: str, v: float, allow_zero: bool = False) -> float:
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number (got {v!r})") from None
    if math.isnan(v) or math.isinf(v) or v < 0 or (v == 0 and not allow_zero):
        raise InputError(f"{name} must be {'≥ 0' if allow_zero else '> 0'} and finite (got {v:g})")
    return v


def job_mtbf_hours(mtbf_hours_per_gpu: float, gpus: int) -> float:
    """M = per-GPU MTBF / GPUs (independent failures: the first of N failures comes N times sooner)."""
    return _pos("mtbf_hours", mtbf_hours_per_gpu) / _pos("gpus", gpus)


def young_interval(ckpt_cost: float, mtbf: float) -> float:
    """Young (1974): τ = √(2δM), in the units of δ and M."""
    return math.sqrt(2 * _pos("ckpt_cost", ckpt_cost) * _pos("mtbf", mtbf))


def daly_interval(ckpt_cost: float, mtbf: float) -> float:
    """Daly (2006), eq. 37: √(2δM)·(1 + ⅓√(δ/2M) + (1/9)(δ/2M)) − δ when δ < 2M, else M."""
    d, m = _pos("ckpt_cost", ckpt_cost), _pos("mtbf", mtbf)
    if d >= 2 * m:
        return m
    x = d / (2 * m)
    return math.sqrt(2 * d * m) * (1 + math.sqrt(x) / 3 + x / 9) - d


def ettr_first_order(interval: float, ckpt_cost: float, restart: float, mtbf: float) -> float:
    """The first-order ETTR (module docstring); all four in the same unit."""
    tau, d = _pos("interval", interval), _pos("ckpt_cost", ckpt_cost, allow_zero=True)
    r, m = _pos("restart", restart, allow_zero=True), _pos("mtbf", mtbf)
    return max(0.0, 1 - (r + (tau + d) / 2) / m) * tau / (tau + d)


ettr_fraction = ettr_first_order  # the name older code uses


def ettr_exact(interval: float, ckpt_cost: float, restart: float, mtbf: float) -> float:
    """The expected ETTR under Poisson failures (Daly 2006, the exponential model; module docstring); all four in
    the same unit. Failures during checkpoints and restarts are counted."""
    tau, d = _pos("interval", interval), _pos("ckpt_cost", ckpt_cost, allow_zero=True)
    r, m = _pos("restart", restart, allow_zero=True), _pos("mtbf", mtbf)
    x, y = (tau + d) / m, r / m
    if x > 700 or y > 700:  # e^x overflows: the job essentially never finishes a segment
        return 0.0
    return tau / (m * math.exp(y) * math.expm1(x))


MODELS = {"exact": ettr_exact, "first_order": ettr_first_order}


def optimal_interval(ckpt_cost: float, restart: float, mtbf: float, model: str = "exact") -> float:
    """The τ that maximises `model`'s ETTR (same unit as the arguments). For the exact model the
    peak solves 1 − e^{−(τ+δ)/M} = τ/M (set the derivative to 0), found by bisection on (0, M);
    for the first-order one, golden-section search (its curve has one peak)."""
    d, m = _pos("ckpt_cost", ckpt_cost, allow_zero=True), _pos("mtbf", mtbf)
    _pos("restart", restart, allow_zero=True)
    if model == "exact":
        lo, hi = 0.0, m  # g(0) = 1 − e^{−δ/M} ≥ 0 and g(M) < 0
        for _ in range(200):
            mid = (lo + hi) / 2
            if -math.expm1(-(mid + d) / m) - mid / m > 0:
                lo = mid
            else:
                hi = mid
        return max((lo + hi) / 2, 1e-12 * m)
    if model != "first_order":
        raise InputError(f"model must be one of {', '.join(MODELS)} (got {model!r})")
    f = MODELS[model]
    a, b = 1e-9 * m, 2 * m
    g = (math.sqrt(5) - 1) / 2
    c, e = b - g * (b - a), a + g * (b - a)
    for _ in range(200):
        if f(c, d, restart, m) >= f(e, d, restart, m):
            b, e = e, c
            c = b - g * (b - a)
        else:
            a, c = c, e
            e = a + g * (b - a)
    return (a + b) / 2


def monte_carlo(interval: float, ckpt_cost: float, restart: float, mtbf: float, *, work: float | None = None,
                seed: int = 0) -> float:
    """ETTR of one simulated job: `work` of training (default 20 000 intervals) in segments of τ + δ,
    failures drawn from an exponential distribution of mean M that strike anywhere, also during
    checkpoints and restarts. A check of `ettr_exact` with no formula in it."""
    import random

    tau, d = _pos("interval", interval), _pos("ckpt_cost", ckpt_cost, allow_zero=True)
    r, m = _pos("restart", restart, allow_zero=True), _pos("mtbf", mtbf)
    rng = random.Random(seed)
    total = work if work is not None else 20_000 * tau
    done = wall = 0.0
    next_fail = rng.expovariate(1 / m)
    restarting = False
    while done < total - 1e-9:
        need = r if restarting else min(tau, total - done) + d
        if next_fail >= need:  # the segment (or the restart) completes
            wall += need
            next_fail -= need
            if restarting:
                restarting = False
            else:
                done += min(tau, total - done)
        else:  # a failure: the time since the last checkpoint (or the restart so far) is lost
            wall += next_fail
            next_fail = rng.expovariate(1 / m)
            restarting = True
    return total / wall


@dataclass
class Ettr:
    hours: float
    gpus: int
    mtbf_hours_per_gpu: float
    job_mtbf_hours: float
    expected_failures: float
    ckpt_minutes: float
    restart_minutes: float
    interval_min: float
    interval_source: str
    optimal_interval_min: float  # the peak of the exact ETTR curve
    daly_interval_min: float  # Daly's closed-form estimate (eq. 37)
    young_interval_min: float
    ettr: float  # the exact model at interval_min
    ettr_at_optimum: float
    ettr_first_order: float  # the first-order model at interval_min, for comparison
    lost_hours: float
    model: str = "exact (Poisson failures, Daly 2006)"

    def as_dict(self) -> JSON:
        """The figures, as `perflab ettr --json` prints them."""
        return to_json(self)

    def describe(self) -> str:
        from perflab.core.readout import num, percent

        return (f"{self.gpus} GPUs × {num(self.hours)} h, per-GPU MTBF {num(self.mtbf_hours_per_gpu)} h → job MTBF "
                f"M = {num(self.job_mtbf_hours * 60)} min, {num(self.expected_failures)} failures expected\n"
                f"checkpoint every τ = {num(self.interval_min)} min ({self.interval_source}), δ = "
                f"{num(self.ckpt_minutes)} min each; restart R = {num(self.restart_minutes)} min\n"
                f"ETTR {percent(self.ettr)} ({num(self.lost_hours)} h of {num(self.hours)} h lost; first-order model: "
                f"{percent(self.ettr_first_order)})\n"
                f"best interval {num(self.optimal_interval_min)} min (the curve's peak: {percent(self.ettr_at_optimum)}); "
                f"Daly's estimate {num(self.daly_interval_min)} min, Young's {num(self.young_interval_min)} min")


def ettr(hours: float, gpus: int, mtbf_hours: float, ckpt_minutes: float, restart_minutes: float,
         interval_minutes: float | None = None) -> Ettr:
    """ETTR of a job of `hours` on `gpus` with per-GPU MTBF `mtbf_hours`, checkpoints costing
    `ckpt_minutes` every `interval_minutes` (default: the optimum, the peak of the exact curve),
    restarts of `restart_minutes`."""
    hours = _pos("hours", hours)
    if int(gpus) != gpus or gpus < 1:
        raise InputError(f"gpus must be a whole number ≥ 1 (got {gpus})")
    gpus = int(gpus)
    m_min = job_mtbf_hours(mtbf_hours, gpus) * 60
    d = _pos("ckpt_minutes", ckpt_minutes)
    r = _pos("restart_minutes", restart_minutes, allow_zero=True)
    best = optimal_interval(d, r, m_min)
    if interval_minutes is None:
        tau, src = best, "the optimum"
    else:
        tau, src = _pos("interval_minutes", interval_minutes), "given"
    e = ettr_exact(tau, d, r, m_min)
    return Ettr(hours, gpus, float(mtbf_hours), m_min / 60, hours * 60 / m_min, d, r, tau, src, best,
                daly_interval(d, m_min), young_interval(d, m_min), e, ettr_exact(best, d, r, m_min),
                ettr_first_order(tau, d, r, m_min), hours * (1 - e))


def sweep_intervals(gpus: int, mtbf_hours: float, ckpt_minutes: float, restart_minutes: float, intervals_min,
                    model: str = "exact"):
    """(interval, ETTR) for each checkpoint interval (minutes) under `model` ('exact' or
    'first_order'): the curve whose peak `optimal_interval` finds."""
    if model not in MODELS:
        raise InputError(f"model must be one of {', '.join(MODELS)} (got {model!r})")
    m_min = job_mtbf_hours(mtbf_hours, gpus) * 60
    f = MODELS[model]
    return [(float(t), f(t, ckpt_minutes, restart_minutes, m_min)) for t in intervals_min]


def curve_around_optimum(gpus: int, mtbf_hours: float, ckpt_minutes: float, restart_minutes: float,
                         factors=(0.1, 0.2, 0.3, 0.5, 0.7, 0.85, 1, 1.2, 1.4, 2, 3, 5, 10), model: str = "exact"):
    """The curve to show: ETTR at the optimum × each factor (1 included), so the peak drawn is the
    optimum reported."""
    m_min = job_mtbf_hours(mtbf_hours, gpus) * 60
    best = optimal_interval(ckpt_minutes, restart_minutes, m_min, model)
    return sweep_intervals(gpus, mtbf_hours, ckpt_minutes, restart_minutes, [best * f for f in factors], model)


@dataclass
class Reach:
    """The exact model's ETTR at the optimal interval for one checkpoint cost δ and restart time R."""

    ckpt_minutes: float
    restart_minutes: float
    ettr: float
    reaches: bool  # ettr ≥ the target asked for


def needed_for(target: float, mtbf_hours_job: float, ckpt_minutes_list, restart_minutes_list) -> list[Reach]:
    """For each (δ, R): the exact model's ETTR at the optimal interval for a job MTBF of
    `mtbf_hours_job`, and whether it reaches `target`. Minutes in and out."""
    m = _pos("mtbf_hours_job", mtbf_hours_job) * 60
    rows = []
    for d in ckpt_minutes_list:
        for r in restart_minutes_list:
            e = ettr_exact(optimal_interval(d, r, m), d, r, m)
            rows.append(Reach(d, r, e, e >= target))
    return rows


def reach_table(rows: list[Reach]):
    """`needed_for`'s rows as a grid: a row per checkpoint stall δ (s), a column per restart R (min), each
    cell the ETTR at the best interval, ✓ where it reaches the target."""
    import pandas as pd

    from perflab.core.readout import percent

    grid: dict[str, dict[str, str]] = {}
    for r in rows:
        grid.setdefault(f"{r.ckpt_minutes * 60:g} s", {})[f"R = {r.restart_minutes:g} min"] = (
            percent(r.ettr) + (" ✓" if r.reaches else ""))
    return pd.DataFrame.from_dict(grid, orient="index").rename_axis("checkpoint δ")


@dataclass
class PublishedRun:
    """One run's published figure, as its source states it (derived figures are computed, not stored)."""

    run: str
    gpus: int | None
    gpu: str
    ettr_at_least: float  # the share reported (a lower bound where the source says "higher than")
    metric: str  # what the source calls it: 'effective training time', 'goodput'
    cite: str  # short citation
    source: str  # the source and the sentence the figure comes from
    snapshot_days: float | None = None
    interruptions: int | None = None
    unexpected_interruptions: int | None = None
    goodput_before: float | None = None


@dataclass
class Published:
    """data/published_ettr.json: the published runs, the formulas' sources, and what the file is."""

    about: str
    rows: list[PublishedRun]
    formulas: dict[str, str] = field(default_factory=dict)  # name → its source

    def table(self):
        """The runs as a reader reads them (a lower bound says '>')."""
        import pandas as pd

        from perflab.core.readout import percent

        return pd.DataFrame([{"run": r.run, "GPUs": r.gpus or "—", "hardware": r.gpu,
                              "reported": f"> {percent(r.ettr_at_least)}" if r.run.startswith("Llama")
                              else percent(r.ettr_at_least), "metric": r.metric, "source": r.cite}
                             for r in self.rows])


def published() -> Published:
    """The published ETTR figures with their sources (data/published_ettr.json)."""
    raw = json.loads(DATA.read_text())
    return Published(raw["_about"], [PublishedRun(**r) for r in raw["rows"]], dict(raw["formulas"]))


@dataclass
class FailureRate:
    """A run's failure rate, computed from its published counts."""

    gpus: int
    job_mtbf_hours: float  # hours between unexpected interruptions of the whole job
    mtbf_hours_per_gpu: float  # job MTBF × GPUs (independent failures)
    ettr_at_least: float  # the ETTR the run reported


    def describe(self) -> str:
        from perflab.core.readout import num

        return (f"Llama 3's snapshot: one unexpected interruption every {num(self.job_mtbf_hours)} h on {self.gpus} GPUs → "
                f"per-GPU MTBF ≈ {num(self.mtbf_hours_per_gpu)} h (computed from the published counts)")


def llama3_failure_rate() -> FailureRate:
    """From Llama 3's published reliability snapshot: job MTBF (hours between unexpected
    interruptions) and the per-GPU MTBF it implies (job MTBF × GPUs)."""
    row = next(r for r in published().rows if r.run.startswith("Llama 3"))
    assert row.gpus is not None and row.snapshot_days is not None and row.unexpected_interruptions
    job = row.snapshot_days * 24 / row.unexpected_interruptions
    return FailureRate(row.gpus, job, job * row.gpus, row.ettr_at_least)


def published_table():
    """`published().table()`."""
    return published().table()
