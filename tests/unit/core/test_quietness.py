"""Tests of `perflab.core.quietness`: every verdict from made-up counters, none from the machine's load."""

from __future__ import annotations

import pytest

from perflab.core import quietness as q
from perflab.core.quietness import (
    CpuCounters,
    GpuWindow,
    MadeUpLoad,
    Quietness,
    injected,
    judge,
    watch,
)


class Clock:
    """A clock a test moves by hand."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def window(load: MadeUpLoad, clock: Clock, seconds: float, *, device: str = "cpu", cores=(0, 1)) -> Quietness:
    with watch(device, cores=cores, sampler=load) as w:
        clock.t += seconds
    return w.result


def test_a_quiet_machine_is_quiet_and_says_so_in_two_words():
    c = Clock()
    r = window(MadeUpLoad(0.0, clock=c, threads=2), c, 1.0)
    assert r.verdict == "quiet" and r.quiet and not r.disturbed
    assert r.share == 0.0 and r.others_cpu_s == 0.0 and r.cores == 2 and r.own_threads == 2
    assert r.wall_s == pytest.approx(1.0) and r.line() == "machine quiet" and r.cause == ""


def test_a_steady_neighbour_on_one_of_two_cores_is_half_the_machine():
    c = Clock()
    r = window(MadeUpLoad(0.5, clock=c), c, 2.0)
    assert r.verdict == "disturbed" and r.share == pytest.approx(0.5) and r.others_cpu_s == pytest.approx(2.0)
    assert r.line() == "disturbed: other programs used 50 % of 2 cores"


def test_load_below_the_threshold_or_within_the_counters_resolution_is_quiet():
    c = Clock()
    assert window(MadeUpLoad(q.DISTURBED_SHARE * 0.9, clock=c), c, 2.0).verdict == "quiet"
    # 12 % of two cores over 0.1 s is 0.024 CPU s: within the 3 ticks the counters may be off by
    r = window(MadeUpLoad(0.12, clock=c), c, 0.1)
    assert r.verdict == "quiet" and r.share == pytest.approx(0.12)
    assert window(MadeUpLoad(0.12, clock=c), c, 5.0).verdict == "disturbed"  # the same share, long enough to tell


def test_a_window_too_short_for_the_counters_is_unknown_never_quiet():
    c = Clock()
    r = window(MadeUpLoad(0.0, clock=c), c, 0.02)
    assert r.verdict == "unknown" and not r.quiet and r.line() == "quietness unknown: too short to tell (20 ms)"


def test_a_burst_inside_the_window_counts_by_its_length():
    c = Clock()
    load = MadeUpLoad(0.0, clock=c)
    with watch("cpu", cores=(0, 1), sampler=load) as w:
        c.t += 1.5
        load.set(1.0)  # both cores taken for half a second
        c.t += 0.5
        load.set(0.0)
        c.t += 2.0
    assert w.result.others_cpu_s == pytest.approx(1.0) and w.result.share == pytest.approx(1.0 / 8)
    assert w.result.disturbed


def test_others_fill_the_cores_a_measurement_leaves_free_first():
    c = Clock()
    assert window(MadeUpLoad(0.25, clock=c), c, 2.0, cores=(0, 1, 2, 3)).disturbed  # one of four cores busy
    # the same neighbour (2 CPU s in 2 s) beside a one-thread measurement: three free cores absorb it
    start, end = CpuCounters(0.0, 0.0, 0.0), CpuCounters(2.0, 2.0 + 2.0, 2.0)
    r = judge(start, end, cores=1, watched=4)
    assert r.quiet and r.cores == 1 and r.others_cpu_s == 0.0
    # three neighbours on four cores leave one thread's measurement a core short
    r = judge(start, CpuCounters(2.0, 2.0 + 8.0, 2.0), cores=1, watched=4)
    assert r.disturbed and r.share == pytest.approx(1.0)


def test_no_counters_means_unknown_with_the_reason():
    start, end = CpuCounters(0.0, None, None), CpuCounters(1.0, None, None)
    r = judge(start, end, cores=2)
    assert r.verdict == "unknown" and r.share is None and r.line() == "quietness unknown: the OS gave no CPU counters"


def test_other_processes_on_the_gpu_disturb_and_are_counted_not_named():
    c = Clock()
    gpu = GpuWindow(other_processes=3, others_share=0.4, utilisation=0.71)
    r = window(MadeUpLoad(0.0, clock=c, gpu=gpu), c, 1.0, device="cuda:0")
    assert r.disturbed and r.share == pytest.approx(0.4)
    assert r.line() == "disturbed: 3 other processes on the GPU, 71 % utilisation"
    idle_other = GpuWindow(other_processes=1, others_share=0.0, utilisation=0.9)  # a context that computes nothing
    assert window(MadeUpLoad(0.0, clock=c, gpu=idle_other), c, 1.0, device="cuda:0").quiet


def test_throttled_clocks_disturb_but_a_power_cap_is_the_kernels_own():
    c = Clock()
    hot = GpuWindow(0, 0.0, 1.0, ("thermal",))
    assert window(MadeUpLoad(0.0, clock=c, gpu=hot), c, 1.0, device="cuda").line() == \
        "disturbed: clocks throttled (thermal)"
    capped = GpuWindow(0, 0.0, 1.0, ("power",))
    assert window(MadeUpLoad(0.0, clock=c, gpu=capped), c, 1.0, device="cuda").quiet


def test_a_gpu_without_nvml_is_unknown_not_an_error():
    c = Clock()
    r = window(MadeUpLoad(0.0, clock=c, gpu=None), c, 1.0, device="cuda:1")
    assert r.verdict == "unknown" and r.cause == "no GPU counters (NVML)"
    busy = window(MadeUpLoad(0.5, clock=c, gpu=None), c, 1.0, device="cuda:1")
    assert busy.disturbed  # a busy CPU stays disturbed whatever the GPU counters


def test_combine_is_the_worst_of_its_parts_with_the_share_summed():
    c = Clock()
    quiet = window(MadeUpLoad(0.0, clock=c), c, 3.0)
    busy = window(MadeUpLoad(0.5, clock=c), c, 1.0)
    both = Quietness.combine([quiet, busy, quiet])
    assert both.disturbed and both.wall_s == pytest.approx(7.0)
    assert both.share == pytest.approx(1.0 / 14) and both.others_cpu_s == pytest.approx(1.0)
    assert both.line() == "disturbed: other programs used 50 % of 2 cores (in 1 of 3 measurements)"
    assert Quietness.combine([quiet, quiet]).quiet
    short = window(MadeUpLoad(0.0, clock=c), c, 0.01)
    assert Quietness.combine([quiet, short]).verdict == "unknown"
    assert Quietness.combine([]).verdict == "unknown"


def test_json_round_trips_and_a_forged_record_reads_as_unknown():
    c = Clock()
    r = window(MadeUpLoad(0.5, clock=c, threads=4), c, 2.0)
    d = r.to_json()
    assert d["verdict"] == "disturbed" and d["share"] == 0.5 and d["own_threads"] == 4
    assert Quietness.from_json(d) == r
    assert Quietness.from_json({"verdict": "calm"}).verdict == "unknown"
    assert Quietness.from_json("quiet").verdict == "unknown"  # type: ignore[arg-type]


def test_injected_load_reaches_every_watch_inside():
    c = Clock()
    with injected(MadeUpLoad(0.6, clock=c)) as load:
        assert q.default_sampler() is load
        with watch("cpu", cores=(0, 1)) as w:
            c.t += 1.0
    assert w.result.disturbed and q.default_sampler() is not load


def test_the_systems_counters_give_a_verdict_and_no_user_or_command():
    """On the real machine only what load cannot change: the fields are filled and the cause names
    no process. (Quiet or disturbed depends on the neighbours and is not asserted.)"""
    import time

    with watch("cpu") as w:
        time.sleep(0.1)
    r = w.result
    assert r.verdict in q.VERDICTS and r.wall_s >= 0.1 and 1 <= r.cores <= len(q.affinity())
    if r.share is not None:
        assert 0.0 <= r.share <= 1.0
    assert "pytest" not in r.cause and "python" not in r.cause


def test_by_default_a_watch_counts_the_cores_torch_computes_on(monkeypatch):
    """A one-thread timing on two cores beside one busy neighbour is not disturbed (the neighbour has a
    core of its own); a timing on both cores is. The cores come from torch's thread count."""
    import torch

    from perflab.core import quietness as q

    monkeypatch.setattr(q, "affinity", lambda: (0, 1))
    clock = iter(range(0, 100, 1))
    verdicts = {}
    for threads in (1, 2):
        monkeypatch.setattr(torch, "get_num_threads", lambda t=threads: t)
        load = q.MadeUpLoad(0.5, own_cores=threads, clock=lambda: float(next(clock)))
        with q.watch("cpu", sampler=load) as w:
            pass
        verdicts[threads] = (w.result.verdict, w.result.cores)
    assert verdicts == {1: ("quiet", 1), 2: ("disturbed", 2)}
