"""What `perflab report` is made of, as types: JSON is made from them at the edge (report.json,
`--json`), and read back into them (`perflab report --compare`, the page).

* `Figure`: one comparable number of a part, with its key, label, unit and which direction is
  better (`figure` makes one, None where nothing finite was measured);
* `PartResult`: what one part returned: its figures, its data (the measurements as report.json
  holds them, which the page draws from), its notes and a summary;
* `PartEntry`: a part in a report: its title, status, when it was measured (or why it failed);
* `Report`: a whole report, and `Comparison`: one figure of two reports side by side.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perflab.core.jsonable import JSON, to_json

FORMAT = 1  # the report.json format


@dataclass(frozen=True)
class Figure:
    """One comparable number: `better` is 'higher', 'lower' or None (a fact, not a score); `value`
    is None where nothing finite was measured."""

    key: str
    label: str
    value: float | int | None
    unit: str
    better: str | None = "higher"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Figure:
        """A figure read back from a report.json (or a results file)."""
        return cls(str(d.get("key", "")), str(d.get("label", "")), d.get("value"), str(d.get("unit", "")),
                   d.get("better"))


def figure(key: str, label: str, value: float | None, unit: str, better: str | None = "higher") -> Figure:
    """One comparable number (see `Figure`): an infinite or NaN value is None; a fact that is a
    whole number is an int (a count)."""
    if value is not None:
        value = float(value)
        if math.isnan(value) or math.isinf(value):
            value = None
        elif better is None and value.is_integer():
            value = int(value)  # a count
    return Figure(key, label, value, unit, better)


@dataclass
class PartResult:
    """What one part measured: its figures, its data (as report.json holds them), its notes, a summary."""

    figures: list[Figure]
    data: JSON
    notes: list[str] = field(default_factory=list)
    summary: str = ""


@dataclass
class PartEntry:
    """One part in a report: its title, 'ok' or 'failed', how long it took and when it was measured,
    whether it was read back from an earlier run; what it returned ('ok') or why it failed."""

    title: str
    status: str
    wall_s: float | None = None
    measured: str | None = None
    resumed: bool = False
    summary: str | None = None
    figures: list[Figure] = field(default_factory=list)
    data: JSON | None = None
    notes: list[str] | None = None
    reason: str | None = None  # a failed part's '<status>: <one line>'

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> JSON:
        """The part as report.json holds it: an 'ok' part with its summary, figures, data and notes;
        a failed one with its reason."""
        out: JSON = {"title": self.title, "status": self.status, "wall_s": self.wall_s, "measured": self.measured,
                     "resumed": self.resumed}
        if self.ok:
            out.update(summary=self.summary, figures=to_json(self.figures), data=to_json(self.data),
                       notes=to_json(self.notes))
        else:
            out.update(reason=self.reason, figures=to_json(self.figures))
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any], name: str = "") -> PartEntry:
        """A part read back from a report.json (its title defaults to the part's name)."""
        return cls(title=str(d.get("title", name)), status=str(d.get("status", "")), wall_s=d.get("wall_s"),
                   measured=d.get("measured"), resumed=bool(d.get("resumed", False)), summary=d.get("summary"),
                   figures=[Figure.from_json(f) for f in d.get("figures") or []], data=d.get("data"),
                   notes=d.get("notes"), reason=d.get("reason"))


@dataclass
class Report:
    """A whole report: when and where it was measured, and its parts in report order. A report read
    back from a file keeps None where the file says nothing."""

    perflab_report: int = FORMAT
    perflab_version: str | None = None
    quick: bool | None = None
    created: str | None = None
    host: str | None = None
    device: dict[str, Any] | None = None  # {"kind": ..., "name": ...}
    results_file: str | None = None
    parts: dict[str, PartEntry] = field(default_factory=dict)
    interrupted: bool = False
    elapsed_s: float | None = None
    failed: list[str] = field(default_factory=list)
    files: dict[str, str] | None = None  # where `perflab report` wrote report.json and report.html

    @property
    def device_name(self) -> str:
        return str((self.device or {}).get("name", "?"))

    def to_json(self) -> JSON:
        """report.json, and what `perflab report --json` prints (with `files`)."""
        out: JSON = {"perflab_report": self.perflab_report, "perflab_version": self.perflab_version,
                     "quick": self.quick, "created": self.created, "host": self.host, "device": self.device,
                     "results_file": self.results_file, "parts": {n: p.to_json() for n, p in self.parts.items()},
                     "interrupted": self.interrupted, "elapsed_s": self.elapsed_s, "failed": list(self.failed)}
        if self.files is not None:
            out["files"] = dict(self.files)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Report:
        """A report from its JSON (report.json, or what `--json` printed)."""
        parts = d.get("parts") or {}
        return cls(perflab_report=int(d.get("perflab_report", FORMAT)), perflab_version=d.get("perflab_version"),
                   quick=d.get("quick"), created=d.get("created"), host=d.get("host"), device=d.get("device"),
                   results_file=d.get("results_file"),
                   parts={str(n): PartEntry.from_json(p, str(n)) for n, p in parts.items()},
                   interrupted=bool(d.get("interrupted", False)), elapsed_s=d.get("elapsed_s"),
                   failed=list(d.get("failed") or []), files=d.get("files"))


@dataclass(frozen=True)
class Comparison:
    """One figure of two reports: both values and ratio = b / a (None where either is missing or a
    is zero); `b_better` says whether b is better, given the figure's direction (None for a fact, or
    when the two are within SAME of each other)."""

    key: str
    part: str
    label: str
    unit: str
    a: float | int | None
    b: float | int | None
    ratio: float | None
    better: str | None
    b_better: bool | None
