"""Checks for labs/05_swiglu_width.ipynb: pick a SwiGLU width for a given h and defend it.

The learner writes `candidate_widths`, `params_delta` and `pick_width`; the checks compare them
with perflab.gemm.swiglu (the published h = 4096 example included), and `pick_width` is checked on the
learner's own measurements, so the answer cannot be typed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perflab.core.grading import grade
from perflab.gemm import swiglu


def expected_candidates(h: int, radius: int, multiple: int) -> list[int]:
    """Multiples of `multiple` within ⌊8/3·h⌋ ± radius."""
    return [w for w in swiglu.candidate_widths(h, radius, multiple) if w % multiple == 0]


def check_candidates(student: Callable[..., Any]) -> bool:
    cases = [({"h": h, "radius": r, "multiple": m}, tuple(expected_candidates(h, r, m)))
             for h, r, m in ((4096, 100, 64), (4096, 100, 32), (5120, 64, 8), (512, 24, 4))]
    return grade("candidate_widths", lambda **kw: tuple(int(v) for v in student(**kw)), cases,
                 hint="start from ⌊8/3·h⌋ (h = 4096 → 10922) and keep the multiples within ± radius, smallest first")


def check_params_delta(student: Callable[..., int]) -> bool:
    cases = [({"h": h, "d_ff": d}, swiglu.params_delta(h, d))
             for h, d in ((4096, 10922), (4096, 10944), (4096, 11008), (8192, 28672), (3, 8))]
    return grade("params_delta", student, cases,
                 hint="a SwiGLU MLP has 3·h·d_ff weights; at exactly 8/3·h that is 8·h²")


def check_pick(student: Callable[..., int], frame) -> bool:
    """Check `pick_width(frame, max_params_delta_pct)` on the learner's measured frame, for several budgets."""
    budgets = sorted({0.5, 1.0, 2.0, float(frame["params_delta_pct"].abs().max())})
    cases = []
    for b in budgets:
        if (frame["params_delta_pct"].abs() <= b + 1e-12).any():
            cases.append(({"frame": frame, "max_params_delta_pct": b},
                          int(swiglu.recommend(frame, max_params_delta_pct=b)["d_ff"])))
    return grade("pick_width", lambda **kw: int(student(**kw)), cases,
                 hint="among the rows with |params_delta_pct| ≤ the budget, take the highest TFLOP/s")


def defend(frame, d_ff: int) -> str:
    """The measured evidence for a chosen width: its speed, its rank, and its cost in parameters."""
    row = frame[frame["d_ff"] == int(d_ff)]
    if not len(row):
        return f"d_ff = {d_ff} was not measured: pick one of the measured widths"
    r = row.iloc[0]
    base = frame[frame["is_baseline"]].iloc[0]
    return (f"d_ff = {int(r['d_ff'])}: {r['tflops']:.4g} TFLOP/s, rank {int(r['rank_tflops'])} of {len(frame)} by "
            f"TFLOP/s; {r['speedup_vs_baseline']:.2f}× the ⌊8/3·h⌋ = {int(base['d_ff'])} width "
            f"({base['tflops']:.4g} TFLOP/s); parameters {int(r['params_delta']):+,} ({r['params_delta_pct']:+.2f}%) "
            f"against 8/3·h; divisible by {int(r['multiple_of'])}")


def prediction_or_none(student: Callable[..., Any], **inputs) -> Any:
    """The learner's answer, or None while the function is still a stub (so the lab runs as shipped)."""
    try:
        return student(**inputs)
    except NotImplementedError:
        return None
