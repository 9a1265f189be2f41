"""Tests of `perflab.core.denormals`."""

from __future__ import annotations

import math
import platform
import sys

import pytest
import torch

from perflab.core.denormals import (
    beside_reference,
    count_denormals,
    denormal_matmul_slowdown,
    flush_is_per_thread,
    penalty_verdict,
    per_thread_line,
    per_thread_rows,
    reference,
)
from perflab.core.errors import InputError


def _cli_json(*args):
    import json
    import subprocess

    r = subprocess.run([sys.executable, "-m", "perflab", *args, "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


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
        return [{"threads": 1, "flush_denormal": False, "slowdown": slow},
                {"threads": 1, "flush_denormal": True, "slowdown": flushed}]

    paying = penalty_verdict(rows(40.0, 1.0))
    assert paying["pays"] and paying["flush_fixes"] and "40x slower" in paying["line"]
    unfixed = penalty_verdict(rows(40.0, 38.0))
    assert unfixed["pays"] and not unfixed["flush_fixes"] and "still 38.0x" in unfixed["line"]
    free = penalty_verdict(rows(1.1, 0.9))
    assert not free["pays"] and "full speed" in free["line"]
    with pytest.raises(InputError, match="1-thread rows"):
        penalty_verdict([{"threads": 2, "flush_denormal": False, "slowdown": 40.0}])


def test_reference_cpu_pays_and_its_flush_is_per_thread():
    # The Intel Xeon figures of the degenerate-step report (data/denormal_reference.json):
    # 31 ms vs 0.43 ms on 1 thread, fixed by flushing; 17.6 vs 0.44 ms on 2 threads, not fixed.
    ref = reference()
    by = {(r["threads"], r["flush_denormal"]): r["slowdown"] for r in ref["rows"]}
    assert by[(1, False)] == pytest.approx(31.0 / 0.43) and by[(1, True)] == pytest.approx(1.0)
    assert by[(2, False)] == pytest.approx(17.6 / 0.44) and by[(2, True)] > by[(2, False)] * 0.9
    assert penalty_verdict(ref["rows"])["flush_fixes"]
    assert ref["source"] and ref["step"]["degenerate_fwd_bwd_s"] / ref["step"]["sane_fwd_bwd_s"] > 30


def test_denormal_matmul_is_measured_with_its_operands_counted():
    before = torch.get_num_threads()
    rows = denormal_matmul_slowdown(128, threads=[1], rep_ms=15, warmup_ms=3)
    assert torch.get_num_threads() == before  # restored
    assert [(r["threads"], r["flush_denormal"]) for r in rows] == [(1, False), (1, True)]
    assert all(r["denormal_inputs"] == int(128 * (1 / 3)) * 128 for r in rows)  # a third of A's rows
    assert all(r["normal_ms"] > 0 and r["denormal_ms"] > 0 for r in rows)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the denormal slowdown is an x86 CPU's")
def test_where_the_cpu_pays_flushing_fixes_it_on_the_calling_thread_only():
    rows = denormal_matmul_slowdown(128, threads=[1], rep_ms=15, warmup_ms=3)
    verdict = penalty_verdict(rows)
    if not verdict["pays"]:
        pytest.skip(verdict["line"])  # e.g. AMD Zen 3: denormal FMAs at full speed, nothing to fix
    assert verdict["flush_fixes"], verdict
    per = flush_is_per_thread(128, rep_ms=15, warmup_ms=3)
    assert per["ratio"] > 3, per  # the thread that did not set the flag stays slow, relative to its own normal time


@pytest.mark.slow
def test_mfu_and_memory_measure_the_same_realistic_step():
    """Both commands train small-gpt (V = 4096) for real: loss near ln 4096 = 8.32 in each, both time
    a forward and a backward, and memory's peak is the predicted one. Their seconds are not compared:
    two processes timed at different moments on a shared machine can differ by any factor."""
    mfu = _cli_json("mfu", "--measure", "--preset", "small-gpt", "--batch", "2", "--steps", "3")
    mem = _cli_json("memory", "--measure", "--preset", "small-gpt", "--batch", "2")
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
    rows = [{"threads": 1, "flush_denormal": False, "slowdown": 1.04}, {"threads": 1, "flush_denormal": True, "slowdown": 0.98}]
    table = beside_reference(rows)
    assert [(r["threads"], r["flush_denormal"]) for r in table] == [(1, False), (1, True), (2, False), (2, True)]
    assert table[0]["recorded slowdown"] == pytest.approx(72.1) and table[0]["slowdown here"] == "1.0"
    assert table[2]["slowdown here"].startswith("not measured")  # no 2-thread row measured here
    per = {"caller_normal_ms": 0.4, "caller_ms": 0.4, "other_normal_ms": 0.4, "other_thread_ms": 16.0,
           "caller_slowdown": 1.0, "other_slowdown": 40.0, "ratio": 40.0}
    assert [r["slowdown"] for r in per_thread_rows(per)] == [1.0, 40.0]
    assert "40.0x as slowed down" in per_thread_line(per, penalty_verdict([{**r, "slowdown": 40.0} if not r["flush_denormal"]
                                                                            else r for r in rows]))
    assert "nothing to show here" in per_thread_line(per, penalty_verdict(rows))
