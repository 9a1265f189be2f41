"""A lesson's sizes by where it runs, read once: the one rule every lesson's size table follows.

Each topic package keeps its lessons' sizes as a table (`perflab.<topic>.sizes.SIZES`): one frozen
dataclass of sizes per kind of run,

* `smoke`: tiny sizes, for the automated tests (the lesson's cells run and its claims hold);
* `cpu`: what a learner's CPU measures within the lesson's time budget;
* `gpu`: the sizes that fill a GPU.

`for_run(table, smoke, device)` picks one (a CPU table is optional: without it a CPU runs the GPU's
sizes), and a lesson reads its sizes from it (`size = ctx.sizes(SIZES)`), never sizing a cell itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from perflab.core.errors import InputError

T = TypeVar("T")
KINDS = ("smoke", "cpu", "gpu")


def kind_of(smoke: bool, device: Any) -> str:
    """'smoke', 'gpu' (a CUDA device) or 'cpu' (anything else: a CPU, Apple's MPS)."""
    if smoke:
        return "smoke"
    kind = getattr(device, "type", None) or str(device or "cpu").split(":")[0]
    return "gpu" if kind == "cuda" else "cpu"


def for_run(table: Mapping[str, T], smoke: bool, device: Any) -> T:
    """The sizes of `table` for this run (module docstring)."""
    unknown = set(table) - set(KINDS)
    if unknown or "smoke" not in table or "gpu" not in table:
        raise InputError(f"a size table has 'smoke' and 'gpu' (and optionally 'cpu') rows, got {sorted(table)}")
    kind = kind_of(smoke, device)
    return table[kind] if kind in table else table["gpu"]
