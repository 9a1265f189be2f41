"""Tests of `perflab.plan.published`: the plan beside torchtitan's Llama 3.1 8B run on 8 H100s."""

from __future__ import annotations

import pytest

from perflab.plan import published


def test_the_published_row_keeps_its_source():
    pub = published.torchtitan_8b()
    assert pub["tokens_per_s_per_gpu"] == 5762 and pub["memory_bytes"] == pytest.approx(82.4 * 2**30)
    assert "github.com/pytorch/torchtitan" in pub["source"] and "Table 1" in pub["source"]


@pytest.mark.slow
def test_the_published_run_lies_between_the_plans_without_and_with_full_recompute():
    """torchtitan recomputed selectively: its peak lies between the plan with no recompute and with full
    recompute; its throughput is below the plan's roofline bound (ideal kernels, no recompute)."""
    from perflab.plan.run import plan

    plans = {ac: plan(published.make_target, gpu="h100", gpus=published.RUN["gpus"], fsdp=True, ac=ac,
                      dtype="bf16", suggest=False) for ac in ("none", "full")}
    rows = {r["plan"]: r for r in published.side_by_side(plans)}
    none, full = rows["none"], rows["full"]
    assert full["plan_peak_gb"] < none["published_memory_gb"] < none["plan_peak_gb"]
    assert none["tokens_ratio"] > 1  # the roofline is an upper bound on throughput
    assert 0.5 < full["tokens_ratio"] < 2  # and not a fantasy: full recompute costs about what SAC does
