"""Which part of a step's time each rung of the ladder acts on (the waterfall's parts, lesson 11).

The most a rung can save is the time of the parts it acts on; the largest lever of a step is the
rung that applies to it and acts on its largest part. `perflab audit` orders its recommendations by
this, and lab 11's audit exercise grades it.
"""

from __future__ import annotations

from perflab.tune.waterfall import CATEGORIES

PARTS = CATEGORIES  # the waterfall's parts, one spelling for the ladder, the waterfall and `perflab audit`

ACTS_ON: dict[str, tuple[str, ...]] = {
    "bf16": ("compute",),
    "adamw": ("optimizer",),
    "vocab64": ("compute",),
    "sdpa": ("compute",),
    "compile": ("launch_overhead", "compute"),
    "batch": ("launch_overhead",),
    "checkpoint": ("compute",),
    "loader": ("data_wait",),
    "numa": ("data_wait", "compute"),
}


def can_save(rung: str, breakdown: dict[str, float]) -> float:
    """Seconds of the parts `rung` acts on: the most it can save."""
    return sum(breakdown.get(p, 0.0) for p in ACTS_ON.get(rung, ("compute",)))
