"""Tests of `perflab.plan.compare`'s data: each published run keeps its source and what the plan cannot copy.

The plans of the runs themselves are slow (minutes for all of them): the comparisons against the
published figures are in tests/unit/plan/test_published.py and the closing note of issue 51."""

from __future__ import annotations

from perflab.plan import compare


def test_every_published_run_names_its_file_commit_and_row():
    rows = compare.runs()
    assert len(rows) >= 10 and len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        src = r["source"]
        assert len(src["commit"]) == 40 and src["commit"] in src["url"] and r["where"], r["id"]
        assert r["tokens_per_s_per_gpu"] > 0 and r["plan_ac"] and r["gpus"] % r["tp"] == 0, r["id"]
    # torchtitan's H100s were 96 GB HBM2e parts at 500 W (benchmarks/llama3_h100_202412_torchtitan.md)
    titan = next(r for r in rows if r["id"] == "torchtitan-8b-fsdp-8-h100")
    assert titan["gpu"] == "h100-hbm2e-96gb" and "500W" in titan["source"]["hardware"]
    assert any("reserved" in u for u in titan["unlike"])
    # MPT runs fused kernels, which the plan's unfused GPT-2 does not
    assert all(any("fused" in u for u in r["unlike"]) for r in rows if r["id"].startswith("mpt-"))


def test_a_run_planned_with_no_and_full_recompute_says_whether_it_lies_between():
    c = compare.Comparison("x", "src", "m", "8 × h100", "selective (op)", 100.0, {"none": 120.0, "full": 90.0},
                           {"none": 2, "full": 1}, {"none": 0.4, "full": 0.3})
    assert c.ratios == {"none": 1.2, "full": 0.9} and c.brackets is True
    assert "1.20× / 0.90×" in compare.Comparisons([c]).table().iloc[0]["plan ÷ published"]
