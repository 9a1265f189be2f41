"""Tests of `perflab.core.denormals`."""

from __future__ import annotations

import math
import platform
import sys

import pytest
import torch

from perflab.core.denormals import (
    DenormalRow,
    DenormalSweep,
    InitStory,
    InitVersion,
    PerThread,
    ThreadTimes,
    count_denormals,
    denormal_matmul_slowdown,
    flush_is_per_thread,
    init_story,
    penalty_verdict,
    reference,
)
from perflab.core.errors import InputError
from perflab.core.quietness import Quietness

QUIET = Quietness("quiet", 0.0, 1.0, 1, 0.0, 1, "")
BUSY = Quietness("disturbed", 0.79, 1.0, 2, 1.58, 2, "other programs used 79 % of 2 cores")


def _row(threads, flush, slowdown, q=QUIET):
    return DenormalRow(threads, flush, 1e-3, slowdown * 1e-3, q)


def test_denormal_count_skips_missing_gradients_and_integer_tensors():
    w = torch.tensor([1e-40, 1.0, 0.0, 2.0], requires_grad=True)  # 1e-40: below fp32's smallest normal
    assert count_denormals([w, torch.arange(4)]).as_dict() == {"denormal": 1, "total": 4, "fraction": 0.25}
    w.grad = torch.tensor([1e-40, 1e-40, 0.0, 1.0])
    no_grad = torch.ones(3, requires_grad=True)  # never through a backward: .grad is None
    assert count_denormals([w, no_grad], grads=True).as_dict() == {"denormal": 2, "total": 4, "fraction": 0.5}


def test_counting_denormals():
    t = torch.tensor([0.0, 1.0, 1e-39, -1e-40, 1e-30])
    d = count_denormals([t])
    assert (d.denormal, d.total) == (2, 5) and d.fraction == pytest.approx(0.4)


def test_penalty_verdict_reads_both_kinds_of_cpu():
    def rows(slow, flushed):
        return [_row(1, False, slow), _row(1, True, flushed)]

    paying = penalty_verdict(rows(40.0, 1.0))
    assert paying.pays and paying.flush_fixes and "40× slower" in paying.line and paying.kind == "pays"
    unfixed = penalty_verdict(rows(40.0, 38.0))
    assert unfixed.pays and not unfixed.flush_fixes and "still 38×" in unfixed.line
    free = penalty_verdict(rows(1.1, 0.9))
    assert not free.pays and "full speed" in free.line and free.kind == "full speed"
    with pytest.raises(InputError, match="1-thread rows"):
        penalty_verdict([_row(2, False, 40.0)])


def test_a_busy_machine_draws_no_verdict_and_its_rows_say_so():
    """Lesson 00 once printed "ran the denormal matmul at full speed" above rows that differed 2×: those
    rows were measured on a busy machine. A disturbed row the verdict reads makes it inconclusive; a
    disturbed row it does not read is named, and every table marks them."""
    sweep = DenormalSweep(128, 5376, (_row(1, False, 1.04, BUSY), _row(1, True, 0.98), _row(2, False, 0.7, BUSY),
                                      _row(2, True, 1.7, BUSY)))
    v = sweep.verdict()
    assert v.kind == "inconclusive" and not v.pays and not v.flush_fixes
    assert v.line.startswith("inconclusive: the machine was busy (other programs used 79 % of 2 cores): the 1-thread "
                             "rows (1.0× with flushing off, 0.98× with it on) say nothing"), v.line
    assert "full speed" not in v.line and "pays" not in v.line
    table = sweep.table()
    assert list(table.columns) == ["threads", "flushing", "normal (ms)", "denormal (ms)", "slowdown (×)",
                                   "machine while measured"]
    assert list(table["machine while measured"]) == ["busy: other programs used 79 % of 2 cores", "quiet",
                                                     "busy: other programs used 79 % of 2 cores",
                                                     "busy: other programs used 79 % of 2 cores"]
    assert sweep.quietness.disturbed
    half = DenormalSweep(128, 5376, (_row(1, False, 1.04), _row(1, True, 0.98), _row(2, False, 0.7, BUSY),
                                     _row(2, True, 1.7, BUSY)))
    line = half.verdict().line
    assert "full speed on 1 thread (1.0× with flushing off, 0.98× with it on" in line
    assert line.endswith("; the 2-thread, flushing-off and 2-thread, flushing-on rows were measured on a busy "
                         "machine, so the verdict does not read them"), line
    assert half.sentence().startswith("A (128×128 fp32) holds 5,376 denormal entries. This CPU ran the denormal matmul")


def test_reference_cpu_pays_and_its_flush_is_per_thread():
    # The Intel Xeon figures of the degenerate-step report (data/denormal_reference.json):
    # 31 ms vs 0.43 ms on 1 thread, fixed by flushing; 17.6 vs 0.44 ms on 2 threads, not fixed.
    ref = reference()
    by = {(r.threads, r.flush): r.slowdown for r in ref.rows}
    assert by[(1, False)] == pytest.approx(31.0 / 0.43) and by[(1, True)] == pytest.approx(1.0)
    assert by[(2, False)] == pytest.approx(17.6 / 0.44) and by[(2, True)] > by[(2, False)] * 0.9
    assert ref.verdict().flush_fixes
    assert all(r.quietness.verdict == "unknown" and r.quietness.cause == "not recorded with these figures"
               for r in ref.rows)
    assert ref.source and ref.step["degenerate_fwd_bwd_s"] / ref.step["sane_fwd_bwd_s"] > 30


def test_denormal_matmul_is_measured_with_its_operands_counted():
    before = torch.get_num_threads()
    sweep = denormal_matmul_slowdown(128, threads=[1], rep_ms=15, warmup_ms=3)
    assert torch.get_num_threads() == before  # restored
    assert [(r.threads, r.flush) for r in sweep.rows] == [(1, False), (1, True)]
    assert sweep.denormal_inputs == int(128 * (1 / 3)) * 128  # a third of A's rows
    assert all(r.normal_s > 0 and r.denormal_s > 0 for r in sweep.rows)
    assert all(r.quietness.verdict in ("quiet", "disturbed", "unknown") for r in sweep.rows)  # each row carries it
    assert sweep.one_thread is sweep.rows[0]


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the denormal slowdown is an x86 CPU's")
def test_where_the_cpu_pays_flushing_fixes_it_on_the_calling_thread_only():
    sweep = denormal_matmul_slowdown(128, threads=[1], rep_ms=15, warmup_ms=3)
    verdict = sweep.verdict()
    if not verdict.pays:
        pytest.skip(verdict.line)  # e.g. AMD Zen 3: denormal FMAs at full speed, nothing to fix; or a busy machine
    assert verdict.flush_fixes, verdict
    per = flush_is_per_thread(128, rep_ms=15, warmup_ms=3)
    if per.quietness.disturbed:
        pytest.skip(per.line(verdict))
    assert per.ratio > 3, per  # the thread that did not set the flag stays slow, relative to its own normal time


@pytest.mark.slow
def test_mfu_and_memory_measure_the_same_realistic_step():
    """Both commands train small-gpt (V = 4096) for real: loss near ln 4096 = 8.32 in each, both time
    a forward and a backward, and memory's peak is the predicted one. Their seconds are not compared:
    two processes timed at different moments on a shared machine can differ by any factor."""
    import json
    import subprocess

    # the two commands start side by side: their imports and model builds overlap, and their timed steps
    # take turns on the device lock (their seconds are not compared either way); one timed step of mfu
    # times a forward and a backward as well as three did
    procs = [subprocess.Popen([sys.executable, "-m", "perflab", *args, "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for args in (("mfu", "--measure", "--preset", "small-gpt", "--batch", "2", "--steps", "1"),
                          ("memory", "--measure", "--preset", "small-gpt", "--batch", "2"))]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    mfu, mem = (json.loads(out) for out, _ in outs)
    for d in (mfu, mem):
        assert abs(d["loss"] - math.log(4096)) < 0.5, d["loss"]
        assert d["forward_s"] > 0 and d["backward_s"] > 0
    assert mem["step_s"] > 0 and mem["peak_bytes"] == mem["predicted_peak_bytes"]


def test_memory_measure_needs_a_preset_and_says_so():
    import subprocess

    r = subprocess.run([sys.executable, "-m", "perflab", "memory", "--measure", "--params", "1e6"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--measure needs --preset" in r.stderr and "Traceback" not in r.stderr


def test_this_machine_beside_the_recorded_cpu_and_the_per_thread_readout():
    sweep = DenormalSweep(128, 5376, (_row(1, False, 1.04), _row(1, True, 0.98, BUSY)))
    table = reference().beside(sweep)
    assert list(zip(table["threads"], table["flushing"], strict=True)) == [(1, "off"), (1, "on"), (2, "off"), (2, "on")]
    assert table["recorded slowdown (×)"][0] == "72" and table["slowdown here (×)"][0] == "1.0"
    assert table["slowdown here (×)"][1] == "0.98 (busy: says nothing)"
    assert str(table["slowdown here (×)"].iloc[2]).startswith("not measured")  # no 2-thread row measured here
    per = PerThread(ThreadTimes("the caller", 0.4e-3, 0.4e-3), ThreadTimes("the other", 0.4e-3, 16e-3), QUIET)
    assert list(per.table()["slowdown (×)"]) == ["1.0", "40"]
    paying = penalty_verdict([_row(1, False, 40.0), _row(1, True, 1.0)])
    assert per.line(paying) == "the thread that did not set the flag is 40× as slowed down as the one that did (40× against 1.0×)"
    assert "nothing to show here" in per.line(penalty_verdict([_row(1, False, 1.04), _row(1, True, 0.98)]))
    assert per.line(penalty_verdict([_row(1, False, 40.0, BUSY), _row(1, True, 1.0)])).startswith(
        "the matmul above was measured on a busy machine, so whether this CPU pays")
    busy = PerThread(per.caller, per.other, BUSY)
    assert busy.line(paying).startswith("inconclusive: the machine was busy (other programs used 79 % of 2 cores): "
                                        "the two threads' slowdowns (1.0× and 40×) say nothing")


def _version(init, targets, loss, share, ms, q=QUIET):
    return InitVersion(init, targets, loss, 8.32, int(share * 1e6), share, ms / 1e3, q)


def test_the_init_story_says_what_its_table_shows_and_never_reads_a_busy_timing():
    """Lesson 00 once showed the healthy init at 3,120 ms against the degenerate one's 674 ms with no
    note: every sentence now follows from the numbers beside it."""
    pays = penalty_verdict([_row(1, False, 72.0), _row(1, True, 1.0)])
    free = penalty_verdict([_row(1, False, 1.0), _row(1, True, 1.0)])
    slow = InitStory("small-gpt", (_version("torch", "inputs", 0.0, 0.5641, 2700), _version("torch", "next", 172, 0.0012, 90),
                                   _version("gpt2", "next", 8.3, 0.0, 85)))
    text = slow.finding(pays)
    assert text.startswith("version 1 scores each token against itself: loss 0 (ln V = 8.32), 564,100 denormal "
                           "gradient entries (56 %); version 3 starts where an untrained model should, loss 8.3")
    assert text.endswith("version 1 took 32× version 3's time for the same FLOPs: its denormal gradients cost this "
                         "CPU that time."), text
    busy = InitStory("small-gpt", (_version("torch", "inputs", 0.0, 0.56, 674, BUSY), _version("torch", "next", 172, 0.0012, 90),
                                   _version("gpt2", "next", 8.3, 0.0, 3120, BUSY)))
    text = busy.finding(pays)
    assert "The times say nothing: inconclusive: the machine was busy (other programs used 79 % of 2 cores) while " \
           "versions 1, 3 were timed" in text and "took" not in text
    assert list(busy.table()["machine while measured"])[0] == "busy: other programs used 79 % of 2 cores"
    odd = InitStory("small-gpt", (_version("torch", "inputs", 0.0, 0.56, 674), _version("torch", "next", 172, 0.0012, 90),
                                  _version("gpt2", "next", 8.3, 0.0, 3120)))
    text = odd.finding(pays)
    assert "but version 3 (0 % denormal) took 4.6× version 1's time (56 %), which denormals cannot explain" in text, text
    even = InitStory("small-gpt", (_version("torch", "inputs", 0.0, 0.56, 100), _version("torch", "next", 172, 0.0012, 95),
                                   _version("gpt2", "next", 8.3, 0.0, 98)))
    assert even.finding(free).endswith("this CPU runs denormals at full speed (the matmul above), so here only the "
                                       "loss and the count show the bug.")
    assert even.finding().endswith("under the 3× that would show a cost, so here only the loss and the count show "
                                   "the bug.")
    assert list(even.table().columns) == ["version", "init", "targets", "loss", "ln V (a uniform guess)",
                                          "denormal gradients", "denormal share (%)", "forward + backward (ms)",
                                          "machine while measured"]


def test_init_story_runs_each_version_in_the_devices_turn_and_watches_it(capsys):
    calls = []

    def health(cfg, **kw):
        calls.append(kw)
        return _version(kw["init"], kw["targets"], 1.0, 0.0, 1.0)

    story = init_story("tiny", health, seq=8, reps=2, device="cpu")
    assert [(c["init"], c["targets"], c["seq"], c["reps"]) for c in calls] == [
        ("torch", "inputs", 8, 2), ("torch", "next", 8, 2), ("gpt2", "next", 8, 2)]
    assert [v.quietness.verdict in ("quiet", "disturbed", "unknown") for v in story.versions] == [True] * 3
    assert capsys.readouterr().out.splitlines()[0] == "measuring version 1 of 3: init torch, targets inputs …"
