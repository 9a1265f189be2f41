"""The learner's answers as a lab's `judge` sees them, in the judge's process.

`Answers` maps each name the lab grades to a proxy that calls the learner's function in the
confined worker (worker.py); `value` reads a top-level value there, `probe` runs one of perflab's
probes on the learner's object there, `literal` and `first_cell_calling` read the notebook's
source (answer_source.py), and `measure` makes a measurement a lab needs from a layer above its
own, here, in the grader's process (`MEASUREMENTS`). A name the notebook does not define is a stub
that raises NotImplementedError (`not done`).

What a probe returns was computed where the learner's code runs, so it is evidence to check, never
a grade: `apart` runs one of perflab's functions on it in a fresh confined worker that has run no
learner code (lab 10 runs there the graph the learner's model was traced to), and `ranks` runs a
learner's function on ranks that can only talk through the judge, which counts what each sends
and compares what each returns (ranks.py: lab 06's ring).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from perflab.classroom.answer_source import first_cell_calling, is_literal
from perflab.classroom.worker import Confinement, Worker
from perflab.core.jsonable import JSON

if TYPE_CHECKING:
    from perflab.classroom.ranks import RankRun


def _slow_data_audit() -> JSON:
    """The audit of lab 11's slow-DataLoader step, as its JSON fields (what `perflab audit --json`
    prints, which the lab's check reads)."""
    from perflab.audit import examples
    from perflab.audit.run import run_audit
    from perflab.audit.target import target_from

    audit = run_audit(target_from(examples.slow_data_step(True), "tiny GPT, slow DataLoader"), device="cpu",
                      steps=2, explain_breaks=False)
    return audit.json


MEASUREMENTS: dict[str, Callable[[], Any]] = {"slow_data_audit": _slow_data_audit}


class Answers(Mapping[str, Any]):
    """The learner's answers as the lab's `judge` sees them: `answers["fn"]` is a proxy that calls
    the learner's function in the worker; `answers.value("x")` reads a top-level value there."""

    def __init__(self, worker: Worker, names: Sequence[str], where: Mapping[str, int], code: str = "",
                 nb: Mapping[str, Any] | None = None, learner: str = "", *, lab: Any = None,
                 confine: Confinement | None = None, course_dirs: Sequence[str] = ()):
        self.worker, self.names, self.where, self.code = worker, list(names), dict(where), code
        self.nb, self.learner = nb or {}, learner
        self.lab, self.confine, self.course_dirs = lab, confine or Confinement(), tuple(course_dirs)

    def apart(self, probe: str, *args, **kwargs) -> Any:
        """perflab's `module:function` called on `args` in a fresh worker, confined as the learner's
        is, that runs no learner code: what it returns was computed where the learner never ran."""
        w = Worker("", [], self.lab, course_dirs=self.course_dirs, learner=self.learner, confine=self.confine)
        try:
            return w.run(probe, *args, **kwargs)
        finally:
            w.close()

    def ranks(self, name: str, inputs: Sequence[Sequence[Any]], *, timeout: float = 120.0) -> RankRun:
        """The learner's function `name` run on `len(inputs)` ranks, one call per input of each rank's
        list, the ranks talking point-to-point only through this process (ranks.py)."""
        from perflab.classroom.ranks import run_ranks

        if name not in self.where:
            raise NotImplementedError(f"{name} is not defined at the top level of the notebook")
        return run_ranks(self.code, name, inputs, confine=self.confine, timeout=timeout)

    def literal(self, name: str) -> bool:
        """Whether `name`'s last top-level assignment is a literal (a number, list or dict written out)."""
        return is_literal(self.nb, name)

    def first_cell_calling(self, function: str, using: str | None = None) -> int | None:
        """The first cell that calls `function` (with `using` among its arguments when given), however
        the call is spelled (answer_source.first_cell_calling)."""
        return first_cell_calling(self.nb, function, using)

    def probe(self, name: str, probe: str, *args, **kwargs) -> Any:
        """`module:function` of perflab, called in the worker on the learner's object `name`; its
        result comes back as JSON, for this process to compare."""
        if name not in self.where:
            return {"not_done": True}
        try:
            return self.worker.ask("probe", name, (probe, *args), kwargs)
        except NotImplementedError:
            return {"not_done": True}

    def source(self, name: str) -> str | None:
        """The code taken from the notebook for `name` (its definition and what it needs)."""
        return self.code if name in self.where else None

    def __getitem__(self, name: str) -> Callable[..., Any]:
        if name not in self.where:
            return _stub(name)
        w = self.worker

        def proxy(*args, **kwargs):
            return w.call(name, *args, **kwargs)

        proxy.__name__ = proxy.__qualname__ = name
        return proxy

    def measure(self, name: str) -> Any:
        """A measurement a lab's `judge` needs from a layer above its own, made here, in the grader's
        process (`MEASUREMENTS`): lab 11's audit exercise reads an audit of `perflab.audit.examples`."""
        if name not in MEASUREMENTS:
            raise KeyError(f"no measurement {name!r} for a lab's judge")
        return MEASUREMENTS[name]()

    def value(self, name: str, default: Any = None) -> Any:
        if name not in self.where:
            return default
        try:
            return self.worker.value(name)
        except NotImplementedError:
            return default

    def __iter__(self):
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def _stub(name: str) -> Callable[..., Any]:
    def missing(*args, **kwargs):
        raise NotImplementedError(f"{name} is not defined at the top level of the notebook")

    missing.__name__ = name
    return missing
