"""One store of a device's measured matmul ceilings, and one rule for what it keeps.

A ceiling is what a matmul was seen to reach on this device: TFLOP/s for one dtype, with the
shape, the statistic, the date, the machine's quietness and the torch version it was measured
with. Two measurements offer one, each to its own slot of the same store:

* **the MFU basis** (kind `basis`; `perflab.flops.basis`): the fastest call of one fixed-shape
  matmul (`perflab.flops.basis.ceiling_shape`, the same shape whoever asks), per dtype, shape and
  torch version. Where perflab's table has no spec-sheet peak for a device and dtype (a CPU, an
  unknown GPU), every MFU and HFU (lesson 02, `perflab audit`, the ladder) divides by it.
* **a MAMF search's best** (kind `search`; `perflab.gemm.mamf`): the best shape of a search over
  ranges of shapes (lesson 04), its figure the statistic the search ranks by (the mean by default),
  per dtype. Lessons 04, 09 and 13 and `perflab report` measure kernels against it
  (`perflab.gemm.mamf.measured_ceiling`).

**How the two relate.** An MFU divides by the basis, never by a search's best. A search's best
depends on the ranges searched (a later, wider search may find a faster shape) and is a mean over
calls; the basis is one shape measured the same way by everyone, so an MFU measured in lesson 02 and
one the audit measures a week later divide by the same figure. A search's best answers another
question: how far is this kernel from the fastest matmul found here? Lesson 02 shows the spec
peak (or a CPU's estimate) beside the basis; lesson 04 the search's best beside the spec peak.

**The rule** (`admit`, the only place it is written): an offered ceiling is stored only when

1. it is not above the device's peak, the spec sheet's or a CPU's estimate
   (`perflab.core.hardware.ceiling_problem`): a ceiling cannot exceed the peak;
2. its figure repeated when measured again, where its measurement asks that (a search's best:
   `confirmed`); one fixed-shape measurement does not ask (`confirmed` None);
3. the machine was quiet while it was measured (`perflab.core.quietness`, verdict 'quiet');
4. it would not replace a stored version measured on a quieter machine (a smaller share of others'
   use of the device; at equal quietness the newer wins).

Otherwise it is kept as its slot's latest offer with `questioned` saying why, and the stored
version stays. A stored version is never edited: a re-measure that passes is the next version.

**The store**: `<results>/<host>/<device>/ceilings.json`, one file per device: for each slot every
stored version (oldest first) and the latest offer. Files an earlier perflab kept under other rules
are not read: a ceiling is stored only through `admit`, so a device without this file measures again.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perflab.core.hardware import Peaks
from perflab.core.jsonable import JSON, to_json
from perflab.core.quietness import Quietness, as_quietness

STORE = "ceilings"  # <results>/<host>/<device>/ceilings.json
KINDS = ("basis", "search")
FORMAT = 1


@dataclass(frozen=True)
class CeilingRecord:
    """One measured ceiling, stored or offered. TFLOP/s; `shape` is the (m, n, k) of the matmul."""

    tflops: float
    dtype: str
    shape: tuple[int, int, int]
    statistic: str  # 'fastest call' (the MFU basis), or what a search ranks by: 'mean', 'median', 'max'
    what: str  # the measurement in words
    date: str
    quietness: Quietness  # the machine while it was measured
    torch: str  # torch version
    device: str  # the device's name
    kind: str = "basis"  # 'basis' (the MFU's fixed shape) or 'search' (a MAMF search's best)
    version: int | None = None  # 1, 2, ... in its slot once stored; None when not stored
    questioned: str | None = None  # why it was not stored
    confirmed: bool | None = None  # its figure repeated when measured again; None: not asked
    details: Mapping[str, Any] = field(default_factory=dict)  # what else the measurement recorded

    @property
    def stored(self) -> bool:
        return self.version is not None

    @property
    def slot(self) -> str:
        return slot_key(self.kind, self.dtype, self.shape, self.torch)

    def shape_text(self) -> str:
        return "×".join(str(x) for x in self.shape)

    def to_json(self) -> JSON:
        return {"tflops": self.tflops, "dtype": self.dtype, "shape": list(self.shape), "statistic": self.statistic,
                "what": self.what, "date": self.date, "quietness": self.quietness.to_json(), "torch": self.torch,
                "device": self.device, "kind": self.kind, "version": self.version, "questioned": self.questioned,
                "confirmed": self.confirmed, "details": to_json(dict(self.details))}

    @staticmethod
    def from_json(d: Any) -> CeilingRecord | None:
        """The inverse of `to_json`; None for anything that is not a record (a damaged file)."""
        try:
            m, n, k = (int(x) for x in d["shape"])
            version = d.get("version")
            return CeilingRecord(float(d["tflops"]), str(d["dtype"]), (m, n, k), str(d.get("statistic") or ""),
                                 str(d.get("what") or ""), str(d.get("date") or "undated"),
                                 as_quietness(d.get("quietness")), str(d.get("torch") or ""),
                                 str(d.get("device") or ""), str(d.get("kind") or "basis"),
                                 int(version) if isinstance(version, int) else None, d.get("questioned"),
                                 d.get("confirmed"), dict(d.get("details") or {}))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def slot_key(kind: str, dtype: str, shape: tuple[int, int, int] | None = None, torch_version: str | None = None) -> str:
    """The slot a record belongs to: '<dtype> search' for a search's best (one per dtype), and
    '<dtype> <m>x<n>x<k> torch <version>' for the MFU basis."""
    if kind not in KINDS:
        raise ValueError(f"unknown ceiling kind {kind!r}: use {' or '.join(KINDS)}")
    if kind == "search":
        return f"{dtype} search"
    if shape is None or torch_version is None:
        raise ValueError("the MFU basis's slot needs the shape and the torch version")
    return f"{dtype} {shape[0]}x{shape[1]}x{shape[2]} torch {torch_version}"


@dataclass
class Slot:
    """Every stored version of one slot, oldest first, and the latest record offered to it."""

    stored: list[CeilingRecord] = field(default_factory=list)
    last: CeilingRecord | None = None

    @property
    def current(self) -> CeilingRecord | None:
        """The stored version in force (the newest), or None."""
        return self.stored[-1] if self.stored else None

    @property
    def previous(self) -> CeilingRecord | None:
        return self.stored[-2] if len(self.stored) > 1 else None


@dataclass
class Store:
    """One device's ceilings, as read from (and written to) `path`."""

    path: Path
    slots: dict[str, Slot] = field(default_factory=dict)

    def slot(self, key: str) -> Slot:
        return self.slots.get(key) or Slot()

    def to_json(self) -> JSON:
        return {"format": FORMAT, "slots": {k: {"stored": [r.to_json() for r in s.stored],
                                                "last": s.last.to_json() if s.last else None}
                                            for k, s in self.slots.items()}}


def store_path(device_slug: str, host: str | None = None) -> Path:
    """<results>/<host>/<device>/ceilings.json."""
    from perflab.core.results import sweep_path

    return sweep_path(STORE, device_slug, host).with_suffix(".json")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read(path: Path) -> Store:
    """The store at `path` (empty when there is none, or it cannot be read)."""
    doc = _read_json(path)
    if not isinstance(doc, dict):
        return Store(path, {})
    slots: dict[str, Slot] = {}
    for key, s in (doc.get("slots") or {}).items():
        if not isinstance(s, dict):
            continue
        stored = [r for r in (CeilingRecord.from_json(x) for x in s.get("stored") or []) if r is not None]
        slots[str(key)] = Slot(stored, CeilingRecord.from_json(s["last"]) if s.get("last") else None)
    return Store(path, slots)


def write(store: Store) -> None:
    """Write the whole store at once (a temporary file renamed over it: a reader never sees half)."""
    store.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = store.path.with_suffix(".tmp")
    tmp.write_text(json.dumps(store.to_json(), indent=1) + "\n")
    tmp.replace(store.path)


# ---------------------------------------------------------------- the rule


def _share(q: Quietness) -> float:
    return q.share if q.share is not None and math.isfinite(q.share) else math.inf


def admit(offered: CeilingRecord, stored: CeilingRecord | None, peaks: Peaks) -> str | None:
    """Why `offered` may not become its slot's stored ceiling, in words, or None when it may: the
    four rules of the module docstring, in their order. `stored` is the slot's version in force;
    `peaks` the device's (`perflab.core.hardware.peaks_for`)."""
    from perflab.core import hardware

    problem = hardware.ceiling_problem(offered.tflops, offered.dtype, peaks)
    if problem:
        return problem
    if offered.confirmed is False:
        return "the best shape's figure did not repeat when measured again"
    q = offered.quietness
    if q.disturbed:
        return f"measured while the machine was busy ({q.cause})" + \
            (", so every MFU against it is suspect" if offered.kind == "basis" else "")
    if not q.quiet:
        return "the machine's quietness could not be read"
    if stored is not None and _share(stored.quietness) < _share(q):
        return (f"the stored version {stored.version} ({stored.tflops:.4g} TFLOP/s, {stored.date}) was measured "
                "on a quieter machine")
    return None


def offer(record: CeilingRecord, peaks: Peaks, path: Path) -> CeilingRecord:
    """Offer `record` to its slot of the store at `path` under `admit`: returned as kept, stored (with
    its version number) or questioned (with why), and written as the slot's latest offer. A store that
    cannot be written (a read-only results folder) leaves the record for this run only."""
    store = read(path)
    slot = store.slot(record.slot)
    why = admit(record, slot.current, peaks)
    kept = replace(record, version=None, questioned=why) if why else \
        replace(record, version=len(slot.stored) + 1, questioned=None)
    store.slots[record.slot] = Slot(slot.stored + ([kept] if kept.stored else []), kept)
    try:
        write(store)
    except OSError:
        pass
    return kept
