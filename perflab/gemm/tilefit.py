"""Which tile explains a measured staircase: fit t ≈ seconds per wave × waves + a fixed time for every
candidate tile (and blocks per SM), ranked by how well each puts its steps where the measurement steps
(lesson 04). `perflab.gemm.shapes` re-exports every name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from perflab.core.errors import InputError
from perflab.gemm.waves import TILE_SHAPES, parse_tile, shape_along, tile_count, wave_count


@dataclass
class TileFit:
    """How well each candidate tile (and blocks per SM) explains a measured time staircase."""

    table: Any  # DataFrame: tile, blocks_per_sm, sec_per_wave, overhead_s, rel_rms, r2 (best first)
    dim: str
    sms: int  # the units that run blocks at once: a GPU's SMs, or a CPU's threads (`unit`)
    unit: str = "SM"
    fixed: dict[str, int] | None = None  # the other two dimensions of the fitted sweep
    values: tuple[int, ...] = ()  # the measured points: sizes along `dim`, seconds, TFLOP/s
    times_s: tuple[float, ...] = ()
    tflops: tuple[float, ...] = ()
    quietness: Any = None  # perflab.core.quietness.Quietness of the measured points (None: not known)

    @property
    def best(self) -> dict[str, Any]:
        return self.table.iloc[0].to_dict()

    @property
    def best_tile(self) -> tuple[int, int]:
        return parse_tile(self.best["tile"])

    def verdict(self) -> str:
        """The tile that explains the measured steps best, or why the fit says nothing: its points were measured
        while other programs used the device."""
        from perflab.core.readout import percent
        from perflab.core.verdicts import busy_text

        if self.quietness is not None and getattr(self.quietness, "disturbed", False):
            return busy_text(self.quietness.cause) + ": the fit below ranks noise, not tiles"
        b = self.best
        return (f"best fit: {b['tile']} blocks, {int(b['blocks_per_sm'])} per {self.unit} on {self.sms} {self.unit}s "
                f"(relative RMS {percent(b['rel_rms'])})")

    def frame(self, top: int = 5, unit: str | None = None):
        """The fit for a person: candidates whose fits are the same (the same staircase over the
        measured range, so the same line) merged into one row that names them all; named columns
        with units; the best `top` distinct fits."""
        import pandas as pd

        from perflab.core.readout import num, percent, seconds

        unit = unit or self.unit
        groups: dict[tuple, dict[str, Any]] = {}
        for r in self.table.to_dict("records"):
            key = (round(r["sec_per_wave"], 15), round(r["overhead_s"], 15), round(r["rel_rms"], 12), r["steps"])
            g = groups.setdefault(key, {**r, "names": []})
            g["names"].append(f"{r['tile']} ×{int(r['blocks_per_sm'])}")
        rows = []
        for g in list(groups.values())[:top]:
            rows.append({f"tile × blocks per {unit}": ", ".join(g["names"]),
                         "time per wave": seconds(g["sec_per_wave"]) if g["sec_per_wave"] > 0 else "– (flat)",
                         "fixed time": seconds(g["overhead_s"]) if g["overhead_s"] > 0 else "0 s",
                         "RMS error (relative)": percent(g["rel_rms"]),
                         "R²": "–" if g["r2"] != g["r2"] else num(g["r2"], 2),
                         "steps in the range": int(g["steps"])})
        return pd.DataFrame(rows)


def fit_tile(values: Sequence[int], times_s: Sequence[float], dim: str, fixed: dict[str, int], *, sms: int,
             tiles: Iterable[tuple[int, int]] = TILE_SHAPES, blocks_per_sm: Iterable[int] = (1, 2), unit: str = "SM",
             tflops: Sequence[float] | None = None) -> TileFit:
    """Fit t ≈ sec_per_wave · waves(value) + overhead for every candidate tile; rank by residual.

    A least-squares line (on relative error) through the measured times against each candidate's
    wave count (the slope must be positive, the overhead at least zero: a fit that wants a negative
    overhead is refitted through the origin). The tile whose staircase puts its steps where the measurement steps
    has the smallest relative RMS residual. Needs at least 3 points. `unit` names what `sms` counts ('SM', or
    'thread' on a CPU); `tflops`, the measured rates, are kept with the fit for its figure.
    """
    import numpy as np
    import pandas as pd

    xs = [int(v) for v in values]
    ts = np.asarray([float(t) for t in times_s], dtype=float)
    if len(xs) != len(ts) or len(xs) < 3:
        raise InputError("fitting a tile needs at least 3 measured points (one time per value)")
    if not np.all(np.isfinite(ts)) or np.any(ts <= 0):
        raise InputError("measured times must be positive numbers")
    rows = []
    for tile in tiles:
        for bps in blocks_per_sm:
            w = np.asarray([wave_count(tile_count(*shape_along(dim, v, fixed)[:2], *tile), sms, bps) for v in xs], dtype=float)
            if np.ptp(w) == 0:  # a flat staircase explains nothing about where steps fall
                slope, icpt = 0.0, float(ts.mean())
            else:
                # least squares on the relative error (weights 1/t): one slow outlier cannot pull the line
                A = np.stack([w, np.ones_like(w)], axis=1) / ts[:, None]
                (slope, icpt), *_ = np.linalg.lstsq(A, np.ones_like(ts), rcond=None)
                if icpt < 0:  # a fixed time cannot be negative: the line through the origin instead
                    x = w / ts
                    slope, icpt = float(np.sum(x) / np.sum(x * x)), 0.0
                if slope <= 0:
                    slope, icpt = 0.0, float(ts.mean())
            pred = slope * w + icpt
            resid = ts - pred
            rel_rms = float(np.sqrt(np.mean((resid / ts) ** 2)))
            ss_tot = float(np.sum((ts - ts.mean()) ** 2))
            r2 = 1 - float(np.sum(resid ** 2)) / ss_tot if ss_tot > 0 else float("nan")
            rows.append({"tile": f"{tile[0]}x{tile[1]}", "blocks_per_sm": bps, "sec_per_wave": float(slope),
                         "overhead_s": float(icpt), "rel_rms": rel_rms, "r2": r2,
                         "steps": int(np.count_nonzero(np.diff(w)))})
    table = pd.DataFrame(rows).sort_values(["rel_rms", "steps"]).reset_index(drop=True)
    return TileFit(table, dim, sms, unit, dict(fixed), tuple(xs), tuple(float(t) for t in ts),
                   tuple(float(x) for x in tflops) if tflops is not None else ())


def fitted_staircase(fit_row: dict[str, Any], values: Sequence[int], dim: str, fixed: dict[str, int], sms: int) -> list[float]:
    """The fitted times (seconds) of one row of `fit_tile`'s table along `values`."""
    tile = parse_tile(fit_row["tile"])
    out = []
    for v in values:
        m, n, _k = shape_along(dim, int(v), fixed)
        out.append(fit_row["sec_per_wave"] * wave_count(tile_count(m, n, *tile), sms, int(fit_row["blocks_per_sm"]))
                   + fit_row["overhead_s"])
    return out
