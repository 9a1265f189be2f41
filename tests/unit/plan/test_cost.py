"""Tests of `perflab.plan.cost`: the cluster, the roofline, the bus-bandwidth model and the replay."""

from __future__ import annotations

import pytest

from perflab.core.errors import InputError
from perflab.core.hardware import spec_peak
from perflab.plan.cost import Event, cluster, collective_seconds, op_seconds, replay


def test_the_cluster_comes_from_the_hardware_and_link_tables():
    c = cluster("h100")
    assert c.gpu_id == "h100-sxm" and c.peak("bf16") == pytest.approx(989.4) and c.memory_bytes == 80e9
    assert c.peak("bf16") == spec_peak("h100-sxm", "bf16").tflops and "H100" in c.peak_source("bf16")  # the one look-up
    assert c.as_dict()["peak_tflops"] == {"fp64": 33.5, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4,
                                          "fp8": 1978.9}
    assert c.intra_gbps == 450 and c.inter_gbps == 50 and c.gpus_per_node == 8
    assert c.busbw_gbps(8) == 450 and c.busbw_gbps(16) == 50 and c.busbw_gbps(8, stride=2) == 50
    with pytest.raises(InputError, match="--gpu 'h1000' is not a GPU perflab can plan for"):
        cluster("h1000")


def test_the_roofline_takes_the_slower_of_compute_and_memory():
    c = cluster("h100")
    # 989.4e12 FLOPs at the bf16 peak: one second; 3.35e12 bytes at 3350 GB/s: one second
    assert op_seconds(989.4e12, 0, "bf16", c) == pytest.approx(1.0)
    assert op_seconds(0, 3.35e12, "bf16", c) == pytest.approx(1.0)
    assert op_seconds(989.4e12, 6.7e12, "bf16", c) == pytest.approx(2.0)
    assert op_seconds(66.9e12, 0, "fp32", c) == pytest.approx(1.0)


def test_collectives_follow_nccl_tests_bus_factors():
    # all-reduce of 1 GB on 8 ranks at 100 GB/s: 2·7/8 · 1e9 / 1e11 = 17.5 ms
    assert collective_seconds("all_reduce", 1e9, 8, 100) == pytest.approx(0.0175)
    assert collective_seconds("all_gather", 1e9, 8, 100) == pytest.approx(0.00875)
    assert collective_seconds("all_gather", 1e9, 1, 100) == 0.0


def test_replay_hides_a_gather_behind_the_unit_before_and_exposes_a_blocking_all_reduce():
    # gather 1 (exposed: nothing to hide behind), compute 2, gather 2 issued with it (hidden), compute 2
    ev = [Event("all_gather", 1.0, 1, True), Event("compute", 2.0), Event("all_gather", 1.0, 2, True),
          Event("compute", 2.0)]
    r = replay(ev)
    assert (r.step_s, r.compute_s, r.comm_s, r.exposed_s, r.hidden_s) == (5.0, 4.0, 2.0, 1.0, 1.0)
    # a tensor-parallel all-reduce blocks the compute: all of it is exposed
    r = replay([Event("compute", 1.0), Event("all_reduce", 0.5), Event("compute", 1.0)])
    assert (r.step_s, r.exposed_s, r.hidden_s) == (2.5, 0.5, 0.0)
    # a reduce-scatter that outlasts the compute after it: the remainder is exposed
    r = replay([Event("compute", 1.0), Event("reduce_scatter", 3.0, 1, True), Event("compute", 1.0)])
    assert (r.step_s, r.exposed_s, r.hidden_s) == (4.0, 2.0, 1.0)
