"""Checks for labs/04_cliffs.ipynb: predict where a GEMM's throughput falls off a cliff.

The learner writes `tiles`, `waves` and `predict_cliffs`; each check compares them with
perflab.gemm.shapes on cases that include NVIDIA's worked example (A100, 108 SMs, 256×128 tiles,
M = 2304, K = 4096) and raises on a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from perflab.core.grading import grade
from perflab.gemm import shapes

TILE_CASES = [(2304, 1536, 256, 128), (2304, 1537, 256, 128), (257, 256, 128, 128), (1, 1, 128, 128),
              (4096, 10922, 128, 256), (100, 300, 64, 64)]
WAVE_CASES = [(108, 108), (117, 108), (1, 132), (264, 132), (265, 132), (1000, 80)]


def check_tiles(student: Callable[..., int]) -> bool:
    cases = [({"m": m, "n": n, "tile_m": tm, "tile_n": tn}, shapes.tile_count(m, n, tm, tn)) for m, n, tm, tn in TILE_CASES]
    return grade("tiles", student, cases, hint="each dimension needs ⌈size / tile⌉ tiles, even when the last is ragged")


def check_waves(student: Callable[..., int]) -> bool:
    cases = [({"tiles": t, "sms": s}, shapes.wave_count(t, s)) for t, s in WAVE_CASES]
    return grade("waves", student, cases, hint="a wave runs one tile per SM: ⌈tiles / SMs⌉")


def cliff_cases() -> list[tuple[dict[str, Any], list[int]]]:
    """(inputs, expected cliffs): the guide's A100 example, an H100 case, and a small one."""
    out = []
    for m, k, n_values, tile, sms in [
        (2304, 4096, list(range(128, 4609, 1)), (256, 128), 108),  # NVIDIA's worked example
        (4096, 4096, list(range(128, 8193, 128)), (128, 256), 132),  # an H100 SXM
        (512, 512, list(range(16, 1025, 16)), (64, 64), 20),
    ]:
        out.append(({"m": m, "k": k, "n_values": n_values, "tile": tile, "sms": sms},
                    shapes.cliffs("n", n_values, {"m": m, "k": k}, sms=sms, tile=tile)))
    return out


def check_cliffs(student: Callable[..., Sequence[int]]) -> bool:
    cases = [(inp, tuple(want)) for inp, want in cliff_cases()]
    return grade("predict_cliffs", lambda **kw: tuple(int(v) for v in student(**kw)), cases,
                 hint="walk the n values in order and keep each n whose wave count is higher than the previous n's")


def prediction_or_none(student: Callable[..., Any], **inputs) -> Any:
    """The learner's answer, or None while the function is still a stub (so the lab runs as shipped)."""
    try:
        return student(**inputs)
    except NotImplementedError:
        return None


def measured_drops(values: Sequence[int], tflops: Sequence[float], threshold: float = 0.10) -> list[int]:
    """The values where measured TFLOP/s falls by more than `threshold` (a fraction) from the previous point."""
    out = []
    pairs = list(zip(values, tflops, strict=True))
    for (_v0, t0), (v1, t1) in zip(pairs, pairs[1:], strict=False):
        if t0 > 0 and (t0 - t1) / t0 > threshold:
            out.append(int(v1))
    return out


def compare(predicted: Sequence[int] | None, measured: Sequence[int], step: int):
    """Each predicted cliff beside the nearest measured drop, and whether they are within one step."""
    import pandas as pd

    rows = []
    for p in predicted or []:
        near = min(measured, key=lambda m: abs(m - p)) if measured else None
        rows.append({"predicted cliff": p, "nearest measured drop": near,
                     "within one step": near is not None and abs(near - p) <= step})
    return pd.DataFrame(rows, columns=["predicted cliff", "nearest measured drop", "within one step"])
