"""Lesson 16's panel, a pure function of the widget values (perflab.course.widgets.Panel calls it):
one tensor quantized to E4M3 at a chosen granularity, with outlier columns of a chosen size.

`scaling(granularity, outlier, x=..., what=...)` returns (figure, text): every granularity's share of
values that lost precision at this outlier factor, and the chosen granularity's share against the
outlier factor beside tensorwise scaling's. A sweep is remembered per tensor and granularity, so moving
the outlier slider quantizes the tensor only at the new factor (five quantizations of at most `ROWS`
rows, well under a second).
"""

from __future__ import annotations

import torch

from perflab.numerics.scaling import GRANULARITIES, compare, scaled_error, with_outliers

SWEEP = (1, 8, 64, 512, 4096)  # outlier factors of the right-hand curve
ROWS = 256  # the panel reads at most this many rows (tokens) of its tensor, evenly spaced
_SWEEPS: dict[tuple[int, str], tuple[torch.Tensor, list[tuple[float, float]]]] = {}


def _sweep(x: torch.Tensor, granularity: str) -> list[tuple[float, float]]:
    key = (id(x), granularity)
    if key not in _SWEEPS:  # the tensor is kept with its sweep, so that its id is not reused meanwhile
        pts = []
        for f in SWEEP:
            xo, mask = with_outliers(x, f)
            pts.append((float(f), scaled_error(xo, granularity, outliers=mask).imprecise))
        _SWEEPS[key] = (x, pts)
    return _SWEEPS[key][1]


_ROWS: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def panel_rows(x: torch.Tensor) -> torch.Tensor:
    """At most ROWS evenly spaced rows of x (2-D), the same tensor object for the same x."""
    if id(x) not in _ROWS:
        x2 = x.reshape(-1, x.shape[-1])
        _ROWS[id(x)] = (x, x2[:: max(1, x2.shape[0] // ROWS)][:ROWS].contiguous())
    return _ROWS[id(x)][1]


def scaling(granularity: str = "row", outlier: float = 64, *, x: torch.Tensor, what: str = "activations"):
    """(figure, text) for one granularity and outlier factor (module docstring)."""
    from perflab.core.readout import percent
    from perflab.numerics.plots import scaling_figure

    x = panel_rows(x)
    table = compare(x, what, float(outlier))
    sweep = {g: _sweep(x, g) for g in dict.fromkeys(["tensor", granularity])}
    fig = scaling_figure(table, sweep, granularity)
    chosen, tensor = table.error(granularity), table.error("tensor")
    best = min(table.rows, key=lambda r: r.imprecise)
    text = (f"{what} {table.shape[0]}×{table.shape[1]}, outlier columns × {outlier:g}: {granularity} scaling leaves "
            f"{percent(chosen.imprecise, 2)} of the values below E4M3's precision ({percent(chosen.flushed, 2)} "
            f"flushed to zero), tensorwise {percent(tensor.imprecise, 2)}; the least: {best.granularity} "
            f"({percent(best.imprecise, 2)})")
    return fig, text


CHOICES = list(GRANULARITIES)
