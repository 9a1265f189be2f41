"""Tests of `perflab.gemm.triton_matmul`."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import random
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from clirun import perflab

from perflab.core.errors import InputError, UnsupportedError
from perflab.gemm import (
    compiled,
)
from perflab.gemm import triton_matmul as tm

from .helpers import KERNEL, _needs_triton, failed_process, needs_triton


def _one_line_error(r, needle: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr, r.stderr


def _fresh_if_native(test_name: str) -> bool:
    """On a CPU, run `test_name` again in a child Python when this process's Triton is native (a
    torch.compile test earlier in the same worker imported it so): True when the child ran it."""
    import torch

    if torch.cuda.is_available() or tm.import_triton(True):
        return False
    code = f"import sys; sys.path[:0] = ['tests', '.']; import tests.unit.gemm.test_triton_matmul as t; t.{test_name}()"
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(Path(tm.__file__).resolve().parents[2]),
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, TRITON_INTERPRET="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return True


def test_tile_config_tile_and_parse_tile3_refusal():
    assert tm.TileConfig(64, 128, 32).tile == (64, 128)
    with pytest.raises(InputError, match=r"^tile 'axbxc' should be three whole numbers, e\.g\. 128x128x64$"):
        tm.parse_tile3("axbxc")


def test_triton_found_without_a_spec_counts_as_missing(monkeypatch):
    """A `triton` in sys.modules without a spec (find_spec raises ValueError) is no Triton to use."""
    fake = types.ModuleType("triton")  # its __spec__ is None
    monkeypatch.setitem(sys.modules, "triton", fake)
    tm.unavailable_reason.cache_clear()
    try:
        reason = tm.unavailable_reason()
        assert reason == (f"Triton is not installed here ({platform.system()} {platform.machine()}); its wheels exist "
                          "for Linux x86_64 and aarch64: `pip install 'perflab[kernels]'` there")
        assert not tm.available()
        with pytest.raises(UnsupportedError, match=r"^Triton is not installed here"):
            tm.require()
    finally:
        tm.unavailable_reason.cache_clear()


def test_interpreter_process_that_fails_says_its_last_line(monkeypatch):
    monkeypatch.setattr(subprocess, "run", failed_process("Traceback (most recent call last):\nValueError: boom\n"))
    with pytest.raises(UnsupportedError, match="^the interpreter process failed: ValueError: boom$"):
        tm.run_in_interpreter_process("perflab.gemm.triton_matmul", "check", {"m": 8, "n": 8, "k": 8})
    monkeypatch.setattr(subprocess, "run", failed_process(""))
    with pytest.raises(UnsupportedError, match="^the interpreter process failed: no message$"):
        tm.run_in_interpreter_process("perflab.gemm.triton_matmul", "check", {})


def test_interpreting_after_a_native_import_is_refused(monkeypatch):
    monkeypatch.setattr(tm, "import_triton", lambda interpret: False)
    with pytest.raises(UnsupportedError, match=r"^Triton was imported natively in this process \(torch.compile does that\)"):
        tm.jitted(lambda: None, True)


@needs_triton
@pytest.mark.skipif(torch.cuda.is_available(), reason="the size limit is the interpreter's (CPU only)")
def test_triton_matmul_check_refuses_sizes_the_interpreter_cannot_run():
    with pytest.raises(InputError, match=r"^4096×4096×4096 is too large to check here \(the interpreter runs every"):
        tm.check(4096, 4096, 4096)


@needs_triton
def test_triton_version_and_a_native_jit_function():
    tm.import_triton(True)  # the mode CPU tests use; Triton's own imports below leave it as it is
    from triton.runtime.jit import JITFunction

    from perflab.gemm.triton_kernels import bias_gelu_kernel

    assert tm.triton_version() == importlib.metadata.version("triton")
    jf = tm.jitted(bias_gelu_kernel, False)
    assert isinstance(jf, JITFunction) and jf.fn is bias_gelu_kernel


@needs_triton
def test_a_config_the_compiler_refuses_is_reported_and_the_batch_goes_on(tmp_path):
    tm.import_triton(True)
    job = compiled.matmul_job(tm.TileConfig(), "fp16", 90, (4096, 4096, 4096))
    three_warps = {**job, "num_warps": 3}
    # refused before Triton's frontend runs: a process whose Triton also interprets kernels compiles
    # nothing reliably (hence the child process), but these refusals come from the options and the lookup
    no_kernel = {**job, "kernel": "no_such_kernel"}
    res = compiled.compile_in_this_process([three_warps, no_kernel], [str(tmp_path / "a"), str(tmp_path / "b")])
    assert res == [{"error": "AssertionError: num_warps must be a power of 2"},
                   {"error": "AttributeError: module 'perflab.gemm.triton_kernels' has no attribute 'no_such_kernel'"}]
    assert not (tmp_path / "a").exists()


def test_kernel_text_report_with_waves_and_a_run():
    _needs_triton()
    r = perflab(*KERNEL, "--target", "sm_80", "--m", "37", "--n", "45", "--k", "53", "--run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("32x32x16 w2 s3 bf16 compiled for sm_80")
    assert lines[1].startswith("registers: ") and "per block" in lines[1]
    assert lines[2].startswith("tensor_core_instructions: ") and "(mma in the PTX)" in lines[2]
    assert lines[4].startswith("on NVIDIA A100") and "occupancy: " in lines[4]
    assert lines[5].startswith("37×45×53: tiles: 4    waves: 1 of ")
    assert lines[6].startswith("ran 37×45×53 on ") and lines[6].endswith(" ok")


def test_kernel_text_report_for_a_target_without_limits():
    _needs_triton()
    r = perflab(*KERNEL, "--target", "sm_86")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == ("no per-SM limits for sm_86 in perflab's table (it has them for sm_80, "
                                                 "A100, and sm_90, H100): occupancy and waves not computed")


def test_kernel_without_triton_is_one_line(monkeypatch):
    import sys

    from perflab.gemm import triton_matmul as tm

    monkeypatch.setitem(sys.modules, "triton", None)  # importlib finds no Triton
    tm.unavailable_reason.cache_clear()  # the answer is kept per process
    try:
        _one_line_error(perflab(*KERNEL), "Triton is not installed here")
    finally:
        tm.unavailable_reason.cache_clear()


@pytest.mark.parametrize("kw, words", [
    (dict(block_m=0), "block_m=0: a block size is a whole number ≥ 1"),
    (dict(block_n=8), "block_n=8: tl.dot needs tiles of at least 16 rows and columns"),
    (dict(block_m=1024), "block_m=1024: above 512 no tile of this kernel fits"),
    (dict(num_stages=9), "num_stages=9: use 1 to 8"),
    (dict(group_m=0), "group_m=0: use a whole number ≥ 1"),
])
def test_tile_config_refusals_say_what_to_use(kw, words):
    with pytest.raises(InputError) as e:
        tm.TileConfig(**kw)
    assert words in str(e.value)


@pytest.mark.skipif(not tm.available(), reason="Triton is not installed")
@pytest.mark.parametrize("a, b, words", [
    (torch.ones(2, 3, 4), torch.ones(4, 2), "matmul takes 2-D matrices (got 3-D and 2-D)"),
    (torch.ones(2, 3), torch.ones(4, 2), "inner sizes differ: A is (2, 3), B is (4, 2)"),
    (torch.ones(2, 3), torch.ones(3, 2, dtype=torch.float16), "A is torch.float32 and B is torch.float16"),
    (torch.ones(2, 3), torch.ones(3, 2, device="meta"), "A is on cpu and B on meta"),
])
def test_triton_matmul_refuses_operands_it_cannot_multiply(a, b, words):
    with pytest.raises(InputError) as e:
        tm.matmul(a, b)
    assert words in str(e.value)


def test_tile_configs_are_checked_before_compiling():
    with pytest.raises(InputError, match="not a power of two.*use 64 or 128"):
        tm.TileConfig(96, 128, 64)
    with pytest.raises(InputError, match="num_warps=3"):
        tm.TileConfig(num_warps=3)
    with pytest.raises(InputError, match="at least 16"):
        tm.TileConfig(128, 128, 8)
    with pytest.raises(InputError, match="128x128x64"):
        tm.parse_tile3("128x128")


@needs_triton
def test_shared_memory_over_the_limit_names_it_and_the_fix():
    from perflab.gemm import compiled

    # 256×256×128 fp16: one stage of A and B is 128 KiB; sm_90 keeps all 3 = 384 KiB
    with pytest.raises(InputError, match=r"needs at least 384 KiB.*over NVIDIA H100.*227 KiB: use num_stages ≤ 1"):
        compiled.check_config(tm.TileConfig(256, 256, 128, 8, 3), "fp16", "sm_90")
    # 128×256×64 bf16: 48 KiB a stage; on sm_80 5 stages keep 4 = 192 KiB, over an A100's 163 KiB
    with pytest.raises(InputError, match=r"A100.*163 KiB: use num_stages ≤ 4"):
        compiled.check_config(tm.TileConfig(128, 256, 64, 8, 5), "bf16", "sm_80")
    compiled.check_config(tm.TileConfig(128, 256, 64, 8, 4), "bf16", "sm_90")  # 4 × 48 = 192 KiB fits an H100's 227
    with pytest.raises(InputError, match="one stage alone does not fit"):
        compiled.check_config(tm.TileConfig(512, 512, 128, 8, 1), "fp32", "sm_90")


@needs_triton
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_interpreter_matches_torch_on_odd_shapes(dtype):
    rng = random.Random(f"odd-{dtype}")
    m, n, k = (rng.randrange(17, 90) | 1 for _ in range(3))  # odd: no block divides them
    cfg = tm.TileConfig(32, 32, 16, group_m=rng.choice([1, 2, 3]))
    r = tm.check(m, n, k, dtype, cfg, seed=rng.randrange(1000))
    assert r.passed, r
    assert r.interpreter == (r.device == "cpu")  # natively on a GPU, the interpreter on a CPU
    assert r.max_abs_err <= r.atol + r.rtol * 8 * k ** 0.5 and r.config == cfg


@needs_triton
def test_a_wrong_kernel_would_be_caught():
    """The check can fail: torch's answer for another seed differs from this kernel's far beyond tolerance."""
    import torch

    if _fresh_if_native("test_a_wrong_kernel_would_be_caught"):
        return

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(40, 24, device=dev)
    b = torch.randn(24, 33, device=dev)
    c = tm.matmul(a, b, tm.TileConfig(16, 16, 16))
    rtol, atol = tm.tolerance("fp32", 24, dev)
    assert torch.allclose(c, a @ b, rtol=rtol, atol=atol)
    assert not torch.allclose(c, a @ torch.randn(24, 33, device=dev), rtol=rtol, atol=atol)


def test_a_check_in_one_line():
    ok = tm.KernelCheck(200, 130, 96, "fp32", "cpu", True, 9.54e-06, 2.38e-07, 0.000206, True, tm.TileConfig(64, 64, 32))
    assert ok.line() == ("200×130×96 fp32 on cpu (interpreter): max |error| vs torch 9.54e-06 "
                         "(tolerance 0.000206 + 2.38e-07·|C|) ✓")
    bad = tm.KernelCheck(1000, 1000, 1000, "bf16", "cuda", False, 2.0, 0.0156, 0.228, False, tm.TileConfig())
    assert bad.line().startswith("1000×1000×1000 bf16 on cuda: max |error| vs torch 2.00 ") and bad.line().endswith("✗")
