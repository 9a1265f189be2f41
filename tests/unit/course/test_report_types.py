"""Tests of `perflab.course.report_types`: a report's figures, parts and the report itself, as JSON
and back."""

from __future__ import annotations

import json

from perflab.core.jsonable import to_json
from perflab.course import report_types as R


def test_a_report_reads_back_from_its_json_as_it_was_written():
    entry = R.PartEntry("NUMA", "ok", 0.5, "2026-01-01T00:00:00", False, "1 node(s)",
                        [R.figure("numa.nodes", "NUMA nodes", 1, "", None)], {"topology": {}}, [])
    failed = R.PartEntry("Matmul", "failed", 0.1, "2026-01-01T00:00:01", True, reason="error: RuntimeError: no BLAS")
    doc = R.Report(1, "0.1.0", True, "now", "box", {"kind": "cpu", "name": "a cpu"}, "r.jsonl",
                   {"numa": entry, "matmul": failed}, elapsed_s=1.0, failed=["matmul"])
    data = json.loads(json.dumps(doc.to_json()))
    assert list(data) == ["perflab_report", "perflab_version", "quick", "created", "host", "device", "results_file",
                          "parts", "interrupted", "elapsed_s", "failed"]  # `files` only once they are written
    assert list(data["parts"]["numa"]) == ["title", "status", "wall_s", "measured", "resumed", "summary", "figures",
                                           "data", "notes"]
    assert list(data["parts"]["matmul"]) == ["title", "status", "wall_s", "measured", "resumed", "reason", "figures"]
    assert data["parts"]["numa"]["figures"] == [{"key": "numa.nodes", "label": "NUMA nodes", "value": 1, "unit": "",
                                                  "better": None}]
    assert R.Report.from_json(data) == doc
    assert [f for p in R.Report.from_json(data).parts.values() for f in p.figures] == entry.figures


def test_a_figure_is_a_value_its_json_is_the_dict_report_json_holds():
    fig = R.figure("k", "label", 1.5, "GB/s")
    assert fig == R.Figure("k", "label", 1.5, "GB/s") and len({fig, fig}) == 1
    assert fig != R.Figure("k", "label", 1.5, "GB/s", "lower")
    assert to_json(fig) == {"key": "k", "label": "label", "value": 1.5, "unit": "GB/s", "better": "higher"}


def test_a_figure_that_is_not_finite_has_no_value_and_a_count_is_whole():
    assert R.figure("k", "label", float("nan"), "GB/s").value is None
    assert R.figure("k", "label", float("inf"), "GB/s").value is None
    count = R.figure("n", "nodes", 2.0, "", None).value
    assert count == 2 and isinstance(count, int)
    assert R.figure("x", "ratio", 2.0, "×").value == 2.0  # a score stays a float
