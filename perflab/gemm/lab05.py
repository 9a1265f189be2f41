"""Checks for labs/05_swiglu_width.ipynb: pick a SwiGLU width for a given h and defend it.

The learner writes `candidate_widths`, `params_delta` and `pick_width`; the checks compare them
with perflab.gemm.swiglu (the published h = 4096 example included), and `pick_width` is checked on the
learner's own measurements, so the answer cannot be typed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perflab.gemm import swiglu
from perflab.grading.checks import Verdict, grade

_FORBIDDEN = (swiglu.candidate_widths, swiglu.params_delta, swiglu.recommend, swiglu.baseline_width, swiglu.mlp_params)


def _widths(h: int, radius: int, multiple: int, *, centre=None, upper=1, lower=0) -> tuple[int, ...]:
    c = 8 * h // 3 if centre is None else centre(h)
    first = -(-(c - radius + lower) // multiple) * multiple
    return tuple(range(first, c + radius + upper, multiple))


CANDIDATE_MISTAKES = [
    ("start from ⌊8/3·h⌋, rounded down (h = 4096 → 10922), not rounded to nearest",
     lambda h, radius, multiple: _widths(h, radius, multiple, centre=lambda h: round(8 * h / 3))),
    ("start from ⌊8/3·h⌋, rounded down, not up", lambda h, radius, multiple: _widths(h, radius, multiple,
                                                                                 centre=lambda h: -(-8 * h // 3))),
    ("off by one: the range is inclusive, ⌊8/3·h⌋ + radius itself counts when it is a multiple",
     lambda h, radius, multiple: _widths(h, radius, multiple, upper=0)),
    ("off by one: the range is inclusive, ⌊8/3·h⌋ − radius itself counts when it is a multiple",
     lambda h, radius, multiple: _widths(h, radius, multiple, lower=1)),
    ("keep only multiples of `multiple`: ⌊8/3·h⌋ itself is a candidate only when it is one",
     lambda h, radius, multiple: tuple(sorted(set(_widths(h, radius, multiple)) | {8 * h // 3}))),
]

PARAMS_MISTAKES = [
    ("that is the width's parameters, not the change: subtract the 8·h² of a width of exactly 8/3·h",
     lambda h, d_ff: 3 * h * d_ff),
    ("a SwiGLU MLP has three matrices (gate, up, down), 3·h·d_ff weights, not two",
     lambda h, d_ff: 2 * h * d_ff - 8 * h * h),
    ("compare with exactly 8/3·h (8·h² weights), not with ⌊8/3·h⌋",
     lambda h, d_ff: 3 * h * d_ff - 3 * h * (8 * h // 3)),
    ("the sign is reversed: a wider MLP adds parameters (3·h·d_ff − 8·h²)",
     lambda h, d_ff: 8 * h * h - 3 * h * d_ff),
]


def _pick(frame, max_params_delta_pct, *, strict=False, key="tflops", ascending=False):
    d = frame["params_delta_pct"].abs()
    ok = frame[d < max_params_delta_pct] if strict else frame[d <= max_params_delta_pct + 1e-12]
    if key == "abs_delta":
        ok = ok.assign(abs_delta=ok["params_delta_pct"].abs())
    return int(ok.sort_values([key, "d_ff"], ascending=[ascending, True])["d_ff"].iloc[0])


PICK_MISTAKES = [
    ("the budget is inclusive: a width whose change equals the budget is allowed (≤, not <)",
     lambda frame, max_params_delta_pct: _pick(frame, max_params_delta_pct, strict=True)),
    ("you took the width closest to 8/3·h: take the fastest (highest TFLOP/s) within the budget",
     lambda frame, max_params_delta_pct: _pick(frame, max_params_delta_pct, key="abs_delta", ascending=True)),
    ("you took the fastest width without the budget: keep only rows with |params_delta_pct| ≤ the budget",
     lambda frame, max_params_delta_pct: _pick(frame, 1e9)),
    ("you took the slowest width: sort by TFLOP/s, highest first",
     lambda frame, max_params_delta_pct: _pick(frame, max_params_delta_pct, ascending=True)),
]


def expected_candidates(h: int, radius: int, multiple: int) -> list[int]:
    """Multiples of `multiple` within ⌊8/3·h⌋ ± radius."""
    return [w for w in swiglu.candidate_widths(h, radius, multiple) if w % multiple == 0]


def check_candidates(student: Callable[..., Any]) -> Verdict:
    # (4096, 10, 4): both ends of 10922 ± 10 are multiples of 4 (inclusive bounds); (1000, 3, 1):
    # 8/3·1000 = 2666.7 rounds differently down and to nearest; (100, 5, 3): non-power-of-two multiple
    cases = [({"h": h, "radius": r, "multiple": m}, tuple(expected_candidates(h, r, m)))
             for h, r, m in ((4096, 100, 64), (4096, 100, 32), (5120, 64, 8), (512, 24, 4), (4096, 10, 4),
                             (1000, 3, 1), (100, 5, 3))]

    def answer(**kw):
        got = student(**kw)
        return got if got is None else tuple(int(v) for v in got)

    return grade("candidate_widths", answer, cases, mistakes=CANDIDATE_MISTAKES, forbidden=_FORBIDDEN,
                 reference=lambda h, radius, multiple: _widths(h, radius, multiple),
                 hint="start from ⌊8/3·h⌋ (h = 4096 → 10922) and keep the multiples within ± radius, smallest first")


def check_params_delta(student: Callable[..., int]) -> Verdict:
    cases = [({"h": h, "d_ff": d}, swiglu.params_delta(h, d))
             for h, d in ((4096, 10922), (4096, 10944), (4096, 11008), (8192, 28672), (3, 8), (1000, 2600))]
    return grade("params_delta", student, cases, mistakes=PARAMS_MISTAKES, forbidden=_FORBIDDEN,
                 reference=lambda h, d_ff: 3 * h * d_ff - 8 * h * h,
                 hint="a SwiGLU MLP has 3·h·d_ff weights; at exactly 8/3·h that is 8·h²")


def check_pick(student: Callable[..., int], frame) -> Verdict:
    """Check `pick_width(frame, max_params_delta_pct)` on the learner's measured frame, for several budgets:
    0.5, 1 and 2%, the largest change measured, and exactly the change of the fastest width (the
    budget's edge: ≤ includes it). A sweep's frame is given with only the widths that may win: a point
    that did not repeat when measured again (`eligible` False) is no evidence for a choice."""
    if "eligible" in frame and frame["eligible"].any():
        frame = frame[frame["eligible"]].reset_index(drop=True)
    fastest = frame.sort_values(["tflops", "d_ff"], ascending=[False, True]).iloc[0]
    budgets = sorted({0.5, 1.0, 2.0, float(frame["params_delta_pct"].abs().max()), abs(float(fastest["params_delta_pct"]))})
    cases = []
    for b in budgets:
        if (frame["params_delta_pct"].abs() <= b + 1e-12).any():
            cases.append(({"frame": frame, "max_params_delta_pct": b},
                          int(swiglu.recommend(frame, max_params_delta_pct=b).d_ff)))
    def answer(**kw):
        got = student(**kw)
        return got if got is None else int(got)

    return grade("pick_width", answer, cases, mistakes=PICK_MISTAKES, forbidden=_FORBIDDEN,
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


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
def reference_candidates(h: int, radius: int, multiple: int) -> tuple[int, ...]:
    return tuple(expected_candidates(h, radius, multiple))


def reference_params_delta(h: int, d_ff: int) -> int:
    return swiglu.params_delta(h, d_ff)


def reference_pick(frame, max_params_delta_pct: float) -> int:
    return int(swiglu.recommend(frame, max_params_delta_pct=max_params_delta_pct).d_ff)


LEARNER_ANSWERS = ("candidate_widths", "params_delta", "pick_width")
REFERENCES = {"candidate_widths": reference_candidates, "params_delta": reference_params_delta,
              "pick_width": reference_pick}
FORBIDDEN = _FORBIDDEN
HELPERS = ("prediction_or_none", "defend")


def grading_frame(rng, h: int = 4096):
    """A measured-looking frame of widths around ⌊8/3·h⌋ with TFLOP/s drawn per learner."""
    import pandas as pd

    base = swiglu.baseline_width(h)
    rows = []
    for d in sorted({base, *(base + 8 * rng.randint(-40, 40) for _ in range(10))}):
        delta = swiglu.params_delta(h, d)
        rows.append({"d_ff": d, "tflops": round(rng.uniform(50, 400), 3), "params_delta": delta,
                     "params_delta_pct": 100 * delta / (8 * h * h), "is_baseline": d == base})
    return pd.DataFrame(rows)


def grading_inputs(rng) -> dict[str, list[dict]]:
    from perflab.grading.checks import draw_int

    cands = [dict(h=draw_int(rng, 100, 16384), radius=draw_int(rng, 1, 200), multiple=rng.choice([1, 3, 8, 64, 128]))
             for _ in range(6)]
    deltas = [dict(h=draw_int(rng, 1, 16384), d_ff=draw_int(rng, 1, 65536)) for _ in range(6)]
    frame = grading_frame(rng)
    picks = [dict(frame=frame, max_params_delta_pct=b) for b in (0.3, 1.0, 2.5)
             if (frame["params_delta_pct"].abs() <= b).any()]
    return {"candidate_widths": cands, "params_delta": deltas, "pick_width": picks}


def judge(answers, rng) -> None:
    from perflab.grading.checks import hidden

    drawn = grading_inputs(rng)
    if check_candidates(answers["candidate_widths"]):
        f = answers["candidate_widths"]
        hidden("candidate_widths on the grading inputs", lambda **kw: tuple(int(v) for v in f(**kw)),
               reference_candidates, drawn["candidate_widths"])
    if check_params_delta(answers["params_delta"]):
        hidden("params_delta on the grading inputs", answers["params_delta"], reference_params_delta,
               drawn["params_delta"])
    if check_pick(answers["pick_width"], grading_frame(rng)):
        f = answers["pick_width"]
        hidden("pick_width on the grading inputs", lambda **kw: int(f(**kw)), reference_pick, drawn["pick_width"])
PRELOAD = ("pandas",)  # the grading frame is a DataFrame: pandas loads before the learner's code runs
