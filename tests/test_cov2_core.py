"""More of the measuring core's edges: denormal counts that skip what has no floats, CPU facts read
from other machines' /proc and /sys, fallbacks when psutil or torch cannot answer, the Apple-GPU
and fp8 paths driven through their switches, spec-sheet peaks, the lab guard's closures and
globals, bandwidth and timing read-outs, the copy check, sweeps' callbacks and an installed copy."""

from __future__ import annotations

import functools
import statistics
import sys
from types import SimpleNamespace

import pytest
import torch

from perflab.core import device, grading, labguard, lock, measure, results, timing, validate
from perflab.core.denormals import count_denormals
from perflab.core.dtypes import parse_dtype
from perflab.core.errors import InputError
from perflab.core.validate import positive_number


class _Printer:
    """IPython's pretty printer, as far as `_repr_pretty_` uses it."""

    def __init__(self):
        self.out = ""

    def text(self, s: str) -> None:
        self.out += s


# ---------------------------------------------------------------- denormals


def test_denormal_count_skips_missing_gradients_and_integer_tensors():
    w = torch.tensor([1e-40, 1.0, 0.0, 2.0], requires_grad=True)  # 1e-40: below fp32's smallest normal
    assert count_denormals([w, torch.arange(4)]).as_dict() == {"denormal": 1, "total": 4, "fraction": 0.25}
    w.grad = torch.tensor([1e-40, 1e-40, 0.0, 1.0])
    no_grad = torch.ones(3, requires_grad=True)  # never through a backward: .grad is None
    assert count_denormals([w, no_grad], grads=True).as_dict() == {"denormal": 2, "total": 4, "fraction": 0.5}


# ---------------------------------------------------------------- device facts

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: six
model\t\t: 85
model name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz
flags\t\t: avx2 fma
"""
MAX_FREQ = "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"


def _facts_with(monkeypatch, files: dict[str, str | None]):
    real = device._read
    monkeypatch.setattr(device, "_read", lambda path: files[path] if path in files else real(path))
    return device.cpu_facts.__wrapped__()  # uncached: the process's own cached facts stay untouched


def test_cpu_clock_comes_from_cpufreq_then_from_the_model_name(monkeypatch):
    f = _facts_with(monkeypatch, {"/proc/cpuinfo": CPUINFO, MAX_FREQ: "3700000"})
    assert (f.clock_mhz, f.clock_source) == (3700.0, "cpufreq max (boost) clock")
    assert f.cpu_model == 85 and f.family is None  # 'six' is not a number: unknown, not an error
    f = _facts_with(monkeypatch, {"/proc/cpuinfo": CPUINFO, MAX_FREQ: None})
    assert (f.clock_mhz, f.clock_source) == (2400.0, "nominal clock in the model name")
    assert f.model == "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz" and f.flags == frozenset({"avx2", "fma"})


def test_meminfo_is_empty_without_proc_and_without_psutil(monkeypatch):
    import psutil

    def broken():
        raise RuntimeError("no memory figures here")

    monkeypatch.setattr(device, "_read", lambda path: None)
    monkeypatch.setattr(psutil, "virtual_memory", broken)
    assert device._meminfo() == {}


def test_cpu_description_without_torchs_vector_isa(monkeypatch):
    def broken():
        raise RuntimeError("no capability query in this build")

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", broken)
    info = device._describe_cpu()
    assert info.kind == "cpu" and info.details["vector_isa"] is None
    assert info.details["torch_threads"] == torch.get_num_threads()


def test_mps_is_refused_here_and_chosen_where_torch_reports_it(monkeypatch):
    monkeypatch.delenv("PERFLAB_DEVICE", raising=False)
    monkeypatch.setattr(device, "_mps_available", lambda: False)
    with pytest.raises(InputError, match="^device 'mps' asked for, but MPS is not available: use cpu$"):
        device.pick_device("mps")
    monkeypatch.setattr(device, "_mps_available", lambda: True)  # an Apple GPU, as torch would report it
    assert device.pick_device("mps") == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device.pick_device() == torch.device("mps")


def test_synchronize_waits_for_an_apple_gpu_through_torch_mps(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append("mps"))
    device.synchronize("mps")
    device.synchronize("cpu")  # a no-op
    assert calls == ["mps"]


# ---------------------------------------------------------------- grading and the lab guard


def test_grading_finds_the_code_under_wrappers():
    def original(x):
        return x

    @functools.wraps(original)
    def wrapper(x):
        return original(x)

    assert grading._code(wrapper) is original.__code__
    assert grading._code(functools.lru_cache(original)) is original.__code__
    assert grading._code(len) is None  # a builtin has no Python code


def test_multiple_choice_prints_as_text_in_ipython():
    quiz = grading.MultipleChoice("q", ["why?"], ["this", "that"], correct=[1], user="bob")
    p = _Printer()
    quiz._repr_pretty_(p, False)
    assert p.out == str(quiz) and p.out.startswith("q\nquestions:\n  1. why?\noptions:\n")


def _uses_a_global(x):
    return positive_number("x", x)


def test_labguard_finds_a_perflab_function_reached_as_a_global_and_skips_deleted_cells():
    assert labguard.uses_perflab(_uses_a_global, [positive_number]) == ["positive_number"]

    def make():
        kept = positive_number

        def inner():
            return kept

        return inner

    inner = make()
    assert labguard.uses_perflab(inner, [positive_number]) == ["positive_number"]
    (cell,) = inner.__closure__ or ()
    del cell.cell_contents  # the closure's cell is empty when the guard looks
    assert labguard.uses_perflab(inner, [positive_number]) == []


def test_in_kernel_is_false_when_ipython_is_half_imported(monkeypatch):
    def half_imported():
        raise AttributeError("partially initialized module 'IPython'")

    monkeypatch.setitem(sys.modules, "IPython", SimpleNamespace(get_ipython=half_imported))
    assert lock._in_kernel() is False

    class ZMQInteractiveShell:  # what a Jupyter kernel's shell is called
        pass

    monkeypatch.setitem(sys.modules, "IPython", SimpleNamespace(get_ipython=ZMQInteractiveShell))
    assert lock._in_kernel() is True


# ---------------------------------------------------------------- spec-sheet peaks


def test_spec_sheet_peaks_describe_a_figure_and_a_missing_mode():
    from perflab.core.hardware import peaks_for

    peaks = peaks_for(device.DeviceInfo("cuda", "Tesla V100-SXM2-16GB", 0, {}))
    assert peaks.source == "spec sheet" and peaks.spec is not None
    assert peaks.describe("bf16") == ("bf16: no dense bf16 figure for NVIDIA V100 SXM2 16GB in the spec table "
                                      "(no such mode, or none published)")
    assert peaks.describe("fp16") == f"fp16: 125 TFLOP/s dense (NVIDIA V100 SXM2 16GB; {peaks.spec.sources['peak_tflops']})"


# ---------------------------------------------------------------- matmuls in fp8, driven past the GPU check


def _accept_fp8(monkeypatch):
    monkeypatch.setattr(measure, "check_supported", lambda dtype, dev: parse_dtype("fp8"))


def test_fp8_sizes_must_be_multiples_of_16(monkeypatch):
    _accept_fp8(monkeypatch)
    with pytest.raises(InputError, match="^m=40 must be a multiple of 16: try 32 or 48$"):
        measure.validate_matmul(40, 64, 64, "fp8", torch.device("cpu"))
    assert measure.validate_matmul(32, 48, 64, "fp8", torch.device("cpu"))[:3] == (32, 48, 64)


def test_fp8_matmul_multiplies_the_rounded_operands_into_bf16(monkeypatch):
    _accept_fp8(monkeypatch)
    fn, a, b = measure.make_matmul(32, 16, 48, "fp8", device="cpu")
    assert a.dtype == b.dtype == torch.float8_e4m3fn and a.shape == (32, 48) and b.shape == (48, 16)
    assert b.stride() == (1, 48)  # column-major, as _scaled_mm wants
    out = fn()
    want = a.to(torch.float64) @ b.to(torch.float64)
    assert out.dtype == torch.bfloat16 and torch.allclose(out.to(torch.float64), want, rtol=2e-2, atol=1e-1)


# ---------------------------------------------------------------- bandwidth, read-outs, timing


def test_bandwidth_result_reads_out_against_the_spec_sheet():
    r = measure.BandwidthResult("device copy", 1000, 2000, 1e-6, 2.0, 4.0, 0.5, "cuda:0", 10, 0.0)
    assert r.as_dict()["moved_bytes"] == 2000 and r.as_dict()["spec_fraction"] == 0.5
    rows = r.readout().as_dict()
    assert rows["spec sheet"] == "4.00 GB/s → 50.0 % of it"
    assert rows["buffer"] == "1.00 kB (2.00 kB moved per call)"
    assert str(r) == str(r.readout()) and str(r).startswith("device copy on cuda:0\n")
    p = _Printer()
    r._repr_pretty_(p, False)
    assert p.out == str(r)
    assert r._repr_html_().startswith("<div class='perflab-readout'><b>device copy on cuda:0</b>")
    assert not r.noisy
    assert measure.BandwidthResult("device copy", 1000, 1000, 1e-6, 1.0, None, None, "cpu", 10, 5e-7).noisy


def test_a_copy_that_does_not_copy_is_refused(monkeypatch):
    monkeypatch.setattr(torch, "equal", lambda a, b: False)
    with pytest.raises(AssertionError, match="^copy check failed: destination differs from source$"):
        measure.measure_copy_bandwidth(4096, "cpu", warmup_ms=0, rep_ms=1)


def test_copy_sweep_records_bandwidth_rows(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    res = measure.sweep_copy([4096], "cpu", name="copy-small", rep_ms=1, progress=False)
    (row,) = res.rows
    assert row["status"] == "ok" and row["params"] == {"nbytes": 4096}
    assert row["moved_bytes"] == 8192 and row["spec_gbps"] is None and row["gbps"] > 0
    assert res.path.is_relative_to(tmp_path)


def test_bench_result_spread_readout_and_long_times():
    r = timing.BenchResult([1.0, 2.0, 4.0], label="step")
    assert r.std_s == pytest.approx(statistics.stdev([1.0, 2.0, 4.0]))
    assert timing.BenchResult([0.5]).std_s == 0.0
    assert str(r).startswith("step: median 2.000 s (IQR 1.500 s, min 1.000 s, n=3) on cpu")
    rows = timing.BenchResult([1.0, 2.0, 4.0]).readout()
    assert rows.title == "kernel on cpu" and rows.as_dict()["median"] == "2.00 s" and rows.noisy


# ---------------------------------------------------------------- results and validation


def test_an_installed_copy_has_no_course_checkout(monkeypatch, tmp_path):
    monkeypatch.setattr(results, "__file__", str(tmp_path / "site-packages" / "perflab" / "core" / "results.py"))
    assert results.course_checkout() is None


def test_run_sweep_reports_each_new_row_to_on_point(tmp_path):
    seen = []
    res = results.run_sweep("cb", [{"n": 1}, {"n": 2}], lambda p: {"sq": p["n"] ** 2}, path=tmp_path / "cb.jsonl",
                            progress=False, on_point=seen.append)
    assert [(r["params"], r["sq"]) for r in seen] == [({"n": 1}, 1), ({"n": 2}, 4)]
    assert seen == res.rows
    seen.clear()
    results.run_sweep("cb", [{"n": 1}], lambda p: {"sq": 0}, path=tmp_path / "cb.jsonl", progress=False,
                      on_point=seen.append)
    assert seen == []  # a point already in the file is not measured, so not reported


def test_fits_in_memory_allows_anything_when_the_free_memory_is_unknown():
    assert validate.fits_in_memory("a huge matmul", 10**18, None) is None
    with pytest.raises(InputError, match="^a huge matmul needs"):
        validate.fits_in_memory("a huge matmul", 10**18, 2**30)


def test_the_waiting_readout_redraws_in_a_kernel_and_is_rate_limited_in_a_log(monkeypatch, capsys):
    """Whether two measurements ever wait on each other depends on the machine; the readout's two
    forms are checked here directly."""
    from perflab.core import lock

    monkeypatch.setattr(lock, "_in_kernel", lambda: True)
    say = lock._say_default()
    say("waiting for the cpu lock: 1 s", False)
    say("waiting for the cpu lock: 2 s", True)
    assert capsys.readouterr().out == "\rwaiting for the cpu lock: 1 s\rwaiting for the cpu lock: 2 s\n"
    monkeypatch.setattr(lock, "_in_kernel", lambda: False)
    say = lock._say_default()  # stderr, not a terminal here: a line at most every 10 s, and the last one
    say("waited 1 s", False)
    say("waited 2 s", False)
    say("got it after 3 s", True)
    assert capsys.readouterr().err == "waited 1 s\ngot it after 3 s\n"
