"""Grading for the labs: a check raises on a wrong answer and says kindly when a stub is not done.

Each lab's checks live in the lesson package (`perflab.flops.lab01`, `perflab.memory.lab03`, ...); they call `grade(...)`, which
* prints one "not done yet" line when the learner's function still raises NotImplementedError (so
  the lab notebook runs as shipped) and returns a `Verdict` that displays nothing more,
* raises `LabCheckError` with what was expected and a hint that names the kind of mistake when the
  answer is wrong (`mistakes=` lists the plausible wrong answers a check recognises; without a
  match, `grade` still says whether the answer ignores an input, is off by a constant factor, or
  fits only some of the cases),
* raises `LabCheckError` too when the learner's function calls the perflab function that computes
  the answer (`forbidden=`): the lab is to write the computation out,
* prints ✓ when it is right.

In a notebook, `install()` (run when this module is imported and again by `reset()`) registers an
IPython handler for `LabCheckError`: a wrong answer shows the check's message and hint as one short
error, not a traceback through the grading code, and the cell still fails (so "Run all" stops
there, and papermill counts the cell as failed).

`summary(require_all=True)` (the solutions' last cell) raises unless every check passed; it returns
a `Summary`, which a notebook shows as a table.

`MultipleChoice` asks questions whose options are shuffled per learner (stable for a user name),
so answering a, b, c, ... in order does not pass.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import html
import math
import random
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from perflab.core.errors import PerflabError


class LabCheckError(PerflabError, AssertionError):
    """The learner's answer is wrong; the message says how."""


_RESULTS: dict[str, str] = {}  # check name -> 'passed' | 'not done' | 'wrong' | 'inconclusive'
_STATE_MARK = {"passed": "✓", "not done": "…", "wrong": "✗", "inconclusive": "?"}


# --- a wrong answer in a notebook: one short error, no traceback -------------------------------

def _show_check_error(shell, etype, value, tb, tb_offset=None):  # IPython's CustomTB signature
    """IPython handler for LabCheckError: the message alone, as the cell's error output."""
    text = f"✗ {value}"
    shell._showtraceback(etype, value, [text])  # publishes the error output; the cell still fails
    return [text]


def install() -> bool:
    """Register the one-line display of `LabCheckError` in the running IPython kernel, if any.

    Returns True when a kernel was found. Safe to call many times; outside IPython it does nothing."""
    ipy = sys.modules.get("IPython")
    get = getattr(ipy, "get_ipython", None) if ipy is not None else None
    shell = get() if get is not None else None
    if shell is None:
        return False
    shell.set_custom_exc((LabCheckError,), _show_check_error)
    return True


def reset() -> None:
    """Forget earlier results (a lab's first cell) and install the notebook error display."""
    _RESULTS.clear()
    install()


# --- what a check returns ----------------------------------------------------------------------

class Verdict:
    """A check's outcome: true when it passed. A notebook displays nothing for it (the check has
    already printed its one line), so a stub's cell shows "not done yet" and no bare `False`."""

    __slots__ = ("passed",)

    def __init__(self, passed: bool):
        self.passed = bool(passed)

    def __bool__(self) -> bool:
        return self.passed

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Verdict):
            return self.passed == other.passed
        if isinstance(other, bool):
            return self.passed == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.passed)

    def __repr__(self) -> str:
        return "Verdict(passed)" if self.passed else "Verdict(not done)"

    def _ipython_display_(self) -> None:  # shown as nothing: the check printed its line already
        return None


PASSED, NOT_PASSED = Verdict(True), Verdict(False)


class Summary(dict):
    """Each check's state (a dict: name -> 'passed' | 'not done' | 'wrong'), shown as a table."""

    def rows(self) -> list[tuple[str, str, str]]:
        return [(_STATE_MARK.get(v, "?"), k, v) for k, v in self.items()]

    def __str__(self) -> str:
        if not self:
            return "no checks ran yet"
        width = max(len(k) for k in self)
        return "\n".join(f"{m} {k:<{width}}  {v}" for m, k, v in self.rows())

    def _repr_pretty_(self, p, cycle) -> None:  # IPython's text display
        p.text(str(self))

    def _repr_html_(self) -> str:
        if not self:
            return "<p>no checks ran yet</p>"
        body = "".join(f"<tr><td>{m}</td><td style='text-align:left;white-space:normal'>{html.escape(k)}</td>"
                       f"<td style='text-align:left'>{html.escape(v)}</td></tr>" for m, k, v in self.rows())
        done = sum(v == "passed" for v in self.values())
        return (f"<table><caption style='text-align:left'>{done} of {len(self)} checks passed</caption>"
                f"<thead><tr><th></th><th style='text-align:left'>check</th><th style='text-align:left'>state</th>"
                f"</tr></thead><tbody>{body}</tbody></table>")


# --- calling the learner's function ------------------------------------------------------------

def _code(fn: Callable[..., Any]):
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__  # type: ignore[attr-defined]  # functools.wraps / lru_cache keep the original here
    return getattr(fn, "__code__", None)


@contextlib.contextmanager
def _watch(forbidden: Sequence[Callable[..., Any]]) -> Iterator[set]:
    """Note which of `forbidden` (perflab functions) run inside the block, however they were imported."""
    codes = {c: f for f in forbidden if (c := _code(f)) is not None}
    seen: set = set()
    if not codes:
        yield seen
        return
    old = sys.getprofile()

    def prof(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            seen.add(codes[frame.f_code])
        if old is not None:
            old(frame, event, arg)

    sys.setprofile(prof)
    try:
        yield seen
    finally:
        sys.setprofile(old)


NOT_DONE = object()  # what `attempt` returns for a stub


def _not_done(name: str) -> None:
    _RESULTS[name] = "not done"
    print(f"… {name}: not done yet — fill in the function and run this cell again.")


def inconclusive(name: str, why: str) -> bool:
    """Record `name` as inconclusive: what it needed was measured while the machine was busy, so no
    verdict is drawn from it either way (`why` says what was disturbed and what to do). A summary that
    requires every check lets it through with a note: a busy machine is not the learner's mistake."""
    _RESULTS[name] = "inconclusive"
    print(f"? {name}: inconclusive: {why}")
    return False


def fail(name: str, message: str) -> LabCheckError:
    """Record `name` as wrong and build the error to raise."""
    _RESULTS[name] = "wrong"
    return LabCheckError(f"{name}: {message}")


def attempt(name: str, student, *args, what: str = "", forbidden: Sequence[Callable[..., Any]] = (), **kwargs) -> Any:
    """Call the learner's function: its answer; NOT_DONE (and a "not done yet" line) while it is
    still the stub; LabCheckError when it returns None (a forgotten `return`) or calls one of the
    `forbidden` perflab functions."""
    try:
        with _watch(forbidden) as seen:
            got = student(*args, **kwargs)
    except NotImplementedError:
        _not_done(name)
        return NOT_DONE
    if seen:
        names = ", ".join(sorted(f"{f.__module__}.{f.__qualname__}" for f in seen))
        raise fail(name, f"your function calls perflab's {names}, which computes the answer. "
                         "Hint: write the computation out yourself; calling perflab is not an answer.")
    if got is None:
        raise fail(name, f"the function returned None for {what}; did you forget `return`?")
    return got


def _close(got: Any, want: Any, rtol: float, atol: float) -> bool:
    try:
        return math.isclose(float(got), float(want), rel_tol=rtol, abs_tol=atol)
    except (TypeError, ValueError):
        return got == want


def _ratio(got: Any, want: Any) -> float | None:
    try:
        g, w = float(got), float(want)
    except (TypeError, ValueError):
        return None
    return g / w if w and math.isfinite(g) else None


def _perturbed(value: Any) -> list[Any]:
    """Other values of an input, to see whether an answer depends on it."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return sorted({value + 1, value * 3 // 2 + 1, max(1, value // 2), 2 * value + 3} - {value})
    if isinstance(value, float):
        return [value * 1.5 + 1e-3, value / 3]
    return []


def _ignored_input(student, reference, inputs: dict[str, Any], rtol: float, atol: float) -> str | None:
    """The first input whose change moves the reference's answer but not the learner's."""
    for key, value in inputs.items():
        for new in _perturbed(value):
            moved = {**inputs, key: new}
            try:
                want0, want1 = reference(**inputs), reference(**moved)
                got0, got1 = student(**inputs), student(**moved)
            except Exception:  # a perturbed input the reference or the learner rejects says nothing
                continue
            if not _close(want0, want1, rtol, atol):
                if _close(got0, got1, 0.0, 0.0):
                    return key
                break
    return None


def diagnose(student, cases: list[tuple[dict[str, Any], Any]], bad: tuple[dict[str, Any], Any, Any], *,
             rtol: float, atol: float, mistakes: Sequence[tuple[str, Callable[..., Any]]] = (),
             reference: Callable[..., Any] | None = None) -> str:
    """The hint for a wrong answer: the mistake it matches, or what its pattern over the cases shows."""
    inputs, want, got = bad
    tol = max(rtol, 1e-9)
    results = []
    for inp, w in cases:
        try:
            results.append((inp, w, student(**inp)))
        except Exception:  # the learner's function failing on another case: report only the first failure
            results.append((inp, w, None))
    for hint, wrong in mistakes:  # a known mistake: it gives the learner's answer on every case
        try:
            if not _close(want, wrong(**inputs), tol, atol) and all(
                    g is None or _close(g, wrong(**inp), tol, atol) for inp, _w, g in results):
                return hint
        except Exception:  # a mistake model that cannot handle these inputs does not match
            continue
    right = sum(_close(g, w, rtol, atol) for _i, w, g in results if g is not None)
    found = []
    if 0 < right < len(results):
        found.append(f"right on {right} of {len(results)} cases, wrong on this one: the formula fits only some cases "
                     "(a special case, or an edge such as a ragged or non-power-of-two size)")
    if reference is not None:
        key = _ignored_input(student, reference, inputs, rtol, atol)
        if key is not None:
            found.append(f"your answer does not change when `{key}` changes, but the right one does: the formula "
                         "ignores an input")
    ratios = [_ratio(g, w) for _i, w, g in results]
    if not found and right == 0 and ratios and all(r is not None for r in ratios):
        r0 = ratios[0]
        if r0 and all(math.isclose(r, r0, rel_tol=1e-6) for r in ratios if r is not None):
            found.append(f"every answer is {r0:.4g}× the right one: a constant factor is off (a convention or a unit)")
    return "; ".join(found)


def grade(name: str, student: Callable[..., Any], cases: list[tuple[dict[str, Any], Any]], *,
          rtol: float = 0.0, atol: float = 0.0, hint: str = "",
          mistakes: Sequence[tuple[str, Callable[..., Any]]] = (), reference: Callable[..., Any] | None = None,
          forbidden: Sequence[Callable[..., Any]] = ()) -> Verdict:
    """Call `student(**inputs)` for each case and compare with the expected value.

    `mistakes`: (hint, function) pairs, plausible wrong answers this check names when the learner's
    answer equals one of them. `reference`: the right function, used to tell which input a wrong
    answer ignores. `forbidden`: perflab functions the learner's code may not call.
    Returns a true `Verdict` when all cases pass, a false one when the function is still a stub."""
    for inputs, want in cases:
        got = attempt(name, student, what=str(inputs), forbidden=forbidden, **inputs)
        if got is NOT_DONE:
            return NOT_PASSED
        if not _close(got, want, rtol, atol):
            tol = f" (tolerance {rtol:.0%})" if rtol >= 0.01 else (f" (tolerance {rtol:.1g})" if rtol else "")
            why = diagnose(student, cases, (inputs, want, got), rtol=rtol, atol=atol, mistakes=mistakes,
                           reference=reference)
            hints = "; ".join(h for h in (why, hint) if h)
            more = f" Hint: {hints}." if hints else ""
            raise fail(name, f"for {_show(inputs)} you returned {_short(got)}, expected {_short(want)}{tol}.{more}")
    _RESULTS[name] = "passed"
    print(f"✓ {name}: correct on {len(cases)} case{'s' if len(cases) != 1 else ''}")
    return PASSED


def _short(x: Any, limit: int = 120) -> str:
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 20] + f" … ({len(text)} characters)"


def _show(inputs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_short(v, 60)}" for k, v in inputs.items())


def record(name: str, passed: bool) -> Verdict:
    _RESULTS[name] = "passed" if passed else "not done"
    return Verdict(passed)


def summary(require_all: bool = False) -> Summary:
    """Each check's state, as a table in a notebook; with `require_all`, raise unless every one passed."""
    out = Summary(_RESULTS)
    if require_all:
        missing = [k for k, v in _RESULTS.items() if v not in ("passed", "inconclusive")]
        if missing or not _RESULTS:
            raise LabCheckError(f"not every check passed: {', '.join(missing) or 'no checks ran'}")
    return out


# --- multiple choice, shuffled per learner -----------------------------------------------------

def learner() -> str:
    """The learner's name (what seeds the shuffles): PERFLAB_LEARNER (which `perflab grade` sets to
    the submission's folder), else the user name; 'learner' when the system has none."""
    import os

    if os.environ.get("PERFLAB_LEARNER"):
        return os.environ["PERFLAB_LEARNER"]
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment (some containers): one fixed order for all
        return "learner"


def shuffled_order(n: int, salt: str, user: str | None = None) -> list[int]:
    """A permutation of range(n), stable for (user, salt), and never the identity when n > 1."""
    who = learner() if user is None else user
    seed = int.from_bytes(hashlib.sha256(f"{who}\x00{salt}".encode()).digest()[:8], "big")
    rng = random.Random(seed)
    order = list(range(n))
    while n > 1:
        rng.shuffle(order)
        if order != list(range(n)):
            break
    return order


class MultipleChoice:
    """Questions that each pick one option from a shared list, shown in an order of the learner's own.

        >>> quiz = MultipleChoice("fixes", ["slow input", "too many syncs"],
        ...                       ["more workers", "drop .item() in the loop"], correct=[0, 1])
        >>> quiz                      # a table: each question, and the options lettered a, b, ...
        >>> quiz.check(["b", "a"])    # letters as shown to this learner

    `correct[i]` is the index, in `options` as written here, of question i's answer. The letters are
    assigned by a shuffle seeded with the learner's user name and `name`: stable across runs for a
    learner, different between learners, and never the written order, so answering a, b, c, ... in
    order (or copying the written order) does not pass."""

    def __init__(self, name: str, questions: Sequence[str], options: Sequence[str], correct: Sequence[int], *,
                 user: str | None = None):
        if len(correct) != len(questions):
            raise ValueError("one correct option per question")
        if any(not 0 <= c < len(options) for c in correct):
            raise ValueError("a correct index outside the options")
        self.name, self.questions, self.options, self.correct = name, list(questions), list(options), list(correct)
        order = shuffled_order(len(options), name, user)
        if len(questions) > 1 and len(options) <= len(questions) + 1:
            for k in range(1, 64):  # with few options, also make "a, b, c, …" wrong on every question
                if all(order[i] != c for i, c in enumerate(self.correct) if i < len(order)):
                    break
                order = shuffled_order(len(options), f"{name}#{k}", user)
        self.order = order  # letter position -> index in `options`
        self.letters = [chr(ord("a") + i) for i in range(len(options))]

    def letter_of(self, option_index: int) -> str:
        return self.letters[self.order.index(option_index)]

    def option_of(self, letter: str) -> int | None:
        letter = str(letter).strip().lower().rstrip(")")
        return self.order[self.letters.index(letter)] if letter in self.letters else None

    def answer_key(self) -> list[str]:
        """The right letters for this learner (the solutions use it; the lab does not show it)."""
        return [self.letter_of(c) for c in self.correct]

    def __str__(self) -> str:
        qs = "\n".join(f"  {i + 1}. {q}" for i, q in enumerate(self.questions))
        opts = "\n".join(f"  {ltr}) {self.options[j]}" for ltr, j in zip(self.letters, self.order, strict=True))
        return f"{self.name}\nquestions:\n{qs}\noptions:\n{opts}"

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str:
        qs = "".join(f"<li>{html.escape(q)}</li>" for q in self.questions)
        opts = "".join(f"<tr><td><b>{ltr}</b></td><td style='text-align:left;white-space:normal'>"
                       f"{html.escape(self.options[j])}</td></tr>"
                       for ltr, j in zip(self.letters, self.order, strict=True))
        return (f"<div><b>{html.escape(self.name)}</b><ol>{qs}</ol>"
                f"<table><thead><tr><th>letter</th><th style='text-align:left'>option</th></tr></thead>"
                f"<tbody>{opts}</tbody></table></div>")

    def check(self, answers: Sequence[str] | str | None) -> Verdict:
        """Grade the learner's letters, one per question (a list, or one string "b, a, d")."""
        if answers is None or answers is Ellipsis or (isinstance(answers, (list, tuple)) and not answers):
            _not_done(self.name)
            return NOT_PASSED
        if isinstance(answers, str):
            answers = [a for a in answers.replace(",", " ").split() if a]
        answers = list(answers)
        if len(answers) != len(self.questions):
            raise fail(self.name, f"{len(self.questions)} answers needed, one letter per question, got {len(answers)}")
        wrong = []
        for i, (a, c) in enumerate(zip(answers, self.correct, strict=True)):
            picked = self.option_of(a)
            if picked is None:
                raise fail(self.name, f"question {i + 1}: {a!r} is not one of the letters "
                                      f"{', '.join(self.letters)}")
            if picked != c:
                wrong.append(i + 1)
        if wrong:
            which = ", ".join(str(w) for w in wrong)
            raise fail(self.name, f"question{'s' if len(wrong) > 1 else ''} {which} "
                                  f"{'are' if len(wrong) > 1 else 'is'} not right yet. Hint: reread the "
                                  "section each question names; the options are shuffled for you, so guessing "
                                  "in order does not work.")
        _RESULTS[self.name] = "passed"
        n = len(self.questions)
        print(f"✓ {self.name}: " + (f"all {n} answers right" if n > 1 else "right"))
        return PASSED


install()


# --- grading apart from the notebook (perflab grade): inputs the learner never sees ------------

def _close_any(got: Any, want: Any, rtol: float, atol: float) -> bool:
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(got) == len(want) and all(_close_any(g, w, rtol, atol) for g, w in zip(got, want, strict=True))
    if isinstance(got, bool) or isinstance(want, bool):
        return got == want
    return _close(got, want, rtol, atol)


def hidden(name: str, student: Callable[..., Any], reference: Callable[..., Any] | Sequence[Callable[..., Any]],
           inputs: Sequence[dict[str, Any]], *, rtol: float = 1e-9, atol: float = 0.0) -> Verdict:
    """Grade `student` on grading inputs (drawn per learner by `perflab grade`, never shipped): each
    answer within tolerance of perflab's reference, or of one of several accepted references.
    Records `name`; raises LabCheckError on the first wrong answer."""
    refs: list[Callable[..., Any]] = list(reference) if isinstance(reference, (list, tuple)) else [reference]  # type: ignore[list-item]
    for inp in inputs:
        got = attempt(name, student, what=str(inp), **inp)
        if got is NOT_DONE:
            return NOT_PASSED
        wants = [r(**inp) for r in refs]
        if not any(_close_any(got, w, rtol, atol) for w in wants):
            raise fail(name, f"for {_show(inp)} you returned {_short(got)}, expected {_short(wants[0])}: right on "
                             "the lab's cases, wrong on the grading inputs (a formula that fits only the cases shown?)")
    _RESULTS[name] = "passed"
    return PASSED


def draw_int(rng: random.Random, lo: int, hi: int) -> int:
    """A grading input in [lo, hi], log-uniform (small and large sizes alike), odd sizes included."""
    if lo >= hi:
        return lo
    v = int(round(math.exp(rng.uniform(math.log(max(lo, 1)), math.log(hi)))))
    return min(hi, max(lo, v))
