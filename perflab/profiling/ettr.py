"""ETTR: the share of a job's wall time that trains, given failures, checkpoints and restarts.

    >>> e = ettr(hours=24 * 30, gpus=16384, mtbf_hours=50_000, ckpt_minutes=2, restart_minutes=10)
    >>> e.ettr, e.interval_min, e.optimal_interval_min

The model (first order, the one behind Young's interval): failures arrive at random (Poisson) at
rate gpus / MTBF_per_GPU, so the job's MTBF is M = MTBF_per_GPU / gpus. Work runs in cycles of
τ of training then δ writing a checkpoint (blocking). Each failure costs the restart R plus the
work since the last checkpoint, half a cycle on average: (τ + δ) / 2. So

    ETTR = (1 − (R + (τ + δ)/2) / M) · τ / (τ + δ)        (0 when the bracket is ≤ 0)

and the τ that maximises it is, to first order, Young's √(2δM); Daly's higher-order estimate
(both cited in `data/published_ettr.json`) is the default interval. Published ETTRs of real runs
are in `published()`; they are what a team reported, not this model's output.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from perflab.core.errors import InputError

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


def ettr_fraction(interval: float, ckpt_cost: float, restart: float, mtbf: float) -> float:
    """The first-order ETTR (module docstring); all four in the same unit."""
    tau, d = _pos("interval", interval), _pos("ckpt_cost", ckpt_cost, allow_zero=True)
    r, m = _pos("restart", restart, allow_zero=True), _pos("mtbf", mtbf)
    return max(0.0, 1 - (r + (tau + d) / 2) / m) * tau / (tau + d)


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
    optimal_interval_min: float  # Daly
    young_interval_min: float
    ettr: float
    ettr_at_optimum: float
    lost_hours: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        from perflab.core.readout import num, percent

        return (f"{self.gpus} GPUs × {num(self.hours)} h, per-GPU MTBF {num(self.mtbf_hours_per_gpu)} h → job MTBF "
                f"{num(self.job_mtbf_hours * 60)} min, {num(self.expected_failures)} failures expected\n"
                f"checkpoint every {num(self.interval_min)} min ({self.interval_source}), {num(self.ckpt_minutes)} min each; "
                f"restart {num(self.restart_minutes)} min\n"
                f"ETTR {percent(self.ettr)} ({num(self.lost_hours)} h of {num(self.hours)} h lost); at the optimal interval "
                f"(Daly {num(self.optimal_interval_min)} min, Young {num(self.young_interval_min)} min): {percent(self.ettr_at_optimum)}")


def ettr(hours: float, gpus: int, mtbf_hours: float, ckpt_minutes: float, restart_minutes: float,
         interval_minutes: float | None = None) -> Ettr:
    """ETTR of a job of `hours` on `gpus` with per-GPU MTBF `mtbf_hours`, checkpoints costing
    `ckpt_minutes` every `interval_minutes` (default: Daly's optimum), restarts of `restart_minutes`."""
    hours = _pos("hours", hours)
    if int(gpus) != gpus or gpus < 1:
        raise InputError(f"gpus must be a whole number ≥ 1 (got {gpus})")
    gpus = int(gpus)
    m_min = job_mtbf_hours(mtbf_hours, gpus) * 60
    d = _pos("ckpt_minutes", ckpt_minutes)
    r = _pos("restart_minutes", restart_minutes, allow_zero=True)
    daly = daly_interval(d, m_min)
    young = young_interval(d, m_min)
    if interval_minutes is None:
        tau, src = daly, "Daly's optimum"
    else:
        tau, src = _pos("interval_minutes", interval_minutes), "given"
    e = ettr_fraction(tau, d, r, m_min)
    return Ettr(hours, gpus, float(mtbf_hours), m_min / 60, hours * 60 / m_min, d, r, tau, src, daly, young, e,
                ettr_fraction(daly, d, r, m_min), hours * (1 - e))


def sweep_intervals(gpus: int, mtbf_hours: float, ckpt_minutes: float, restart_minutes: float, intervals_min):
    """ETTR for each checkpoint interval (minutes): the curve whose peak is Young/Daly's τ."""
    m_min = job_mtbf_hours(mtbf_hours, gpus) * 60
    return [(float(t), ettr_fraction(t, ckpt_minutes, restart_minutes, m_min)) for t in intervals_min]


def published() -> dict[str, Any]:
    """The published ETTR figures with their sources (data/published_ettr.json)."""
    return json.loads(DATA.read_text())


def llama3_failure_rate() -> dict[str, float]:
    """From Llama 3's published reliability snapshot: job MTBF (hours between unexpected
    interruptions) and the per-GPU MTBF it implies (job MTBF × GPUs)."""
    row = next(r for r in published()["rows"] if r["run"].startswith("Llama 3"))
    job = row["snapshot_days"] * 24 / row["unexpected_interruptions"]
    return {"gpus": row["gpus"], "job_mtbf_hours": job, "mtbf_hours_per_gpu": job * row["gpus"],
            "ettr_at_least": row["ettr_at_least"]}


def published_table():
    import pandas as pd

    from perflab.core.readout import percent

    rows = [{"run": r["run"], "GPUs": r["gpus"] or "—", "hardware": r["gpu"], "reported": f"> {percent(r['ettr_at_least'])}"
             if r["run"].startswith("Llama") else percent(r["ettr_at_least"]), "metric": r["metric"],
             "source": r["cite"]} for r in published()["rows"]]
    return pd.DataFrame(rows)
