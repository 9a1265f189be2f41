"""Published GPU figures, shown labelled *Published* with their source, beside the learner's own
measurement and never mixed with it.

    >>> from perflab.course import gpu_figures
    >>> gpu_figures.show("pcie_h2d")                       # the published table and its source
    >>> gpu_figures.show("pcie_h2d", measured={"host to device (pinned)": "24.1 GB/s"})

The figures live in perflab/course/data/published_gpu.json, each with its title, authors or
project, URL and repository path, section or table, hardware and date (tests/notebooks/test_published.py
checks every field). Nothing here measures anything.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, package_json

REQUIRED = ("id", "what", "title", "authors", "url", "section", "hardware", "date", "unit", "values")


@dataclass(frozen=True)
class Figure:
    """One published figure: what it is, its values and where they were published."""

    id: str
    what: str
    title: str
    authors: str
    url: str
    repo_path: str
    section: str
    hardware: str
    date: str
    unit: str
    values: list[dict[str, Any]]
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def numbers(self) -> list[float]:
        return [float(v["value"]) for v in self.values]

    def rows(self) -> list[tuple[str, str]]:
        """(label, value with unit) as published; '(x% of the spec's N)' where the source gives the spec."""
        out = []
        # as published: every digit the source gives, no more ("decimals" where the source pads, 0.90);
        # "show_as" puts a figure in a readable unit (MLC's 175690.9 MB/s as 175.7 GB/s), the data stays as published
        show = self.extra.get("show_as") or {}
        scale, unit = float(show.get("scale", 1)), show.get("unit", self.unit)
        dec = show.get("decimals", self.extra.get("decimals"))
        for v in self.values:
            x = v["value"] * scale if show else v["value"]
            text = f"{x:,.{int(dec)}f} {unit}" if dec is not None else f"{x:,} {unit}"
            if v.get("of_spec"):
                text += f" ({v['value'] / v['of_spec']:.0%} of the spec's {v['of_spec']:,})"
            out.append((str(v["label"]), text))
        return out

    def citation(self) -> str:
        where = f"{self.authors}, {self.title}, {self.section}"
        repo = f"; {self.repo_path}" if self.repo_path else ""
        return f"{where}. Hardware: {self.hardware}. Date: {self.date}. {self.url}{repo}"


@lru_cache(maxsize=1)
def _raw() -> JSON:  # the data file, as read
    return package_json("perflab.course", "published_gpu.json")


def figures() -> list[Figure]:
    """Every published GPU figure in the data file."""
    out = []
    for f in _raw()["figures"]:
        known = {k: f[k] for k in Figure.__dataclass_fields__ if k in f and k != "extra"}
        out.append(Figure(**{"repo_path": "", **known},
                          extra={k: v for k, v in f.items() if k not in Figure.__dataclass_fields__}))
    return out


def figure(fid: str) -> Figure:
    for f in figures():
        if f.id == fid:
            return f
    raise InputError(f"no published figure {fid!r}: use one of {', '.join(f.id for f in figures())}")


@dataclass(repr=False)
class Shown:
    """A published figure, and optionally the learner's measurement, as two separate tables."""

    fig: Figure
    measured: dict[str, str] | None = None
    measured_on: str = "this machine"

    def __str__(self) -> str:
        lines = []
        if self.measured:
            lines.append(f"Measured here ({self.measured_on}):")
            lines += [f"  {k}: {v}" for k, v in self.measured.items()]
        lines.append(f"Published (not measured here) - {self.fig.what}:")
        lines += [f"  {k}: {v}" for k, v in self.fig.rows()]
        lines.append(f"  Source: {self.fig.citation()}")
        if self.fig.notes:
            lines.append(f"  Note: {self.fig.notes}")
        return "\n".join(lines)

    __repr__ = __str__  # what a notebook prints as text/plain: the readable tables, not the fields

    def _repr_html_(self) -> str:
        def table(title: str, rows: list[tuple[str, str]], foot: str = "") -> str:
            body = "".join(f"<tr><td>{html.escape(k)}</td><td style='text-align:right'>{html.escape(v)}</td></tr>"
                           for k, v in rows)
            return (f"<div style='margin:0 1.5em 0.8em 0'><b>{title}</b><table>{body}</table>"
                    f"<div style='font-size:85%;max-width:60em'>{foot}</div></div>")

        parts = []
        if self.measured:
            parts.append(table(f"Measured here ({html.escape(self.measured_on)})", list(self.measured.items())))
        foot = "Source: " + html.escape(self.fig.citation())
        if self.fig.notes:
            foot += "<br>Note: " + html.escape(self.fig.notes)
        parts.append(table(f"<i>Published</i> (not measured here): {html.escape(self.fig.what)}", self.fig.rows(),
                           foot))
        return "<div style='display:flex;flex-wrap:wrap'>" + "".join(parts) + "</div>"


def show(fid: str, measured: dict[str, str] | None = None, measured_on: str = "this machine") -> Shown:
    """The published figure `fid` labelled *Published* with its source; `measured` (label -> value
    with its unit, from perflab) is shown as its own table beside it."""
    return Shown(figure(fid), dict(measured) if measured else None, measured_on)
