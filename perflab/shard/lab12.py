"""Checks for labs/12_sharding.ipynb: the pipeline bubble and FSDP's memory per rank, graded on
closed-form cases and against the lab's live runs.

The bubble has two conventions in the field, and the learner names theirs (`denominator="step"`:
idle over the whole step, (p−1)/(m+p−1); `denominator="ideal"`: idle over the ideal time, (p−1)/m,
Megatron-LM's bubble time fraction); either is graded right. A wrong answer that matches a known
mistake gets the hint for that mistake (the other convention without naming it, forgetting the
ramp-down, counting only the weights, forgetting the gradients or the optimizer
states, not dividing by the ranks, ...); any other wrong answer gets the general hint.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from perflab.grading.checks import NOT_DONE, LabCheckError, attempt, record
from perflab.shard import formulas as F

DENOMINATORS = {
    "step": "idle over the whole step, (m + p − 1) slots: (p−1)/(m+p−1) (GPipe's overhead)",
    "ideal": "idle over the ideal (busy) time, m slots: (p−1)/m (Megatron-LM's bubble time fraction, "
             "Narayanan et al. 2021, §2.2.1)",
}

BUBBLE_MISTAKES: dict[str, tuple[Callable[[int, int], float], str]] = {
    "(p−1)/m": (lambda p, m: (p - 1) / m, "that is idle time over *busy* (ideal) time, Megatron-LM's convention; "
                                          "you said denominator='step': the whole step lasts m + p − 1 slots. "
                                          "If you mean Megatron's, say denominator='ideal'"),
    "(p−1)/(m+p)": (lambda p, m: (p - 1) / (m + p), "count the slots again: the last micro-batch enters the last "
                                                     "stage p − 1 slots after the first, so the step is m + p − 1 slots"),
    "p/(m+p−1)": (lambda p, m: p / (m + p - 1), "with one stage (p = 1) nothing waits: the idle slots are p − 1, not p"),
    "(m−1)/(m+p−1)": (lambda p, m: (m - 1) / (m + p - 1), "the idle slots depend on the stages, not on the "
                                                            "micro-batches: p − 1 of them"),
    "1/m": (lambda p, m: 1 / m, "the bubble grows with the number of stages p"),
    "(p−1)//(m+p−1)": (lambda p, m: (p - 1) // (m + p - 1), "use / (true division), not // (integer division)"),
    "1 − (p−1)/(m+p−1)": (lambda p, m: m / (m + p - 1), "that is the busy fraction; the bubble is what is left"),
}

RATIO_MISTAKES: dict[str, tuple[Callable[[int, int], float], str]] = {
    "(p−1)/(m+p−1)": (lambda p, m: (p - 1) / (m + p - 1), "that is idle over the whole step (m + p − 1 slots); "
                                                          "you said denominator='ideal': divide by the m slots a "
                                                          "stage works. If you mean the whole step, say "
                                                          "denominator='step'"),
    "p/m": (lambda p, m: p / m, "with one stage (p = 1) nothing waits: the idle slots are p − 1, not p"),
    "(p−1)/(m+1)": (lambda p, m: (p - 1) / (m + 1), "the ideal time is the m slots a stage works, nothing more"),
    "m/(p−1)": (lambda p, m: m / (p - 1) if p > 1 else 0.0, "upside down: idle slots (p − 1) over working slots (m)"),
    "1/m": (lambda p, m: 1 / m, "the bubble grows with the number of stages p"),
    "(p−1)//m": (lambda p, m: (p - 1) // m, "use / (true division), not // (integer division)"),
    "(p−1)/(2m)": (lambda p, m: (p - 1) / (2 * m), "a slot is one micro-batch's forward AND backward: the ideal "
                                                   "time is m slots, not 2m"),
}


def check_denominator(denominator: str) -> str:
    d = str(denominator).strip().lower()
    if d not in DENOMINATORS:
        raise LabCheckError(f"denominator={denominator!r}: say 'step' (idle over the whole step) or 'ideal' "
                            "(idle over the ideal, busy time, as Megatron-LM's paper does)")
    return d


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


def _live_run(r: Any) -> tuple[dict[str, Any], float]:
    """({p, m}, the replayed bubble) of a live run: a `perflab.shard.report.PipelineRun`, or its JSON."""
    if isinstance(r, Mapping):
        return {"p": r["p"], "m": r["m"]}, r["replayed_bubble"]
    return {"p": r.p, "m": r.m}, r.replayed_bubble


def check_bubble(student: Callable[[int, int], float], runs: Sequence[Any] | None = None,
                 denominator: str = "step") -> bool:
    """bubble(p, m): closed-form cases, then each live run (p, m, measured bubble) within its tolerance.

    Both conventions of the field are right; the learner says which one `bubble` returns:
    `denominator="step"`, idle over the whole step, (p−1)/(m+p−1); or `denominator="ideal"`, idle
    over the ideal (busy) time, (p−1)/m, as Megatron-LM's paper defines its bubble time fraction.
    A live run measures idle over the step, f; in the "ideal" convention it is graded as f/(1 − f),
    and its tolerance is the step's ±TOL_BUBBLE carried through b = f/(1 − f)."""
    from perflab.shard.run import TOL_BUBBLE

    d = check_denominator(denominator)
    exact = F.bubble_fraction if d == "step" else F.bubble_ratio
    mistakes = BUBBLE_MISTAKES if d == "step" else RATIO_MISTAKES
    cases = [({"p": p, "m": m}, exact(p, m)) for p, m in ((1, 4), (2, 1), (4, 8), (8, 32), (3, 2))]
    if not _grade("pipeline bubble", student, cases, mistakes, rtol=1e-9, atol=1e-12,
                  general="draw the p × (m + p − 1) grid of slots and count the empty ones on one stage; "
                          f"your denominator ({d}): {DENOMINATORS[d]}"):
        return False
    if not runs:
        return True
    if d == "step":
        live = [_live_run(r) for r in runs]
        _grade("pipeline bubble vs the live runs", student, live, mistakes, rtol=0.0, atol=TOL_BUBBLE,
               general=f"your formula must land within ±{TOL_BUBBLE} of each measured bubble")
        return True

    def as_step(p, m):  # the learner's ratio, carried to the step convention the runs measure
        return F.step_fraction_from_ratio(float(student(p, m)))

    live = [_live_run(r) for r in runs]
    for inputs, want in live:
        got = attempt("pipeline bubble vs the live runs", student, what=str(inputs), **inputs)
        if got is NOT_DONE:
            return False
        f = as_step(**inputs)
        if abs(f - want) > TOL_BUBBLE:
            raise LabCheckError(
                f"pipeline bubble vs the live runs: for {inputs} you returned {got!r} (idle over ideal time), that "
                f"is {f:.3f} of the step; the run measured {want:.3f} of the step (f = b/(1 + b), within "
                f"±{TOL_BUBBLE}). Hint: {_diagnose(student, cases, mistakes, 1e-9) or 'recount the idle slots'}")
    record("pipeline bubble vs the live runs", True)
    print(f"✓ pipeline bubble vs the live runs: correct on {len(live)} cases (idle over ideal time b, "
          "compared as b/(1 + b) of the step)")
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


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
def reference_bubble(p: int, m: int) -> float:
    """Idle over the whole step, (p−1)/(m+p−1); `F.bubble_ratio` is the other convention, (p−1)/m."""
    return F.bubble_fraction(p, m)


def reference_fsdp_bytes(params: float, nproc: int) -> float:
    return 16 * params / nproc


LEARNER_ANSWERS = ("bubble", "denominator", "fsdp_bytes")
REFERENCES = {"bubble": reference_bubble, "fsdp_bytes": reference_fsdp_bytes}
def _forbidden() -> tuple:
    """Every formula of perflab.shard.formulas, and the memory lesson's model-state sizes (16 bytes a
    parameter under mixed-precision AdamW is fsdp_bytes' answer); the lab's own tables of mistakes
    (lambdas) are disarmed with the lab module."""
    from perflab.memory import estimate

    own = tuple(f for f in vars(F).values() if callable(f) and getattr(f, "__module__", "") == F.__name__)
    return (*own, estimate.model_state_bytes, estimate.bytes_per_param, estimate.estimate)


FORBIDDEN = _forbidden()


def grading_inputs(rng) -> dict[str, list[dict]]:
    from perflab.grading.checks import draw_int

    bub = [dict(p=draw_int(rng, 1, 64), m=draw_int(rng, 1, 512)) for _ in range(6)]
    fsdp = [dict(params=draw_int(rng, 10**3, 10**11), nproc=draw_int(rng, 1, 1024)) for _ in range(6)]
    return {"bubble": bub, "fsdp_bytes": fsdp}


def judge(answers, rng) -> None:
    from perflab.grading.checks import hidden

    drawn = grading_inputs(rng)
    d = answers.value("denominator", "step")  # the convention the learner names; either is right, in any case
    d = str(d).strip().lower() if isinstance(d, str) else d
    if check_bubble(answers["bubble"], denominator=d):  # a denominator it does not know is refused there
        exact = reference_bubble if d == "step" else F.bubble_ratio
        hidden("bubble on the grading inputs", answers["bubble"], exact, drawn["bubble"], atol=1e-12)
    if check_fsdp_bytes(answers["fsdp_bytes"]):
        hidden("fsdp_bytes on the grading inputs", answers["fsdp_bytes"], reference_fsdp_bytes, drawn["fsdp_bytes"])
