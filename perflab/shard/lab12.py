"""Checks for labs/12_sharding.ipynb: the pipeline bubble and FSDP's memory per rank, graded on
closed-form cases and against the lab's live runs.

A wrong answer that matches a known mistake gets the hint for that mistake (dividing by m alone,
forgetting the ramp-down, counting only the weights, forgetting the gradients or the optimizer
states, not dividing by the ranks, ...); any other wrong answer gets the general hint.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from perflab.core.grading import NOT_DONE, LabCheckError, attempt, record
from perflab.shard import formulas as F

BUBBLE_MISTAKES: dict[str, tuple[Callable[[int, int], float], str]] = {
    "(p−1)/m": (lambda p, m: (p - 1) / m, "that is idle time over *busy* time; the bubble is idle over the whole step, "
                                          "which lasts m + p − 1 slots"),
    "(p−1)/(m+p)": (lambda p, m: (p - 1) / (m + p), "count the slots again: the last micro-batch enters the last "
                                                     "stage p − 1 slots after the first, so the step is m + p − 1 slots"),
    "p/(m+p−1)": (lambda p, m: p / (m + p - 1), "with one stage (p = 1) nothing waits: the idle slots are p − 1, not p"),
    "(m−1)/(m+p−1)": (lambda p, m: (m - 1) / (m + p - 1), "the idle slots depend on the stages, not on the "
                                                            "micro-batches: p − 1 of them"),
    "1/m": (lambda p, m: 1 / m, "the bubble grows with the number of stages p"),
    "(p−1)//(m+p−1)": (lambda p, m: (p - 1) // (m + p - 1), "use / (true division), not // (integer division)"),
    "1 − (p−1)/(m+p−1)": (lambda p, m: m / (m + p - 1), "that is the busy fraction; the bubble is what is left"),
}

FSDP_MISTAKES: dict[str, tuple[Callable[[int, int], float], str]] = {
    "16N": (lambda N, n: 16 * N, "under ZeRO-3 every rank keeps only its 1/n share of each state: divide by nproc"),
    "4N/n": (lambda N, n: 4 * N / n, "the weights are not all: each rank also holds its share of the gradients "
                                     "(4 bytes) and of AdamW's two moments (8 bytes)"),
    "12N/n": (lambda N, n: 12 * N / n, "4 + 8 = 12 bytes forgets the gradients: FSDP keeps a gradient shard too"),
    "8N/n": (lambda N, n: 8 * N / n, "weights and gradients only: AdamW keeps two fp32 moments per parameter (8 bytes)"),
    "18N/n": (lambda N, n: 18 * N / n, "18 bytes is mixed precision (bf16 weights + fp32 master); this run is pure "
                                       "fp32 with fp32 gradients: 4 + 4 + 8"),
    "16N/(n−1)": (lambda N, n: 16 * N / max(n - 1, 1), "every one of the n ranks holds a shard, itself included: "
                                                       "divide by n"),
    "4N + 12N/n": (lambda N, n: 4 * N + 12 * N / n, "that is ZeRO-2 (weights replicated); ZeRO-3/FSDP shards the "
                                                    "weights too"),
}


def _diagnose(got_fn: Callable[..., Any], cases: list[tuple[dict[str, Any], float]],
              mistakes: dict[str, tuple[Callable[..., float], str]], rtol: float) -> str | None:
    for _name, (wrong, hint) in mistakes.items():
        ok = True
        for inputs, _ in cases:
            try:
                if not math.isclose(float(got_fn(**inputs)), float(wrong(*inputs.values())), rel_tol=1e-9, abs_tol=1e-12):
                    ok = False
                    break
            except Exception:
                ok = False
                break
        if ok:
            return hint
    return None


def _grade(name: str, student, cases, mistakes, *, rtol: float, atol: float, general: str) -> bool:
    for inputs, want in cases:
        got: Any = attempt(name, student, what=str(inputs), **inputs)
        if got is NOT_DONE:
            return False
        try:
            good = math.isclose(float(got), float(want), rel_tol=rtol, abs_tol=atol)
        except (TypeError, ValueError):
            raise LabCheckError(f"{name}: for {inputs} you returned {got!r}: return a number") from None
        if not good:
            hint = _diagnose(student, cases, mistakes, rtol) or general
            raise LabCheckError(f"{name}: for {inputs} you returned {got!r}, expected {want!r}. Hint: {hint}")
    record(name, True)
    print(f"✓ {name}: correct on {len(cases)} cases")
    return True


def check_bubble(student: Callable[[int, int], float], runs: list[dict[str, Any]] | None = None) -> bool:
    """bubble(p, m): closed-form cases, then each live run (p, m, measured bubble) within its tolerance."""
    from perflab.shard.run import TOL_BUBBLE

    cases = [({"p": p, "m": m}, F.bubble_fraction(p, m)) for p, m in ((1, 4), (2, 1), (4, 8), (8, 32), (3, 2))]
    if not _grade("pipeline bubble", student, cases, BUBBLE_MISTAKES, rtol=1e-9, atol=1e-12,
                  general="draw the p × (m + p − 1) grid of slots and count the empty ones on one stage"):
        return False
    live = [({"p": r["p"], "m": r["m"]}, r["replayed_bubble"]) for r in runs or []]
    if live:
        _grade("pipeline bubble vs the live runs", student, live, BUBBLE_MISTAKES, rtol=0.0, atol=TOL_BUBBLE,
               general=f"your formula must land within ±{TOL_BUBBLE} of each measured bubble")
    return True


def check_fsdp_bytes(student: Callable[[int, int], float], rows: list[dict[str, Any]] | None = None,
                     params: int | None = None) -> bool:
    """fsdp_bytes(params, nproc): per-rank model-state bytes (fp32 weights and gradients, AdamW), on
    closed-form cases, then against each live rank's measured parameter + gradient + optimizer bytes (1 %)."""
    from perflab.shard.run import TOL_STATES_REL

    cases = [({"params": N, "nproc": n}, 16 * N / n) for N, n in ((1_000_000, 1), (544_256, 2), (7e9, 8), (10**6, 3))]
    if not _grade("FSDP bytes per rank", student, cases, FSDP_MISTAKES, rtol=1e-9, atol=0.0,
                  general="list what each parameter costs (weight, gradient, AdamW's two moments; bytes each in "
                          "fp32) and what ZeRO-3 divides by the ranks"):
        return False
    if rows and params:
        live = [({"params": params, "nproc": r["nproc"]}, r["param_bytes"] + r["grad_bytes"] + r["optim_bytes"])
                for r in rows]
        _grade("FSDP bytes per rank vs the live runs", student, live, FSDP_MISTAKES, rtol=TOL_STATES_REL, atol=0.0,
               general="within 1 % of what each rank measured")
    return True


# --- for `perflab grade` (perflab/course/judge.py): graded apart from the learner's notebook -------
def reference_bubble(p: int, m: int) -> float:
    return F.bubble_fraction(p, m)


def reference_fsdp_bytes(params: float, nproc: int) -> float:
    return 16 * params / nproc


LEARNER_ANSWERS = ("bubble", "fsdp_bytes")
REFERENCES = {"bubble": reference_bubble, "fsdp_bytes": reference_fsdp_bytes}
FORBIDDEN = tuple(f for f in vars(F).values() if callable(f) and getattr(f, "__module__", "") == F.__name__)


def grading_inputs(rng) -> dict[str, list[dict]]:
    from perflab.core.grading import draw_int

    bub = [dict(p=draw_int(rng, 1, 64), m=draw_int(rng, 1, 512)) for _ in range(6)]
    fsdp = [dict(params=draw_int(rng, 10**3, 10**11), nproc=draw_int(rng, 1, 1024)) for _ in range(6)]
    return {"bubble": bub, "fsdp_bytes": fsdp}


def judge(answers, rng) -> None:
    from perflab.core.grading import hidden

    drawn = grading_inputs(rng)
    if check_bubble(answers["bubble"]):
        hidden("bubble on the grading inputs", answers["bubble"], reference_bubble, drawn["bubble"], atol=1e-12)
    if check_fsdp_bytes(answers["fsdp_bytes"]):
        hidden("fsdp_bytes on the grading inputs", answers["fsdp_bytes"], reference_fsdp_bytes, drawn["fsdp_bytes"])
