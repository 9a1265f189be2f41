"""Published figures for lesson 11, with their sources (`data/published_tune.json`).

    >>> rows()                 # each figure with title, project, URL, commit, section, hardware, date
    >>> frame()                # a DataFrame labelled Published, for beside the learner's table
    >>> compile_speedup()      # nanoGPT's eager / compiled iteration time (about 1.85×)

Only numbers read at their source are recorded; what could not be verified is listed under
`not_shown()` with the reason, and never shown as a number.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

PATH = Path(__file__).parent / "data" / "published_tune.json"
REQUIRED = ("id", "title", "project", "url", "commit", "section", "quote", "figure", "value", "unit", "hardware", "date")


@lru_cache(maxsize=1)
def _raw() -> dict[str, Any]:
    return json.loads(PATH.read_text())


def rows() -> list[dict[str, Any]]:
    return [dict(r) for r in _raw()["rows"]]


def not_shown() -> list[dict[str, str]]:
    return [dict(r) for r in _raw().get("not_shown", [])]


def figure(fid: str) -> dict[str, Any]:
    for r in rows():
        if r["id"] == fid:
            return r
    raise KeyError(fid)


def compile_speedup() -> float:
    """nanoGPT's iteration time without compile over with it."""
    return figure("nanogpt_eager")["value"] / figure("nanogpt_compiled")["value"]


def frame():
    import pandas as pd

    from perflab.core.readout import seconds

    out = []
    for r in rows():
        v = seconds(r["value"]) if r["unit"].startswith("s ") else f"{r['value']:g} {r['unit']}"
        out.append({"Published": r["figure"], "value": ("~" if r.get("approximate") else "") + v,
                    "model, hardware": f"{r['model']}, {r['hardware']}",
                    "source": f"{r['project']}, {r['section']} ({r['url']})",
                    "date": r["date"]})
    return pd.DataFrame(out)
