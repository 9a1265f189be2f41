"""Tests of `perflab.core.measure`."""

from __future__ import annotations

import pytest
import torch

from perflab.core import measure
from perflab.core.device import describe
from perflab.core.dtypes import parse_dtype
from perflab.core.errors import InputError, UnsupportedError
from perflab.core.measure import (
    make_matmul,
    measure_copy_bandwidth,
    measure_host_to_device,
    measure_matmul,
    tf32_mode,
)
from perflab.core.readout import NOISY_SPREAD
from perflab.course import report as R

from .helpers import _ctx, _Printer


def _accept_fp8(monkeypatch):
    monkeypatch.setattr(measure, "check_supported", lambda dtype, dev: parse_dtype("fp8"))


def _ctx_report(quick):
    import torch


    return R.Ctx(torch.device("cpu"), describe("cpu"), quick)


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


# ----------------------------------------------------------------------------- report: memory
def test_a_copy_whose_spread_passes_the_noise_threshold_gets_a_noisy_note(monkeypatch):
    from perflab.core import measure as M

    sizes = []

    def copy(nbytes, device, *, rep_ms, warmup_ms):
        sizes.append(nbytes // 2**20)
        median = 1e-3 * nbytes / 2**20
        spread = 0.5 if nbytes == 8 * 2**20 else NOISY_SPREAD / 2  # only the 8 MiB copy is noisy
        return M.BandwidthResult("device copy", nbytes, 2 * nbytes, median, 2 * nbytes / median / 1e9, None, None,
                                 "cpu", 10, iqr_s=spread * median)

    monkeypatch.setattr(M, "measure_copy_bandwidth", copy)
    out = R.part_memory(_ctx(quick=True))
    assert sizes == [1, 8, 64]
    noisy, h2d = out.notes
    assert noisy.startswith("8 MiB copy: noisy: the middle half of the timing samples spans 50")
    assert noisy.endswith("measure again before trusting it")
    assert h2d.startswith("host→device: not measured (no CUDA GPU")
    assert [r["spread"] for r in out.data["copy"]] == pytest.approx([0.05, 0.5, 0.05])
    assert out.figures[0].label == "device copy GB/s (64 MiB)"


def test_tf32_mode_sets_and_restores_the_switch():
    before = torch.backends.cuda.matmul.allow_tf32
    with tf32_mode(not before):
        assert torch.backends.cuda.matmul.allow_tf32 is (not before)
    assert torch.backends.cuda.matmul.allow_tf32 is before


def test_fp8_is_refused_on_a_cpu_before_any_operand_is_built():
    from perflab.core.measure import make_matmul

    with pytest.raises(Exception, match="fp8 matmuls need an NVIDIA GPU"):
        make_matmul(64, 64, 64, "fp8", device="cpu")


def test_one_dtype_failing_does_not_lose_the_others(monkeypatch):
    import perflab.core.measure as M

    real = M.measure_matmul

    def flaky(m, n, k, dtype, *a, **kw):
        if dtype != "fp32":
            raise RuntimeError(f"{dtype} kernel missing\nsecond line of a traceback")
        return real(m, n, k, dtype, *a, **kw)

    monkeypatch.setattr(M, "measure_matmul", flaky)
    out = R.part_matmul(_ctx_report(quick=True))
    assert [r["dtype"] for r in out.data["rows"]] == ["fp32"]
    assert "bf16: RuntimeError: bf16 kernel missing" in out.notes  # one line each, the traceback's tail dropped
    monkeypatch.setattr(M, "measure_matmul", lambda *a, **kw: (_ for _ in ()).throw(RuntimeError("no BLAS")))
    with pytest.raises(RuntimeError, match="no dtype could be measured: fp32: RuntimeError: no BLAS; bf16: "):
        R.part_matmul(_ctx_report(quick=True))


def test_measure_matmul_cpu():
    r = measure_matmul(256, 128, 64, "fp32", "cpu", rep_ms=10)
    assert r.tflops == pytest.approx(2 * 256 * 128 * 64 / r.median_s / 1e12)
    assert r.rel_error < 1e-5 and r.n_reps >= 5
    assert r.device == "cpu" and r.peak_source in {"estimate", "unknown"}


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_half_precision_on_cpu(dtype):
    r = measure_matmul(64, 64, 64, dtype, "cpu", rep_ms=5)
    assert r.rel_error < 2e-2


def test_operands_are_random_not_zero():
    fn, a, b = make_matmul(16, 16, 16, "fp32", "cpu")
    assert a.abs().sum() > 0 and b.abs().sum() > 0 and not torch.equal(a, b)


def test_bad_inputs():
    with pytest.raises(InputError):
        measure_matmul(0, 8, 8)
    with pytest.raises(InputError, match="GiB"):
        measure_matmul(10**6, 10**6, 10**6, "fp32", "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(UnsupportedError):
            measure_matmul(8, 8, 8, "tf32", "cpu")


def test_copy_bandwidth_cpu():
    r = measure_copy_bandwidth(8 * 2**20, "cpu", rep_ms=20)
    assert r.moved_bytes == 2 * r.nbytes and r.gbps == pytest.approx(r.moved_bytes / r.median_s / 1e9)
    assert r.spec_gbps is None  # no spec for a CPU's memory system


def test_host_to_device_needs_gpu():
    with pytest.raises(UnsupportedError, match="GPU"):
        measure_host_to_device(1024, device="cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "tf32", "bf16", "fp16"])
def test_matmul_gpu_dtypes(dtype):
    r = measure_matmul(2048, 2048, 2048, dtype, "cuda")
    assert r.tflops > 0 and (r.peak_fraction is None or r.peak_fraction < 1.2)


@pytest.mark.gpu
def test_tf32_runs_on_ampere_plus_and_restores_the_flag():
    """How much faster TF32 runs than fp32 depends on who else uses the GPU: `make bench-trust` reports
    it. Here only what load cannot change: both run, neither above its datasheet peak, the flag restored."""
    if torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("needs compute capability 8.0+")
    for dtype in ("fp32", "tf32"):
        r = measure_matmul(4096, 4096, 4096, dtype, "cuda")
        assert r.tflops > 0 and (r.peak_fraction is None or r.peak_fraction < 1.2)
    assert not torch.backends.cuda.matmul.allow_tf32  # restored


@pytest.mark.gpu
def test_pinned_and_pageable_copies_are_both_measured():
    """Which copy is faster on a shared GPU box is reported by `make bench-trust`, not asserted."""
    pinned = measure_host_to_device(256 * 2**20, pinned=True)
    pageable = measure_host_to_device(256 * 2**20, pinned=False)
    assert "pinned" in pinned.what and "pageable" in pageable.what
    assert pinned.gbps > 0 and pageable.gbps > 0


@pytest.mark.gpu
def test_device_copy_against_spec():
    r = measure_copy_bandwidth(2 * 2**30, "cuda")
    if r.spec_gbps:
        assert r.spec_fraction is not None and 0 < r.spec_fraction < 1.05  # never above the datasheet; how far below depends on the load


def test_a_matmul_timed_on_a_busy_machine_says_so_in_its_readout():
    from dataclasses import replace
    from types import SimpleNamespace

    from perflab.core.quietness import Quietness

    r = measure.measure_matmul(32, 32, 32, "fp32", "cpu", rep_ms=2, warmup_ms=1, min_reps=3)
    busy = Quietness("disturbed", 0.6, 0.2, 2, 0.24, 1, "other programs used 60 % of 2 cores")
    shown = str(replace(r, bench=SimpleNamespace(quietness=busy)).readout())
    assert "disturbed: other programs used 60 % of 2 cores: this rate may be the neighbours'" in shown
    quiet = Quietness("quiet", 0.0, 0.2, 2, 0.0, 1, "")
    assert "disturbed" not in str(replace(r, bench=SimpleNamespace(quietness=quiet)).readout())



def test_a_count_becomes_a_rate_in_one_line_that_says_when_the_machine_was_busy():
    from dataclasses import replace
    from types import SimpleNamespace

    from perflab.core.quietness import Quietness

    r = measure.measure_matmul(32, 32, 32, "fp32", "cpu", rep_ms=2, warmup_ms=1, min_reps=3)
    r = replace(r, median_s=8.47e-3, tflops=2 * 32**3 / 8.47e-3 / 1e12)
    quiet = replace(r, bench=SimpleNamespace(quietness=Quietness("quiet", 0.0, 0.2, 2, 0.0, 1, "")))
    assert quiet.rate_sentence() == "32³ matmul: 6.55e-05 GFLOPs (a count) in 8.47 ms → 7.74e-06 TFLOP/s (a rate)"
    busy = replace(r, bench=SimpleNamespace(quietness=Quietness("disturbed", 0.6, 0.2, 2, 0.24, 1,
                                                                "other programs used 60 % of 2 cores")))
    assert busy.rate_sentence().endswith("(a rate); disturbed: other programs used 60 % of 2 cores: this rate may be "
                                         "the neighbours', not the device's")


def test_an_elementwise_add_and_a_copy_carry_the_machines_quietness():
    from perflab.core.quietness import MadeUpLoad, injected

    with injected(MadeUpLoad(0.9)):
        add = measure.measure_elementwise(2**16, "fp32", "cpu", rep_ms=200)
        copy = measure_copy_bandwidth(2**20, "cpu", rep_ms=200)  # long enough to judge: over 5 clock ticks
    assert add.intensity == pytest.approx(1 / 12) and add.gbps > 0 and add.quietness.verdict != "quiet"
    assert copy.quietness.disturbed and "this bandwidth may be the neighbours'" in str(copy.readout())
    assert copy.as_dict()["quietness"]["verdict"] == "disturbed"
