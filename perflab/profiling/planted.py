"""Lesson 09's planted faults side by side: each profiled at the lesson's sizes, their diagnoses in one
table, the fault that idles the device most, and each fix profiled again.

    >>> runs = profile_planted(size, folder)           # {"loader": ProfileRun, ...} at `size` (perflab.profiling.sizes)
    >>> table = FaultTable.of({"none": base, **runs})
    >>> table.table()                                  # step, device busy, top cause, its share, evidence, machine
    >>> table.worst()                                  # the fault with the largest top-cause share; None if a run was disturbed

Every profiled run carries the machine's quietness (`ProfileRun.info["quietness"]`, `perflab.core.quietness`):
the table shows it, and the worst fault is not named from a run that other programs disturbed ("inconclusive:
the machine was busy (…)", `perflab.core.verdicts.busy_text`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.core.quietness import Quietness, as_quietness
from perflab.core.readout import percent, seconds
from perflab.core.verdicts import busy_text
from perflab.profiling.diagnose import FIXES, NONE_THRESHOLD, Diagnosis
from perflab.profiling.faults import EXPECTED, ProfileRun, profile_step


def profile(size: Any, fault: str, folder: Path, *, fixed: bool = False, **kw: Any) -> ProfileRun:
    """`profile_step` of `fault` at `size` (a `perflab.profiling.sizes.Sizes`), its trace in `folder`."""
    name = f"{'fixed' if fixed else 'step'}_{fault}.json"
    return profile_step(fault=fault, fixed=fixed, steps=size.steps, trace_out=Path(folder) / name, **size.step_of(fault),
                        **kw)


def profile_planted(size: Any, folder: Path) -> dict[str, ProfileRun]:
    """Every planted fault of `size.planted()`, profiled in turn."""
    return {f: profile(size, f, folder) for f in size.planted()}


def quietness_of(run: ProfileRun) -> Quietness:
    return as_quietness(run.info.get("quietness"))


def _share(d: Diagnosis, cause: str | None) -> float:
    return next((c.share for c in d.causes if c.cause == cause), 0.0)


@dataclass(frozen=True)
class FaultTable:
    """Each profiled run's diagnosis (the healthy step's first), with the machine while it ran."""

    runs: tuple[tuple[str, ProfileRun], ...]

    @classmethod
    def of(cls, runs: dict[str, ProfileRun]) -> FaultTable:
        return cls(tuple(runs.items()))

    def table(self):
        """One row per run: the step, the device's busy share, the top cause and its share, the evidence."""
        import pandas as pd

        rows = []
        for f, r in self.runs:
            d = r.diagnosis
            top = d.top
            rows.append({"fault": f, "model": f"{r.preset}, {r.batch} × {r.seq}", "step": seconds(d.step_s),
                         "device busy": percent(d.device_busy),
                         "top cause": top.cause if d.significant() and top else f"none above {percent(NONE_THRESHOLD)}",
                         "its share": percent(top.share) if top else "—",
                         "evidence": top.evidence[0].op if top and top.evidence else "—",
                         "machine": quietness_of(r).line()})
        return pd.DataFrame(rows).set_index("fault")

    @property
    def disturbed(self) -> list[str]:
        return [f for f, r in self.runs if quietness_of(r).disturbed]

    def worst(self, among: list[str] | None = None) -> str | None:
        """The planted fault whose top cause takes the largest share of its step; None when a run was disturbed."""
        if self.disturbed:
            return None
        pool = [(f, r) for f, r in self.runs if f != "none" and (among is None or f in among)]
        if not pool:
            return None
        return max(pool, key=lambda fr: fr[1].diagnosis.top.share if fr[1].diagnosis.top else 0.0)[0]

    def worst_line(self) -> str:
        """The worst fault in a sentence, or why the lesson names none."""
        w = self.worst()
        if w is not None:
            d = dict(self.runs)[w].diagnosis
            return f"the worst: {w}, whose {d.top.cause if d.top else 'idle time'} takes {percent(d.top.share if d.top else 0)} of its step"
        if self.disturbed:
            causes = "; ".join(f"{f}: {quietness_of(r).cause}" for f, r in self.runs if quietness_of(r).disturbed)
            return f"which fault idles the device most: {busy_text(causes)}"
        return "no planted fault was profiled"


def healthy_line(run: ProfileRun) -> str:
    """What the healthy step's diagnosis says about this model on this device, in a sentence."""
    d = run.diagnosis
    where = "GPU" if "GPU" in d.device else "CPU"
    head = f"the healthy step ({run.preset}, batch {run.batch} × {run.seq} tokens): the device busy {percent(d.device_busy)} of a {seconds(d.step_s)} step"
    if d.significant() and d.top is not None and d.top.cause == "launch_bound":
        return (f"{head}; launch-bound ({percent(d.top.share)}): the device finishes each op before the host issues the "
                f"next. This step is too small for this {where} to show a planted fault clearly: profile a larger model "
                "or batch.")
    if d.significant() and d.top is not None:
        return f"{head}; its top cause, {d.top.cause}, takes {percent(d.top.share)}: look at the evidence before planting faults."
    return f"{head}; no cause above {percent(NONE_THRESHOLD)}: the baseline the planted faults are read against."


@dataclass(frozen=True)
class FixTable:
    """Each fixed fault against its planted run: its cause's share and the step, before and after."""

    rows: tuple[tuple[str, ProfileRun, ProfileRun], ...]  # (fault, planted run, fixed run)

    def table(self):
        import pandas as pd

        out = []
        for f, before, after in self.rows:
            cause = EXPECTED[f]
            out.append({"fault": f, "cause": cause, "share before": percent(_share(before.diagnosis, cause)),
                        "share after the fix": percent(_share(after.diagnosis, cause)),
                        "step before": seconds(before.diagnosis.step_s), "step after": seconds(after.diagnosis.step_s),
                        "fix": FIXES.get(cause or "", "—"), "machine": quietness_of(after).line()})
        return pd.DataFrame(out).set_index("fault")


def profile_fixes(size: Any, folder: Path, planted: dict[str, ProfileRun]) -> FixTable:
    """Each fault of `size.fixed()` profiled again with its fix, beside its planted run."""
    return FixTable(tuple((f, planted[f], profile(size, f, folder, fixed=True)) for f in size.fixed() if f in planted))
