"""Tests of `perflab.plan.published`: the plan beside torchtitan's Llama 3.1 8B run on 8 H100s."""

from __future__ import annotations

import pytest

from perflab.plan import published

from .factories import PUBLISHED_GROUP


def test_the_published_row_keeps_its_source():
    pub = published.torchtitan_8b()
    assert pub.tokens_per_s_per_gpu == 5762 and pub.memory_bytes == pytest.approx(82.4 * 2**30)
    assert "github.com/pytorch/torchtitan" in pub.source and "Table 1" in pub.source


@pytest.mark.slow
@PUBLISHED_GROUP
def test_the_published_run_lies_between_the_plans_without_and_with_full_recompute(published_8b):
    """torchtitan recomputed selectively: its peak lies between the plan with no recompute and with full
    recompute; its throughput is below the plan's roofline bound (ideal kernels, no recompute)."""
    plans = {ac: published_8b(ac, published.RUN["gpus"]) for ac in ("none", "full")}
    rows = {r["plan"]: r for r in published.side_by_side(plans)}
    none, full = rows["none"], rows["full"]
    assert full["plan_peak_gb"] < none["published_memory_gb"] < none["plan_peak_gb"]
    assert none["tokens_ratio"] > 1  # the roofline is an upper bound on throughput
    assert 0.5 < full["tokens_ratio"] < 2  # and not a fantasy: full recompute costs about what SAC does


def test_llm_foundrys_rows_keep_their_source_and_the_readmes_figures():
    data = published.foundry()
    src = data["source"]
    assert src["repo"] == "mosaicml/llm-foundry" and src["path"] == "scripts/train/benchmarking/README.md"
    assert len(src["commit"]) == 40 and src["commit"] in src["url"]
    for r in data["rows"]:
        # the table's own columns agree with each other: tokens/s = per GPU × GPUs (rounded in the README),
        # the global batch = micro-batch × accumulation × GPUs
        assert abs(r["tokens_per_s"] - r["tokens_per_s_per_gpu"] * r["gpus"]) <= r["gpus"], r
        assert r["global_batch"] == r["micro_batch"] * r["grad_accum"] * r["gpus"], r
        # llm-foundry's MFU from its own throughput, in its own convention, at the H100 SXM's 989 TFLOP/s
        mfu = published.foundry_mfu(r["tokens_per_s_per_gpu"], r["num_params"], r["shape"], r["seq_len"], 989e12)
        assert mfu == pytest.approx(r["mfu_pct"] / 100, abs=0.005), r


@pytest.mark.slow
def test_the_plan_beside_llm_foundrys_mpt_runs():
    """The MPT shapes planned as GPT-2 configs have the table's parameter count exactly; the plan's tokens/s
    per GPU lands within ±25 % of each published row (its ideal roofline and its unfused model's extra
    pointwise work pull opposite ways), and its MFU in llm-foundry's convention follows its throughput."""
    rows = published.foundry_side_by_side(("760m", "1b"))
    assert [r["model"] for r in rows] == ["MPT-760m", "MPT-1b"]
    for r in rows:
        assert r["plan_params"] == r["published_params"], r
        assert 0.75 < r["tokens_ratio"] < 1.25, r
        assert r["plan_mfu_foundry"] / r["published_mfu"] == pytest.approx(r["tokens_ratio"], rel=1e-3), r
        assert r["plan_peak_gb"] > 0 and "mosaicml/llm-foundry" in r["source"]
