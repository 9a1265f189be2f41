"""Tests of `perflab.plan.sizes`: lesson 15's one table of sizes."""

from __future__ import annotations

from perflab.plan.sizes import SIZES
from perflab.workload.models import PRESETS


def test_every_kind_of_run_has_sizes_a_plan_can_take():
    assert set(SIZES) == {"smoke", "cpu", "gpu"}
    for s in SIZES.values():
        assert s.model in PRESETS and s.gpus % s.tp == 0 and s.more_gpus > s.gpus and 0 < s.budget_share < 1
        assert set(s.rank_kinds) <= {"fsdp", "tp"} and s.rank_kinds
    assert SIZES["cpu"] == SIZES["gpu"]  # the lesson plans a cluster nobody here has: a GPU here adds nothing
