"""Tests of `perflab.compiler.fused`: the fused bias + GeLU checked in the interpreter, compiled for
sm_80 and sm_90, and the limits that keep its next block off an SM named as the compiler reports them."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from perflab.compiler import fused
from perflab.core.errors import InputError
from perflab.gemm import triton_matmul as tm
from tests.unit.gemm.helpers import needs_triton


def _fresh_if_native(test_name: str) -> bool:
    """On a CPU, run `test_name` again in a child Python when this process's Triton is native (a
    torch.compile test earlier in the same worker imported it so): True when the child ran it."""
    import torch

    if torch.cuda.is_available() or tm.import_triton(True):
        return False
    code = f"import sys; sys.path[:0] = ['tests', '.']; import tests.unit.compiler.test_fused as t; t.{test_name}()"
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(Path(tm.__file__).resolve().parents[2]),
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, TRITON_INTERPRET="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return True


def test_fused_kernel_refuses_mismatched_operands():
    with pytest.raises(InputError, match=r"^x must be \[rows, cols\] and bias \[cols\] \(got \(2, 3\) and \(4,\)\)$"):
        fused.bias_gelu(torch.ones(2, 3), torch.ones(4))


@needs_triton
def test_fused_check_refuses_sizes_the_interpreter_cannot_run():
    with pytest.raises(InputError, match=r"^4000×1001 is too large to check in the interpreter: keep rows·cols ≤ 4 M$"):
        fused.check(4000, 1001)


@needs_triton
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_fused_bias_gelu_matches_eager_within_the_dtype(dtype):
    from perflab.compiler import fused

    rng = random.Random(f"gelu-{dtype}")
    r = fused.check(rng.randrange(3, 40), rng.randrange(1025, 3000), dtype, seed=rng.randrange(1000))
    assert r["passed"], r  # cols > BLOCK: two column blocks, the second ragged


@needs_triton
def test_fused_check_can_fail():
    """Against GeLU's erf form (not the tanh form the kernel computes) fp32 is out of tolerance."""
    import torch

    if _fresh_if_native("test_fused_check_can_fail"):
        return
    import torch.nn.functional as F

    from perflab.compiler import fused

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    x, b = 2 * torch.randn(8, 300, device=dev), torch.randn(300, device=dev)
    y = fused.bias_gelu(x, b)
    rtol, atol = fused.tolerance("fp32")
    assert torch.allclose(y, fused.eager(x, b), rtol=rtol, atol=atol)
    assert not torch.allclose(y, F.gelu(x + b), rtol=rtol, atol=atol)


@needs_triton
@pytest.mark.parametrize("target", ["sm_90", "sm_80"])
def test_fused_kernel_names_every_binding_limit(target, tmp_path, monkeypatch):
    from perflab.compiler import fused
    from perflab.gemm.occupancy import occupancy, sm_limits

    monkeypatch.setenv("PERFLAB_KERNEL_CACHE", str(tmp_path))
    r = fused.compile_for(target, "bf16")
    o = occupancy(r["registers"], r["shared_bytes"], r["num_warps"], sm_limits(target))
    binding = {k for k, v in o.blocks_by.items() if v == o.blocks_per_sm}
    assert set(r["limited_by"].split(" and ")) == binding
    assert r["blocks_per_sm"] == o.blocks_per_sm
    assert "warps" in binding  # 4 warps per block: the warps limit always binds at full occupancy


def test_the_checks_table_and_the_compiled_line_read_as_the_lesson_shows_them():
    rows = [{"rows": 8, "cols": 1500, "dtype": "bf16", "device": "cpu", "interpreter": True, "max_abs_err": 0.0078125,
             "rtol": 0.015625, "atol": 0.015625, "passed": True}]
    table = fused.FusedChecks(rows).table()
    assert table.iloc[0].to_dict() == {"dtype": "bf16", "shape": "8×1500", "ran on": "interpreter (CPU)",
                                       "max |error| vs eager": "0.00781", "allowed": "0.0156 + 0.0156·|y|",
                                       "within": "✓"}
    fc = {"target": "sm_90", "dtype": "bf16", "gpu": "H100 SXM", "registers": 20, "spill_bytes": 0, "shared_bytes": 0,
          "num_warps": 4, "blocks_per_sm": 16, "occupancy": 1.0, "limited_by": "warps"}
    assert fused.compiled_text(fc) == ("bias+GeLU bf16 for sm_90 (H100 SXM): 20 registers/thread, 0 B spilled, 0 B shared "
                                       "memory per block, 4 warps; 16 blocks/SM, occupancy 100 % (limited by warps)")


def test_without_a_gpu_the_timing_says_why():
    if torch.cuda.is_available():
        pytest.skip("a GPU times the kernel")
    t = fused.timing()
    assert not t.paths and t.text().startswith("No GPU here")
    got = fused.FusedTiming({"eager": {"ms": 1.234, "GB/s (x read + y written)": 200.0}}).table()
    assert got.loc["eager"].to_dict() == {"time (ms)": "1.23", "GB/s (x read + y written)": "200"}
