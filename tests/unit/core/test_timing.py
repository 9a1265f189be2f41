"""Tests of `perflab.core.timing`."""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from perflab.core import (
    timing,
)
from perflab.core.errors import CorrectnessError
from perflab.core.timing import BenchResult, bench, bench_checked, check_close


def test_bench_result_spread_readout_and_long_times():
    r = timing.BenchResult([1.0, 2.0, 4.0], label="step")
    assert r.std_s == pytest.approx(statistics.stdev([1.0, 2.0, 4.0]))
    assert timing.BenchResult([0.5]).std_s == 0.0
    assert str(r).startswith("step: median 2.000 s (IQR 1.500 s, min 1.000 s, n=3) on cpu")
    rows = timing.BenchResult([1.0, 2.0, 4.0]).readout()
    assert rows.title == "kernel on cpu" and rows.as_dict()["median"] == "2.00 s" and rows.noisy


def test_timings_are_written_in_seconds_milliseconds_or_microseconds():
    from perflab.core.timing import _fmt_s

    assert [_fmt_s(2.5), _fmt_s(0.0125), _fmt_s(3.2e-5)] == ["2.500 s", "12.500 ms", "32.0 µs"]
    assert [_fmt_s(1.0), _fmt_s(1e-3)] == ["1.000 s", "1.000 ms"]  # each unit from its first whole one


def test_timing_tolerances_and_refusals():
    from perflab.core import timing

    assert timing.default_tolerance(torch.float64) == 1e-10
    assert timing.default_tolerance(torch.int8) == 1e-1
    with pytest.raises(ValueError, match="warmup_ms must be ≥ 0 and rep_ms > 0"):
        timing.bench(lambda: None, rep_ms=0, device="cpu")


def test_bench_can_flush_the_cache_on_a_cpu_too(monkeypatch):
    from perflab.core import timing

    monkeypatch.setattr(timing, "FLUSH_BYTES", 2**20)  # small: the rule, not the size, is under test
    monkeypatch.setattr(timing, "_flush_buffers", {})
    x = torch.ones(256)
    t = timing.bench(lambda: x.add_(1), warmup_ms=1, rep_ms=5, device="cpu", flush_l2=True)
    assert t.median_s > 0 and x[0] > 1
    assert timing._flush_buffer(torch.device("cpu")).numel() * 4 == timing.FLUSH_BYTES


def test_result_statistics():
    r = BenchResult([1.0, 2.0, 3.0, 4.0, 100.0], label="x")
    assert r.median_s == 3.0 and r.min_s == 1.0 and r.max_s == 100.0 and r.n == 5
    assert r.iqr_s == pytest.approx(4.0 - 2.0)
    assert r.rate(6.0) == 2.0
    d = r.as_dict()
    assert d["median_s"] == 3.0 and d["n"] == 5


class FakeClock:
    """`time.perf_counter` for the timer, moved only by the timed function: the timer's arithmetic is
    tested on calls of known length, whatever else the machine runs."""

    def __init__(self, monkeypatch):
        self.t = 0.0  # calls of 2^-k seconds add up exactly
        monkeypatch.setattr(timing.time, "perf_counter", lambda: self.t)

    def call(self, seconds: float):
        def fn():
            self.t += seconds
        return fn


def test_bench_measures_known_duration(monkeypatch):
    # a function that takes 2^-8 s (3.9 ms): the median is that, one call per sample
    clock = FakeClock(monkeypatch)
    r = bench(clock.call(2**-8), warmup_ms=10, rep_ms=62.5, device="cpu")
    assert r.median_s == 2**-8 and r.iqr_s == 0.0
    assert r.n == 16 and r.calls_per_sample == 1  # 62.5 ms of 3.9 ms calls


def test_bench_batches_tiny_calls(monkeypatch):
    clock = FakeClock(monkeypatch)
    r = bench(clock.call(2**-20), warmup_ms=5, rep_ms=20, device="cpu")
    # a µs call is batched to fill 0.2 ms, so the clock's resolution does not dominate
    assert r.calls_per_sample == 210 and r.median_s == pytest.approx(2**-20)
    assert r.n == 99  # samples of 210 calls filling the 20 ms


def test_budgets_scale_repetitions(monkeypatch):
    clock = FakeClock(monkeypatch)
    short = bench(clock.call(2**-10), warmup_ms=1, rep_ms=10, device="cpu")
    long = bench(clock.call(2**-10), warmup_ms=1, rep_ms=40, device="cpu")
    assert (short.n, long.n) == (10, 40)


def test_grad_to_none_resets():
    w = torch.ones(3, requires_grad=True)
    seen = []

    def step():
        seen.append(w.grad is None)
        (w * 2).sum().backward()

    bench(step, warmup_ms=1, rep_ms=5, device="cpu", grad_to_none=[w])
    assert seen[-1] is True  # the last timed call started from a fresh gradient


def test_check_close_passes_and_fails():
    a = torch.randn(32, 32)
    ref = a.double() @ a.double()
    assert check_close(a @ a, ref).ok
    wrong = (a @ a).clone()
    wrong[0, 0] += 100
    with pytest.raises(CorrectnessError, match="relative error"):
        check_close(wrong, ref)
    with pytest.raises(CorrectnessError, match="shape"):
        check_close(a[:3], ref)
    nan = (a @ a).clone()
    nan[1, 1] = float("nan")
    with pytest.raises(CorrectnessError, match="NaN"):
        check_close(nan, ref)


def test_bench_checked_refuses_wrong_kernel():
    a = torch.randn(16, 16)
    with pytest.raises(CorrectnessError):
        bench_checked(lambda: a @ a.t(), lambda: a.double() @ a.double(), device="cpu", rep_ms=5)
    r = bench_checked(lambda: a @ a, lambda: a.double() @ a.double(), device="cpu", rep_ms=5)
    assert r.meta["rel_error"] < 1e-5


@pytest.mark.gpu
def test_cuda_bench_times_each_call_with_events_and_flushes_l2():
    """How closely perflab's timer agrees with triton's do_bench depends on who else uses the GPU:
    `make bench-trust` reports it. Here only what load cannot change: the recipe."""
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    r = bench(lambda: a @ b, warmup_ms=10, rep_ms=50)
    assert r.device.startswith("cuda") and r.flushed_l2 and r.calls_per_sample == 1 and r.n >= 5
    assert all(t > 0 for t in r.times_s) and r.quietness.verdict in ("quiet", "disturbed", "unknown")


def test_a_slow_call_is_not_run_five_times_just_to_estimate_it():
    # one call already fills rep_ms: the estimate stops there, so a 30 ms call costs
    # first + 1 estimate + 1 warm-up + min_reps timed calls, not first + 5 + 1 + min_reps
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.03)

    res = bench(slow, device="cpu", rep_ms=10, warmup_ms=0, min_reps=2)
    assert res.n == 2 and len(calls) == 1 + 1 + 1 + 2, len(calls)
    assert res.median_s >= 0.03  # a sleep is never shorter; how much longer depends on the machine's load


@pytest.mark.usefixtures("watch_all_cores")
def test_bench_records_the_machines_quietness_and_shows_it_only_when_disturbed():
    from perflab.core.quietness import MadeUpLoad, injected

    x = torch.ones(64)
    # counters of 0.1 ms resolution: however fast this machine runs the bench (at least 5 samples of
    # 0.2 ms), its window is long enough to tell
    with injected(MadeUpLoad(0.0, tick_s=1e-4)):
        calm = timing.bench(lambda: x.add_(1), warmup_ms=1, rep_ms=60, device="cpu", label="add")
    assert calm.quietness.quiet
    assert "disturbed" not in str(calm) and "disturbed" not in str(calm.readout())
    with injected(MadeUpLoad(0.6, tick_s=1e-4)):
        busy = timing.bench(lambda: x.add_(1), warmup_ms=1, rep_ms=60, device="cpu", label="add")
    assert busy.quietness.disturbed and busy.quietness.share == pytest.approx(0.6)
    line = "disturbed: other programs used 60 % of"
    assert line in str(busy) and any(n.startswith(line) for n in busy.readout().notes)
    d = busy.as_dict()
    assert d["quietness"]["verdict"] == "disturbed" and d["quietness"]["share"] == pytest.approx(0.6)
    assert d["waited_s"] >= 0.0 and busy.waited_s == d["waited_s"]


def test_a_result_built_by_hand_has_unknown_quietness_not_quiet():
    r = BenchResult([1.0, 2.0])
    assert r.quietness.verdict == "unknown" and r.as_dict()["quietness"]["verdict"] == "unknown"
    assert r.disturbed_note() is None and "waited for the device" not in r.readout().as_dict()


def test_the_readout_gives_the_wait_for_the_device_apart_from_the_measurement():
    from perflab.core.quietness import Quietness

    q = Quietness("quiet", 0.0, 0.131, 2, 0.0, 2, "")
    r = BenchResult([1e-3, 1e-3], quietness=q, waited_s=7.0)
    assert r.readout().as_dict()["waited for the device"] == "7.00 s (then measured 131 ms)"
    assert "waited for the device" not in BenchResult([1e-3], quietness=q, waited_s=0.4).readout().as_dict()
