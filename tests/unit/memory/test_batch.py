"""Tests of `perflab.memory.batch`: the batch arithmetic and its table."""

from __future__ import annotations

from perflab.memory import batch, estimate


def test_the_estimate_re_exports_the_batch_arithmetic():
    assert estimate.batch_plan is batch.batch_plan and estimate.BatchPlan is batch.BatchPlan


def test_plans_side_by_side_say_what_they_were_not_given():
    plans = [batch.batch_plan(8, mbs=4), batch.batch_plan(8, tp=2, pp=2, mbs=4),
             batch.batch_plan(1024, tp=8, pp=8, mbs=1, gbs=1024, seq=4096)]
    t = batch.BatchPlans(plans).table()
    assert list(t.columns) == ["GPUs", "TP", "PP", "DP", "MBS", "GAS", "GBS", "sequence s", "tokens per step"]
    assert list(t["DP"]) == [8, 2, 16] and list(t["GBS"]) == [32, 8, 1024] and list(t["GAS"]) == [1, 1, 64]
    assert list(t["sequence s"]) == ["–", "–", "4,096"] and t["tokens per step"].iloc[-1] == "4,194,304"
