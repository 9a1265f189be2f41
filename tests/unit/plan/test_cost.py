"""Tests of `perflab.plan.cost`: the cluster, the roofline, the bus-bandwidth model and the replay."""

from __future__ import annotations

import pytest

from perflab.plan.cost import Event, cluster, collective_seconds, op_seconds, replay


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
    # NCCL's latency is added to the bandwidth term
    assert collective_seconds("all_gather", 1e9, 8, 100, latency_s=1e-4) == pytest.approx(0.00885)


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


def test_a_backward_prefetch_does_not_queue_behind_a_reduce_scatter():
    """FSDP2 runs all-gathers and reduce-scatters on separate streams: the backward's prefetch of the next
    unit starts while the last unit's gradients are reduce-scattered, so it hides behind the compute."""
    bwd = [Event("all_gather", 1.0, 1, True), Event("all_gather", 1.0, 2, True), Event("compute", 2.0),
           Event("reduce_scatter", 2.0, 1, True), Event("all_gather", 1.0, 3, True), Event("compute", 2.0),
           Event("reduce_scatter", 2.0, 2, True), Event("compute", 2.0), Event("reduce_scatter", 2.0, 3, True)]
    r = replay(bwd)
    # exposed: the first gather (nothing before it to hide behind) and the last reduce-scatter (nothing after)
    assert (r.compute_s, r.comm_s, r.exposed_s, r.step_s) == (6.0, 9.0, 3.0, 9.0)
    # on one stream the prefetch of unit 3 would queue behind the reduce-scatter of unit 1 and the compute
    # of unit 2 would wait for it: more exposed than the two streams give
    one_stream = 1.0 + 1.0 + 2.0 + 2.0 + 1.0 + 2.0 + 2.0
    assert r.step_s < one_stream


def test_a_unit_is_gathered_only_once_the_unit_two_gathers_back_is_released():
    # three units, each gathered for 3 s and computed for 1 s: the third gather waits for unit 1's compute
    r = replay([Event("all_gather", 3.0, 1, True), Event("compute", 1.0), Event("all_gather", 3.0, 2, True),
                Event("compute", 1.0), Event("all_gather", 3.0, 3, True), Event("compute", 1.0)])
    # gathers end at 3, 6, 9 (the stream is busy); computes run [3, 4], [6, 7], [9, 10]
    assert r.step_s == 10.0 and r.exposed_s == 7.0
