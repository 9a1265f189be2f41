"""Grading for the labs: a check raises on a wrong answer and says kindly when a stub is not done.

Each lab's checks live in the lesson package (`perflab.flops.lab01`, `perflab.memory.lab03`, ...); they call `grade(...)`, which
* returns quietly with a "not done yet" note when the learner's function still raises
  NotImplementedError (so the lab notebook runs as shipped),
* raises `LabCheckError` with what was expected when the answer is wrong,
* prints ✓ when it is right.
`summary(require_all=True)` (the solutions' last cell) raises unless every check passed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from perflab.core.errors import PerflabError


class LabCheckError(PerflabError, AssertionError):
    """The learner's answer is wrong; the message says how."""


_RESULTS: dict[str, str] = {}  # check name -> 'passed' | 'not done'


def reset() -> None:
    _RESULTS.clear()


def _close(got: Any, want: Any, rtol: float, atol: float) -> bool:
    try:
        return math.isclose(float(got), float(want), rel_tol=rtol, abs_tol=atol)
    except (TypeError, ValueError):
        return got == want


NOT_DONE = object()  # what `attempt` returns for a stub


def attempt(name: str, student, *args, what: str = "", **kwargs):
    """Call the learner's function: its answer; NOT_DONE (and a kind line) while it is still the
    stub; LabCheckError when it returns None (a forgotten `return`)."""
    try:
        got = student(*args, **kwargs)
    except NotImplementedError:
        _RESULTS[name] = "not done"
        print(f"… {name}: not done yet — fill in the function and run this cell again.")
        return NOT_DONE
    if got is None:
        raise LabCheckError(f"{name}: the function returned None for {what}; did you forget `return`?")
    return got


def grade(name: str, student: Callable[..., Any], cases: list[tuple[dict[str, Any], Any]], *,
          rtol: float = 0.0, atol: float = 0.0, hint: str = "") -> bool:
    """Call `student(**inputs)` for each case and compare with the expected value.

    Returns True when all cases pass, False when the function is still a stub.
    """
    for inputs, want in cases:
        got = attempt(name, student, what=str(inputs), **inputs)
        if got is NOT_DONE:
            return False
        if not _close(got, want, rtol, atol):
            tol = f" (tolerance {rtol:.0%})" if rtol else ""
            more = f" Hint: {hint}" if hint else ""
            raise LabCheckError(f"{name}: for {inputs} you returned {got!r}, expected {want!r}{tol}.{more}")
    _RESULTS[name] = "passed"
    print(f"✓ {name}: correct on {len(cases)} cases")
    return True


def record(name: str, passed: bool) -> None:
    _RESULTS[name] = "passed" if passed else "not done"


def summary(require_all: bool = False) -> dict[str, str]:
    """Print each check's state; with `require_all`, raise unless every one passed."""
    for k, v in _RESULTS.items():
        print(f"{'✓' if v == 'passed' else '…'} {k}: {v}")
    if require_all:
        missing = [k for k, v in _RESULTS.items() if v != "passed"]
        if missing or not _RESULTS:
            raise LabCheckError(f"not every check passed: {', '.join(missing) or 'no checks ran'}")
    return dict(_RESULTS)
