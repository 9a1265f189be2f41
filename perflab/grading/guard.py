"""Two things every lab check needs besides the right answer: refusing a learner's function that
only calls perflab's own solution, and naming the *kind* of a wrong answer.

    >>> uses_perflab(student, [plan.split_node])       # [] or the names it reaches
    >>> grade_known("ring bytes", student, cases, mistakes=[("the large-N limit", fn, "hint"), ...])

`uses_perflab` reads the function's code (and a class's methods and bases): every global name it
loads, every attribute it reads of a perflab module, and its closure. It is a static look, so it
also sees a call on a branch the checks do not reach.

`grade_known` grades like `perflab.grading.checks.grade` and, when an answer is wrong, compares it
with each named mistake: if the learner's function agrees with one on every case, the message
says which mistake it is ("this is the large-N limit: ..."), otherwise it gives the general hint.
"""

from __future__ import annotations

import inspect
import math
import sys
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from perflab.grading.checks import NOT_DONE, NOT_PASSED, LabCheckError, Verdict, attempt, record


def _codes(code: types.CodeType) -> Iterable[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _functions(obj: Any) -> list[Any]:
    """The plain functions behind `obj`: itself, or a class's own methods (not its bases')."""
    if inspect.isclass(obj):
        out = []
        for k in obj.__mro__:
            if k.__module__.startswith("perflab.") or k is object:
                continue
            for v in vars(k).values():
                if isinstance(v, staticmethod | classmethod):
                    v = v.__func__
                if inspect.isfunction(v):
                    out.append(v)
        return out
    f = inspect.unwrap(obj) if callable(obj) else obj
    return [f] if inspect.isfunction(f) else []


def uses_perflab(student: Any, forbidden: Sequence[Any]) -> list[str]:
    """The names of `forbidden` objects (perflab functions or classes) that `student` reaches."""
    bad = {id(f): getattr(f, "__qualname__", getattr(f, "__name__", repr(f))) for f in forbidden}
    hits: list[str] = []
    if inspect.isclass(student):
        for k in student.__mro__:  # a direct base of one of the learner's own classes
            if k.__module__.startswith("perflab."):
                continue
            hits += [bad[id(b)] for b in k.__bases__ if id(b) in bad]
        # a staticmethod that *is* perflab's function (rope = staticmethod(models.rope_real))
        for k in student.__mro__:
            if k.__module__.startswith("perflab."):
                continue
            for v in vars(k).values():
                inner = v.__func__ if isinstance(v, staticmethod | classmethod) else v
                if id(inner) in bad:
                    hits.append(bad[id(inner)])
    elif id(student) in bad:
        hits.append(bad[id(student)])
    for fn in _functions(student):
        g = fn.__globals__
        cells = [c.cell_contents for c in (fn.__closure__ or ()) if _filled(c)]
        for code in _codes(fn.__code__):
            names = set(code.co_names)
            for name in names:
                obj = g.get(name)
                if obj is None and name.split(".")[0] == "perflab":  # `from perflab.x import y` inside it
                    obj = sys.modules.get(name)
                if obj is None:
                    continue
                if id(obj) in bad:
                    hits.append(bad[id(obj)])
                frontier = [obj] if _is_perflab_module(obj) else []
                for _ in range(4):  # models.rope_real, perflab.numa.plan.split_node, ...
                    nxt = []
                    for mod in frontier:
                        for n in names:
                            a = getattr(mod, n, None)
                            if a is not None and id(a) in bad:
                                hits.append(bad[id(a)])
                            elif _is_perflab_module(a) and a is not mod:
                                nxt.append(a)
                    frontier = nxt
        hits += [bad[id(c)] for c in cells if id(c) in bad]
    return sorted(set(hits))


def _is_perflab_module(obj: Any) -> bool:
    return inspect.ismodule(obj) and obj.__name__.split(".")[0] == "perflab"


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def refuse_perflab(name: str, student: Any, forbidden: Sequence[Any]) -> None:
    """LabCheckError if `student` calls one of perflab's `forbidden` answers."""
    hits = uses_perflab(student, forbidden)
    if hits:
        raise LabCheckError(f"{name}: your answer calls perflab's own {', '.join(hits)}, which computes the answer; "
                            "write the rule yourself (you may use plain Python, math and torch)")


def close(got: Any, want: Any, rtol: float, atol: float) -> bool:
    try:
        return math.isclose(float(got), float(want), rel_tol=rtol, abs_tol=atol)
    except (TypeError, ValueError):
        return got == want


Mistake = tuple[str, Callable[..., Any], str]  # (kind, the wrong function, what to change)


def name_mistake(outputs: Sequence[tuple[dict[str, Any], Any]], mistakes: Sequence[Mistake], *,
                 rtol: float, atol: float) -> Mistake | None:
    """The first named mistake that gives the learner's outputs on every case (None if none does)."""
    for kind, wrong, hint in mistakes:
        try:
            if all(close(got, wrong(**inputs), max(rtol, 1e-9), atol) for inputs, got in outputs):
                return kind, wrong, hint
        except Exception:  # noqa: BLE001 - a mistake's formula that fails on a case simply does not match
            continue
    return None


def grade_known(name: str, student: Callable[..., Any], cases: list[tuple[dict[str, Any], Any]], *,
                mistakes: Sequence[Mistake] = (), rtol: float = 0.0, atol: float = 0.0, hint: str = "",
                forbidden: Sequence[Any] = ()) -> Verdict:
    """`grade` that names the mistake: see the module docstring. True when right, False for a stub."""
    outputs = []
    for inputs, _ in cases:
        got = attempt(name, student, what=str(inputs), **inputs)
        if got is NOT_DONE:
            return NOT_PASSED
        outputs.append((inputs, got))
    refuse_perflab(name, student, forbidden)
    wrong = [(inputs, got, want) for (inputs, got), (_, want) in zip(outputs, cases) if not close(got, want, rtol, atol)]
    if wrong:
        inputs, got, want = wrong[0]
        tol = f" (tolerance {rtol:.0%})" if rtol >= 0.01 else ""
        known = name_mistake(outputs, mistakes, rtol=rtol, atol=atol)
        why = f" This is {known[0]}: {known[2]}" if known else (f" Hint: {hint}" if hint else "")
        raise LabCheckError(f"{name}: for {inputs} you returned {got!r}, expected {want!r}{tol}.{why}")
    print(f"✓ {name}: correct on {len(cases)} cases")
    return record(name, True)
