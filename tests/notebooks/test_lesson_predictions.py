"""Lessons 00–05 ask for a written prediction before each measurement, show it beside the result,
end with the learner's calibration and take-aways, and take predictions as a papermill parameter."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted(p for p in (ROOT / "notebooks").glob("0[0-5]_*.ipynb"))


def _cells(path):
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_each_prediction_is_asked_before_it_is_revealed(path):
    cells = _cells(path)
    params = next(c for c in cells if "parameters" in c["metadata"].get("tags", []))
    assert re.search(r"^predictions = \{\}", "".join(params["source"]), re.M), "add `predictions = {}` to the parameters"
    asked, revealed = {}, {}
    for i, c in enumerate(cells):
        src = "".join(c["source"]) if c["cell_type"] == "code" else ""
        for var in re.findall(r"^(\w+) = ask\(", src, re.M):
            asked[var] = i
        for var in re.findall(r"reveal\((\w+),", src):
            revealed.setdefault(var, i)
    assert asked, "a lesson asks for at least one prediction"
    assert set(asked) == set(revealed), f"asked but never revealed, or the reverse: {set(asked) ^ set(revealed)}"
    assert all(asked[v] < revealed[v] for v in asked), "each prediction is asked in a cell before its measurement"
    n = int(path.name[:2])
    last_code = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and f'calibration("{n:02d}")' in "".join(c["source"])]
    assert last_code, "the lesson ends with its calibration"
    takeaways = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "Take-aways" in "".join(c["source"])]
    assert takeaways and takeaways[-1] > last_code[-1] - 2, "take-aways at the end"


def test_lesson_00s_matmul_shares_match_the_published_table():
    """Lesson 00 quotes the best bf16 matmul's share of the spec peak from the published MAMF table."""
    from perflab.course import reference

    rows = {r["accelerator"]: r["tflops"] / r["theory_tflops"] for r in reference.published("mamf")["rows"]
            if r["dtype"] == "bf16"}
    nvidia = [v for k, v in rows.items() if "A100" in k or "H100" in k or "GH200" in k]
    amd = [v for k, v in rows.items() if "MI3" in k]
    assert 0.795 <= min(nvidia) and max(nvidia) < 0.875, nvidia
    assert 0.505 <= min(amd) and max(amd) < 0.605, amd
    text = "".join("".join(c["source"]) for c in _cells(ROOT / "notebooks" / "00_setup_and_your_machine.ipynb"))
    assert "about 80–87% on NVIDIA" in text and "51–60% on AMD" in text
