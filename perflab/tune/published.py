"""Published figures for lesson 11, with their sources (`data/published_tune.json`).

    >>> rows()                 # each figure with title, project, URL, commit, section, hardware, date
    >>> frame()                # a DataFrame labelled Published, for beside the learner's table
    >>> compile_speedup()      # nanoGPT's eager / compiled iteration time (about 1.85×)

Only numbers read at their source are recorded; what could not be verified is listed under
`not_shown()` with the reason, and never shown as a number.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from perflab.core.jsonable import JSON

PATH = Path(__file__).parent / "data" / "published_tune.json"
REQUIRED = ("id", "title", "project", "url", "commit", "section", "quote", "figure", "value", "unit", "hardware", "date")


@dataclass(frozen=True)
class Figure:
    """One published figure, as its source states it."""

    id: str
    title: str
    project: str
    url: str
    commit: str  # the source's commit, 40 hex digits
    section: str
    quote: str  # the source's own words
    figure: str  # what the number is, in words
    value: float
    unit: str
    model: str
    hardware: str
    date: str
    approximate: bool = False  # the source says "about"
    context: str | None = None  # what the source's run was, where it matters for a comparison


@dataclass(frozen=True)
class NotShown:
    """A figure that could not be verified at its source, and why (never shown as a number)."""

    what: str
    why: str


@lru_cache(maxsize=1)
def _raw() -> JSON:
    return json.loads(PATH.read_text())


def rows() -> list[Figure]:
    return [Figure(**r) for r in _raw()["rows"]]


def not_shown() -> list[NotShown]:
    return [NotShown(**r) for r in _raw().get("not_shown", [])]


def figure(fid: str) -> Figure:
    for r in rows():
        if r.id == fid:
            return r
    raise KeyError(fid)


def compile_speedup() -> float:
    """nanoGPT's iteration time without compile over with it."""
    return figure("nanogpt_eager").value / figure("nanogpt_compiled").value


def frame():
    import pandas as pd

    from perflab.core.readout import seconds

    out = []
    for r in rows():
        v = seconds(r.value) if r.unit.startswith("s ") else f"{r.value:g} {r.unit}"
        out.append({"Published": r.figure, "value": ("~" if r.approximate else "") + v,
                    "model, hardware": f"{r.model}, {r.hardware}",
                    "source": f"{r.project}, {r.section} ({r.url})",
                    "date": r.date})
    return pd.DataFrame(out)


def compile_text(rows) -> str:
    """nanoGPT's compile figure (its README) and the vocabulary padding's (its commit) beside the compile
    rung measured here (a ladder's rows: its speed-up over the step before it, with its verdict; none in
    a ladder without that rung), and what could not be verified at its source."""
    from perflab.core.readout import seconds

    mine = next((r for r in rows if r["rung"] == "compile"), None)
    eager, compiled, pad = figure("nanogpt_eager"), figure("nanogpt_compiled"), figure("nanogpt_vocab_pad")
    if mine is None:
        here = "the compile rung is left to `perflab tune` in smoke runs."
    elif mine.get("busy"):
        here = ("the compile rung was measured while the machine was busy: no verdict "
                f"({mine.get('verdict', 'inconclusive')}); run the ladder again on a quiet machine.")
    else:
        here = (f"the compile rung ran at {mine['speedup_vs_previous']:.2f}× the step before it ({mine.get('verdict')}; "
                "it comes after the bf16 and SDPA rungs).")
    lines = [f"Published (nanoGPT README): torch.compile cut the iteration from ~{seconds(eager.value)} to "
             f"{seconds(compiled.value)}, about {compile_speedup():.2f}× on GPT-2 (124M).",
             f"  (that model: {compiled.context})", "Here: " + here,
             f"Published (nanoGPT commit {pad.commit[:8]}, {pad.date}): \"{pad.quote}\""]
    lines += [f"Not shown: {n.what} — {n.why}" for n in not_shown()]
    return "\n".join(lines)
