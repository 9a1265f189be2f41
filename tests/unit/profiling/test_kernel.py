"""Tests of `perflab.profiling.kernel`."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from perflab.profiling import kernel


def test_compare_times_the_fused_op_and_finds_it_in_the_trace():
    # a stand-in for the compiled extension: the exact (erf) GELU, a hair from the tanh form eager runs
    k = kernel.Kernel(SimpleNamespace(fused_gelu_bias=lambda x, b: torch.nn.functional.gelu(x + b)), None)
    out = kernel.compare(k, rows=8, cols=4, rep_ms=1)
    assert out.in_trace is True and 0 < out.max_abs_diff < 1e-3
    assert out.speedup == out.eager_s / out.fused_s
    y = kernel.eager_gelu_bias(torch.zeros(2), torch.tensor([1.0, -1.0]))
    assert torch.allclose(y, torch.tensor([0.841192, -0.158808]), atol=1e-6)


def test_is_built_looks_in_the_extension_folder_and_survives_one_it_cannot_make(monkeypatch, tmp_path):
    # the folder is given here rather than made by torch's cpp_extension, whose import in a long-lived
    # test process depends on what imported distutils before it
    d = tmp_path / "ext" / kernel.NAME
    d.mkdir(parents=True)
    monkeypatch.setattr(kernel, "build_dir", lambda: d)
    assert not kernel.is_built()
    (d / f"{kernel.NAME}.so").write_bytes(b"")
    assert kernel.is_built()

    def cannot_make():
        raise FileExistsError(17, "File exists", str(tmp_path / "a_file"))  # a folder under a file

    monkeypatch.setattr(kernel, "build_dir", cannot_make)
    assert not kernel.is_built()


def test_missing_build_tools_are_said(monkeypatch):
    from perflab.profiling import kernel

    monkeypatch.setattr(kernel.shutil, "which", lambda name: None)
    assert kernel.compiler_missing() == "no C++ compiler on PATH (install g++ or clang)"
    assert kernel.build().skip == "no C++ compiler on PATH (install g++ or clang)"
    monkeypatch.setattr(kernel.shutil, "which", lambda name: None if name == "ninja" else f"/usr/bin/{name}")
    monkeypatch.setattr(kernel.importlib.util, "find_spec", lambda name: None)
    assert kernel.compiler_missing() == "ninja is not installed (torch.utils.cpp_extension needs it)"


def test_custom_kernel_skips_cleanly_or_matches_eager(monkeypatch):
    from perflab.profiling import kernel

    monkeypatch.setattr(kernel, "is_built", lambda: False)
    k = kernel.build(allow_compile=False)
    assert k.module is None and k.skip  # never compiles when told not to
    monkeypatch.undo()
    if kernel.compiler_missing() or not kernel.is_built():
        pytest.skip("the fused kernel is not in torch's extension cache; building it takes tens of seconds "
                    "on a small CPU (lesson 09 with smoke=False builds it once)")
    k = kernel.build(allow_compile=False)
    assert k.skip is None
    r = kernel.compare(k, rows=256, cols=128)
    assert r.max_abs_diff < 1e-5 and r.in_trace


def test_a_comparison_reads_as_a_line_and_says_why_fused_can_lose():
    from perflab.profiling.kernel import Comparison

    fast = Comparison(2e-3, 1e-3, 2.0, 1e-6, True).text()
    assert fast.startswith("eager 2.00 ms, fused 1.00 ms (2.00×)") and "Slower here" not in fast
    assert "Slower here" in Comparison(1e-3, 2e-3, 0.5, 1e-6, True).text()
