"""Lesson 00's sentences on injected timings: they say what the numbers did, never what should happen."""

from __future__ import annotations

import pytest

from perflab.core.compare import HostSync, copy_levels, host_sync_timings, last_level_cache

BUSY = {"verdict": "disturbed", "share": 0.6, "cause": "other programs used 60 % of 2 cores"}


def _hs(a_ms, b_ms, kind="cpu", q=None, wiggle=0.002):
    a = [a_ms / 1e3 * (1 + wiggle * (i % 3 - 1)) for i in range(20)]
    b = [b_ms / 1e3 * (1 + wiggle * (i % 3 - 1)) for i in range(20)]
    return HostSync(512, kind, a, b, b_ms / 1e3, q)


def test_equal_columns_on_a_cpu_are_said_to_agree():
    s = _hs(21.6, 21.9).sentence()
    assert s.startswith("The first two columns agree within their noise (21.6 ms and 21.9 ms"), s


def test_columns_that_differ_on_a_cpu_are_never_said_to_agree():
    s = _hs(21.61, 30.61).sentence()  # the figures lesson 00 once printed beside "the columns agree"
    assert s.startswith("The first two columns differ by 1.42× (21.6 ms and 30.6 ms") and "agree" not in s, s


def test_a_busy_machine_or_scattered_calls_draw_no_conclusion():
    busy = _hs(21.61, 30.61, q=BUSY).sentence()
    assert busy.startswith("Inconclusive: the machine was busy (other programs used 60 % of 2 cores)"), busy
    assert "differ" not in busy and "agree" not in busy
    # columns that happen to agree on a busy machine draw no conclusion either (lesson 00 once said "agree"
    # beside a row measured while other programs used 83 % of the cores)
    agree = _hs(21.6, 21.9, q=BUSY).sentence()
    assert agree.startswith("Inconclusive: the machine was busy") and "agree" not in agree, agree
    # lesson 00 once printed "agree within the noise (24 ms and 4.17 ms per call, noise ±268 %)"
    a = [0.004] * 10 + [0.030] * 10
    b = [0.024, 0.004, 0.030, 0.050] * 5
    s = HostSync(512, "cpu", a, b, 0.01).sentence()
    assert s.startswith("Inconclusive: single calls scattered by more than half their median") and "agree" not in s, s


def test_medians_are_compared_by_their_standard_errors_not_by_one_calls_spread():
    # 20 calls whose single-call σ is about 15 %: the medians' standard errors are about 4 % each, so a
    # 1.25× gap differs (the old rule, K·σ·√2 of one call's σ, needed 1.87× and called it agreement)
    s = _hs(20.0, 25.0, wiggle=0.1).sentence()
    assert s.startswith("The first two columns differ by 1.25×"), s
    assert _hs(20.0, 21.0, wiggle=0.1).sentence().startswith("The first two columns agree")


def test_a_gpu_launch_is_named_as_the_launch():
    s = _hs(0.01, 2.5, kind="cuda").sentence()
    assert s.startswith("Without waiting, the host saw 0.0100 ms per call: the launch only") and "250×" in s
    assert "too small" not in s and "small" in _hs(0.01, 0.0101, kind="cuda").sentence()


def test_host_sync_timings_measures_both_loops_on_this_cpu():
    hs = host_sync_timings(32, "cpu", reps=4)
    assert len(hs.no_sync_s) == len(hs.synced_s) == 4 and set(hs.columns()) == {"no_sync", "synced", "perflab_bench"}
    # which way depends on the machine (and a busy one draws no conclusion): not asserted
    assert hs.sentence().startswith(("The first two columns", "Inconclusive: "))


MIB = 2**20


def test_the_best_copy_in_cache_is_not_called_memory_speed():
    lv = copy_levels([1 * MIB, 8 * MIB, 256 * MIB], [176.0, 60.0, 11.0], cache_bytes=32 * MIB)
    assert lv.best_in_cache and lv.largest_past_cache
    s = lv.sentence()
    assert "fits in the last-level cache: a cache result, not memory speed" in s and "largest buffer's: 11.0 GB/s" in s
    assert [r["quantity"] for r in lv.rows()] == ["copy, fastest size (1 MiB: in cache)",
                                                  "copy, largest buffer (256 MiB: memory)"]


def test_a_gpu_sweep_whose_largest_buffer_is_fastest_reads_as_memory_speed():
    # an H200's copy sweep (lesson 00, torch 2.11): 2 MiB in its 60 MiB L2 is slow (launch-bound), and
    # the largest buffer, 2048 MiB, is both the fastest and past the cache
    lv = copy_levels([2 * MIB, 64 * MIB, 2048 * MIB], [175.0, 3775.0, 4243.0], cache_bytes=60 * MIB)
    s = lv.sentence()
    assert "The fastest copy (4,243 GB/s) was the 2048 MiB buffer." in s and "that is memory speed" in s, s
    assert "1× below" not in s and "e+03" not in s


def test_a_sweep_that_never_left_the_cache_says_so():
    lv = copy_levels([1 * MIB, 4 * MIB], [50.0, 40.0], cache_bytes=32 * MIB)
    assert not lv.largest_past_cache and "memory speed was not reached" in lv.sentence()
    with pytest.raises(ValueError):
        copy_levels([], [], None)


def test_the_last_level_cache_is_l3_on_a_cpu_and_l2_on_a_gpu():
    assert last_level_cache({"l3_cache_bytes": 32, "l2_cache_bytes": 2}, on_gpu=False) == 32
    assert last_level_cache({"l2_cache_bytes": 50}, on_gpu=True) == 50 and last_level_cache({}, on_gpu=False) is None


def test_the_host_sync_table_reads_in_milliseconds_with_the_machine():
    t = _hs(21.61, 30.61, q=BUSY).table()
    assert list(t.columns) == ["until the call returned (ms)", "until the device finished (ms)", "perflab's timer (ms)",
                               "machine while measured"]
    assert t.index.tolist() == ["512³ fp32 matmul on cpu"]
    assert t.iloc[0].tolist() == ["21.6", "30.6", "30.6", "busy: other programs used 60 % of 2 cores"]


def test_copy_levels_from_a_busy_machine_say_inconclusive_and_name_both_buffers_once():
    lv = copy_levels([1 * MIB, 256 * MIB], [176.0, 11.0], cache_bytes=32 * MIB, quietness=[None, BUSY])
    assert lv.busy == "other programs used 60 % of 2 cores"
    assert lv.sentence().startswith("Inconclusive: the machine was busy (other programs used 60 % of 2 cores): the "
                                    "fastest copy (176 GB/s, 1 MiB) and the largest buffer's (11.0 GB/s, 256 MiB)")
    one = copy_levels([16 * MIB], [4.2], cache_bytes=32 * MIB, quietness=[BUSY])
    assert "the fastest copy (4.20 GB/s, 16 MiB), also the largest buffer, may be" in one.sentence()
    assert copy_levels([1 * MIB, 256 * MIB], [176.0, 11.0], cache_bytes=32 * MIB).busy is None
