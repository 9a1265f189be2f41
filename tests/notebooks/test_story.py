"""Lessons read as stories: logic, sizes and tables live in the package (DESIGN.md, "A lesson is a story").

A lesson's cells size nothing themselves (a topic's size table, `ctx.sizes(SIZES)`, not `ctx.pick`),
build no tables by hand (a typed result's `.table()`, not `pd.DataFrame(...)`), assert nothing (a
check is a unit test of the package) and move no slider from code (a panel's other settings are tested
in the package); and each lesson has fewer lines of code than of prose.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAX_PICK = 20  # ctx.pick( in all lessons together
MAX_DATAFRAME = 15  # DataFrame( in all lessons together


def counts(path: Path) -> dict[str, int]:
    out = {"pick": 0, "dataframe": 0, "assert": 0, "set": 0, "code": 0, "markdown": 0}
    for cell in json.loads(path.read_text())["cells"]:
        src = "".join(cell["source"])
        lines = sum(1 for line in src.splitlines() if line.strip())
        if cell["cell_type"] != "code":
            out["markdown"] += lines
            continue
        code = "\n".join(line.split("#", 1)[0] for line in src.splitlines())  # comments are prose
        out["code"] += lines
        out["pick"] += code.count("ctx.pick(")
        out["dataframe"] += code.count("DataFrame(")
        out["assert"] += len(re.findall(r"^\s*assert\b", code, re.M))
        out["set"] += len(re.findall(r"\bpanel\w*\.set\(|\w+_panel\.set\(|\.set\(\s*\w+\s*=", code))
    return out


def test_the_counter_reads_cells_as_a_reviewer_would(tmp_path):
    nb = {"cells": [{"cell_type": "code", "source": ["size = ctx.pick(full=1, smoke=2)\n", "assert size\n",
                                                       "# pd.DataFrame( in a comment is prose\n",
                                                       "panel.set(n=4)\n"]},
                    {"cell_type": "markdown", "source": ["One idea.\n", "\n", "Another.\n"]}]}
    p = tmp_path / "00_x.ipynb"
    p.write_text(json.dumps(nb))
    assert counts(p) == {"pick": 1, "dataframe": 0, "assert": 1, "set": 1, "code": 4, "markdown": 2}


def test_the_lessons_size_and_tabulate_through_the_package():
    every = {p.name: counts(p) for p in LESSONS}
    picks = sum(c["pick"] for c in every.values())
    frames = sum(c["dataframe"] for c in every.values())
    assert picks <= MAX_PICK, {k: c["pick"] for k, c in every.items() if c["pick"]}
    assert frames <= MAX_DATAFRAME, {k: c["dataframe"] for k, c in every.items() if c["dataframe"]}


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_a_lesson_asserts_nothing_moves_no_slider_and_tells_more_than_it_codes(path):
    c = counts(path)
    assert c["assert"] == 0, f"{path.name}: a lesson's check is a unit test of the package"
    assert c["set"] == 0, f"{path.name}: a panel shows its defaults; its other settings are tested in the package"
    assert c["code"] < c["markdown"], f"{path.name}: {c['code']} lines of code against {c['markdown']} of prose"
