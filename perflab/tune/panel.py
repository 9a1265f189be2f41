"""Lesson 11's panel: the learner's own ladder, the rungs ticked applied in the ladder's order.

    >>> fig, table = my_ladder(preset("cpu"), ["baseline", "bf16", "sdpa"], "cpu", bf16=True, sdpa=False)

Every rung not measured yet is measured (interleaved with the step before it, `perflab.tune.runner`); the
others are read back from the saved rows, so a change of the panel answers in a few seconds.
"""

from __future__ import annotations

from collections.abc import Sequence


def my_ladder(tp, rungs: Sequence[str], device, **chosen: bool):
    """The baseline and the rungs of `rungs` ticked in `chosen`, climbed in the ladder's order: the waterfall
    (with the final speed-up over the baseline in its title) and the ladder's table."""
    from perflab.tune import plots, runner

    picked = [r for r in rungs if r != "baseline" and chosen.get(r)]
    mine = runner.run_ladder(tp, ["baseline", *picked], device=device)
    fig = plots.waterfall(mine.rows, title=f"your ladder: {mine.final['speedup_vs_baseline']:.2f}× the baseline")
    return fig, mine.frame()
