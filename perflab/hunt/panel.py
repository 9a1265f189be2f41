"""Lesson 14's panel and its one-fix-at-a-time measurement: the learner's step re-run with the fixes
ticked, as a waterfall with the share won back and whether parity held.

    >>> fig, line = with_fixes(hunt, loader_workers=True)        # the panel's callback (a Figure and a line)
    >>> nxt = next_fix(hunt, panel.values, adopted)              # the fixes ticked since, measured alone
    >>> nxt.share, nxt.adopted, print(nxt.text())

Both time the step as drawn (with the fixes kept so far) and with the new fixes in turns
(`perflab.hunt.report.rerun`, the hunt's sizes' `reps` rounds), and withhold the share won back when the
machine was busy meanwhile (`perflab.core.verdicts.busy_text`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perflab.hunt.report import Rerun


@dataclass
class WarmUp:
    """The lesson's warm-up: the step with one known regression (no DataLoader workers), timed as given and
    with its fix in turns, and the step's evidence as given."""

    rerun: Rerun
    evidence: dict[str, Any]


def warm_up(sizes) -> WarmUp:
    """Time the warm-up step as given and with two DataLoader workers (`loader_workers`), then read its
    instruments as given (`perflab.hunt.report.collect_evidence`)."""
    from perflab.hunt.report import collect_evidence, rerun
    from perflab.hunt.step import HuntStep

    timed = rerun(("loader",), ["loader_workers"], sizes, reps=sizes.reps)
    step = HuntStep(("loader",), (), sizes)
    try:
        evidence = collect_evidence(step)
    finally:
        step.close()
    return WarmUp(timed, evidence)


def with_fixes(hunt, **ticked: bool):
    """The panel's view: `hunt`'s step as drawn and with the fixes ticked, timed in turns, as a waterfall and
    one line (the share won back, or why it is not told, and whether parity held)."""
    from perflab.hunt import plots
    from perflab.hunt.report import rerun

    fixes = [f for f, on in ticked.items() if on]
    res = rerun(hunt.draw, fixes, hunt.sizes, reps=hunt.sizes.reps)
    fig = plots.waterfall(plots.before_after(res, "as drawn", "with the fixes ticked"),
                          "your step: as drawn, and with the fixes ticked")
    parity = "kept" if res.parity_ok else "BROKEN: a fix changed the model"
    won = (f"won back {res.recovered_share:.0%} of the step" if res.headline() is not None
           else _busy(res))
    return fig, f"{won}; parity {parity}"  # a tuple: the panel draws the figure and prints the line


def _busy(res: Rerun) -> str:
    from perflab.core.verdicts import busy_text

    return busy_text(res.quietness.cause)


@dataclass
class NextFix:
    """One step of the hunt: the fixes ticked since the last (`new`), measured against those kept so far
    (`rerun`, None when nothing new was ticked), and the fixes kept after it (`adopted`)."""

    new: list[str]
    rerun: Rerun | None
    adopted: list[str] = field(default_factory=list)

    @property
    def share(self) -> float | None:
        """The share of the step the new fixes won back; None when nothing was measured or the machine was busy."""
        return None if self.rerun is None else self.rerun.headline()

    def text(self) -> str:
        if self.rerun is None:
            return "no new fix ticked: tick one in the panel above, then run this cell again"
        if not self.rerun.parity_ok:
            return f"parity BROKEN by {', '.join(self.new)}: untick it, it changed the model"
        busy = "" if self.share is not None else f" ({_busy(self.rerun)}: what it won back is not told)"
        return f"parity kept: {', '.join(self.new)} kept{busy}; fixes so far: {', '.join(self.adopted)}"


def next_fix(hunt, ticked: Mapping[str, bool], adopted: Sequence[str]) -> NextFix:
    """The fixes ticked in the panel and not yet kept, measured against the fixes kept so far (`adopted`):
    kept when parity holds."""
    from perflab.hunt.report import rerun

    kept = list(adopted)
    new = [f for f, on in ticked.items() if on and f not in kept]
    if not new:
        return NextFix([], None, kept)
    res = rerun(hunt.draw, new, hunt.sizes, reps=hunt.sizes.reps, before=kept)
    return NextFix(new, res, kept + new if res.parity_ok else kept)
