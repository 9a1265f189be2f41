"""HolisticTraceAnalysis's temporal and idle-time breakdowns, and each step's exposed communication, on
planted intervals whose answers are known by construction."""

from pathlib import Path

import pytest

from perflab.audit.hta import SHARES, idle_breakdown, per_step, ratios, temporal
from perflab.audit.rank_trace import read_rank

from .jobs import ev, rank_trace


def test_temporal_breakdown_of_planted_intervals():
    # compute 0-100, NCCL 50-150 (50 hidden under compute), copy 140-160, gap 160-200, compute 200-250
    evs = [ev("gemm", 0, 100), ev("ncclKernel_AllReduce", 50, 150, 13), ev("Memcpy HtoD", 140, 160),
           ev("gemm", 200, 250)]
    tb = temporal(evs)
    assert tb.window == pytest.approx(250e-6)
    assert tb.compute == pytest.approx(150e-6)
    assert tb.communication == pytest.approx(50e-6)
    assert tb.memory == pytest.approx(10e-6)
    assert tb.idle == pytest.approx(40e-6)
    assert tb.other == pytest.approx(0.0, abs=1e-15)
    assert tb.non_compute == pytest.approx(60e-6) and sum(tb.seconds().values()) == pytest.approx(tb.window)
    assert list(tb.seconds()) == list(SHARES)


def test_no_events_give_a_window_of_no_length():
    assert temporal([]).window == 0.0 and temporal([ev("gemm", 5, 5)]).window == 0.0


def test_idle_split_per_stream_by_launch_time_and_gap():
    # gap 1 (100→105, launched at 50, before the previous kernel ended): kernel wait (5 < 30 µs)
    # gap 2 (205→300, launched at 250, after the previous end 205): host wait
    # gap 3 (400→500, launched at 350, before the end 400, gap ≥ 30): other
    evs = [ev("a", 0, 100, corr=1), ev("b", 105, 205, corr=2), ev("c", 300, 400, corr=3), ev("d", 500, 510, corr=4)]
    split = idle_breakdown(evs, {1: 0.0, 2: 50.0, 3: 250.0, 4: 350.0})
    assert split == {7: pytest.approx({"host_wait": 95e-6, "kernel_wait": 5e-6, "other": 100e-6})}
    assert ratios(split[7]) == pytest.approx({"host_wait": 0.475, "kernel_wait": 0.025, "other": 0.5})
    assert ratios({"a": 0.0}) == {"a": None}


def test_each_step_books_its_compute_and_the_communication_compute_does_not_hide():
    # all-reduce of 2 ms starting 500 µs before the 6 ms compute kernel ends: 1.5 ms exposed per step
    rt = read_rank(Path("r.json"), rank_trace(0, 2, overlap_us=500), only_one=False)
    steps = per_step(rt)
    assert sorted(steps) == [1, 2, 3]
    for s in steps.values():
        assert (s.step_s, s.compute_s, s.comm_s) == (pytest.approx(0.01), pytest.approx(6e-3), pytest.approx(2e-3))
        assert s.exposed_comm_s == pytest.approx(1.5e-3)
        assert [c[0] for c in s.collectives] == ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
