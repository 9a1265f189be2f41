"""Tests of `perflab.course.report_html`."""

from __future__ import annotations

from perflab.core.jsonable import to_json
from perflab.course import report as R
from perflab.course.report_html import render


def _page(name: str, part: dict) -> str:
    """The page of a report of one part, read from its JSON as `perflab report --compare` reads one."""
    return render(R.Report.from_json({"device": {"name": "a cpu"}, "host": "box", "parts": {name: part}}))


def test_a_part_whose_table_cannot_be_drawn_still_shows_its_figures_and_notes():
    part = {"title": "Device", "status": "ok", "summary": "a cpu", "data": {"device": "not a dict"},
            "figures": [{"label": "peak fp32", "value": 1.5, "unit": "TFLOP/s"}], "notes": ["a note"],
            "wall_s": 0.1, "measured": "today"}
    page = _page("device", part)
    assert "<p class='note'>table not drawn: &#x27;str&#x27; object has no attribute &#x27;items&#x27;</p>" in page
    assert "peak fp32" in page and "a note" in page


def test_a_report_part_whose_table_and_figure_cannot_be_drawn_still_shows_the_rest():
    part = {"title": "Wave sweep", "status": "ok", "summary": "best 1 TFLOP/s", "figures": [],
            "data": {"rows": "not rows"}, "notes": ["a note"], "wall_s": 1.0, "measured": "today"}
    html = _page("waves", part)
    assert "figure not drawn:" in html and "a note" in html and "best 1 TFLOP/s" in html


def test_the_page_draws_the_gpu_only_figures_from_a_reports_data():
    """The GPU branches of the page (host→device bars, the wave model and its cliffs, NCCL rows)
    drawn from a hand-built report's data: a CPU run never reaches them."""
    ok = {"status": "ok", "summary": "", "notes": [], "wall_s": 1.0, "measured": "2026-01-01T00:00:00"}
    ns = list(range(256, 4097, 256))
    parts = {
        "memory": {**ok, "title": "Memory", "figures": [R.figure("h2d.pinned", "host→device pinned", 25.0, "GB/s")],
                   "data": {"copy": [{"nbytes": 2**20 * s, "gbps": 100.0 * s, "spec_gbps": 3350.0} for s in (1, 16, 256)],
                            "h2d": [{"kind": "pinned", "nbytes": 2**26, "gbps": 25.0},
                                    {"kind": "pageable", "nbytes": 2**26, "gbps": 9.0}]}},
        "waves": {**ok, "title": "Waves", "figures": [],
                  "data": {"dim": "n", "fixed": {"m": 2304, "k": 4096}, "dtype": "bf16",
                           "rows": [{"n": n, "tflops": 100.0 + n / 100, "median_s": 1e-4} for n in ns],
                           "model": {"sms": 132, "tile": "256x128", "predicted_tflops": [120.0] * len(ns),
                                     "cliffs": [1664, 3328]}}},
        "collectives": {**ok, "title": "Collectives", "figures": [],
                        "data": {"op": "all_reduce", "nproc": 8, "backend": "nccl", "factor": 1.75,
                                 "rows": [{"bytes": 2**20 * s, "seconds": 1e-4 * s, "algbw_gbps": 10.0 * s,
                                           "busbw_gbps": 17.5 * s} for s in (1, 16)]}},
        "mamf": {**ok, "title": "MAMF", "figures": [],
                 "data": {"dtype": "bf16", "best": {"m": 4096, "n": 4096, "k": 4096, "tflops": 700.0}, "evaluated": 3,
                          "grid_points": 64, "peak_tflops": 989.0, "stored_ceiling": 720.0,
                          "points": [{"m": 2048 * i, "n": 4096, "k": 4096, "tflops": 600.0 + i} for i in (1, 2, 3)]}},
        "dataloader": {**ok, "title": "DataLoader", "figures": [],
                       "data": {"io_ms": 5.0, "compute_ms": 20.0, "cores": 16, "rows": [
                           {"workers": w, "step_s": 0.02, "data_wait_s": 0.01 / (w + 1), "wait_fraction": 0.5 / (w + 1),
                            "predicted_wait_s": 0.01 / (w + 1), "first_wait_s": 0.05} for w in (0, 1, 2)]}},
    }
    page = render(R.Report.from_json(to_json({"device": {"name": "a GPU"}, "host": "box", "parts": parts})))
    assert "figure not drawn" not in page and "table not drawn" not in page
    assert page.count("data:image/png;base64,") == len(parts)


def test_a_failed_part_says_why_and_the_page_says_which_failed():
    page = _page("numa", {"title": "NUMA", "status": "failed", "reason": "error: RuntimeError: no /sys",
                          "figures": [], "wall_s": 0.1, "measured": "today"})
    assert "This part failed and the others went on: <code>error: RuntimeError: no /sys</code>" in page
    assert "0 of 1 parts measured · failed: numa" in page and "perflab report: a cpu on box" in page
