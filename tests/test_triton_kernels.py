"""The Triton matmul: right answers in the interpreter, compiled figures equal to cuobjdump's, occupancy
arithmetic equal to NVIDIA's worked example, and one-line refusals of what cannot run.

Compiles cost about a second each (more on a busy 2-core machine): the configs compiled here are few,
share one child process per target, and land in a cache kept for the module.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import perflab

from perflab.core.errors import InputError
from perflab.gemm import occupancy as occ
from perflab.gemm import triton_matmul as tm

needs_triton = pytest.mark.skipif(not tm.available(), reason=f"{tm.unavailable_reason()}")


# ---------------------------------------------------------------- occupancy (no Triton needed)

def cc70_limits() -> occ.SMLimits:
    """Compute capability 7.0 as the CUDA C++ Best Practices Guide states it in its example: 65,536
    registers and at most 2048 threads (64 warps) per SM; 32 blocks and 96 KB shared memory per SM
    from the Programming Guide's table, column 7.0 (shared memory plays no part in the example)."""
    h = occ.sm_limits("sm_90")
    return dataclasses.replace(h, name="compute capability 7.0", compute_capability="7.0", shared_bytes=96 * 1024,
                               max_shared_bytes_per_block=96 * 1024, reserved_shared_bytes_per_block=0)


def test_occupancy_equals_nvidias_worked_example():
    # CUDA C++ Best Practices Guide, "Calculating Occupancy"
    # (https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html#calculating-occupancy):
    # "on a device of compute capability 7.0, a kernel with 128-thread blocks using 37 registers per thread
    # results in an occupancy of 75% with 12 active 128-thread blocks per multi-processor, whereas a kernel
    # with 320-thread blocks using the same 37 registers per thread results in an occupancy of 63% because
    # only four 320-thread blocks can reside on a multiprocessor."
    a = occ.occupancy(37, 0, 4, cc70_limits())
    assert (a.blocks_per_sm, a.occupancy, a.limited_by) == (12, 0.75, "registers")
    b = occ.occupancy(37, 0, 10, cc70_limits())
    assert b.blocks_per_sm == 4 and b.occupancy == 40 / 64 and f"{b.occupancy:.0%}" == "62%"  # 62.5%, the guide rounds up to 63%
    assert b.limited_by == "registers"
    assert a.registers_per_warp == 1280  # 37 × 32 = 1184, rounded up to 256s


def test_shared_memory_binds_with_the_reserved_kilobyte():
    h100 = occ.sm_limits("h100-sxm")
    assert (h100.shared_bytes, h100.max_shared_bytes_per_block, h100.sm_count) == (228 * 1024, 227 * 1024, 132)
    # 113 KiB + 1 KiB reserved = 114 KiB per block: two fill 228 KiB exactly; 114 KiB alone would fit
    # twice too, but with the reserved kilobyte (115 KiB) only once
    assert occ.occupancy(32, 113 * 1024, 4, h100).blocks_by["shared memory"] == 2
    assert occ.occupancy(32, 114 * 1024, 4, h100).blocks_by["shared memory"] == 1
    a100 = occ.sm_limits("sm_80")
    assert a100.sm_count == 108 and a100.shared_bytes == 164 * 1024


def test_what_cannot_launch_is_refused_in_one_line():
    h100 = occ.sm_limits("sm_90")
    with pytest.raises(InputError, match=r"over .*227 KiB per block: lower num_stages or BLOCK_K"):
        occ.occupancy(64, 228 * 1024, 4, h100)
    with pytest.raises(InputError, match="256 registers per thread"):
        occ.occupancy(256, 0, 4, h100)
    with pytest.raises(InputError, match="at most 32 warps"):
        occ.occupancy(32, 0, 64, h100)
    with pytest.raises(InputError, match="no per-SM limits"):
        occ.sm_limits("l4")


def test_per_sm_limits_are_the_programming_guides():
    """CUDA C++ Programming Guide, Technical Specifications per Compute Capability, columns 8.0 and
    9.0: 64K registers per SM, 255 per thread, 64 warps and 32 blocks per SM, 164 KB / 228 KB shared
    memory per SM and 163 KB / 227 KB per block; SM counts from the A100 and H100 whitepapers."""
    for gpu, cc, sms, smem, block in (("a100-sxm-80gb", "8.0", 108, 164, 163), ("a100-pcie-40gb", "8.0", 108, 164, 163),
                                      ("h100-sxm", "9.0", 132, 228, 227)):
        lim = occ.sm_limits(gpu)
        assert (lim.compute_capability, lim.sm_count, lim.registers, lim.max_registers_per_thread) == (cc, sms, 65536, 255)
        assert (lim.max_warps, lim.max_blocks, lim.max_threads_per_block) == (64, 32, 1024)
        assert (lim.shared_bytes, lim.max_shared_bytes_per_block) == (smem * 1024, block * 1024)
        assert lim.shared_bytes - lim.max_shared_bytes_per_block == lim.reserved_shared_bytes_per_block == 1024
        assert "Technical Specifications per Compute Capability" in lim.source and "https://" in lim.source


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


# ---------------------------------------------------------------- the interpreter

@needs_triton
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_interpreter_matches_torch_on_odd_shapes(dtype):
    rng = random.Random(f"odd-{dtype}")
    m, n, k = (rng.randrange(17, 90) | 1 for _ in range(3))  # odd: no block divides them
    cfg = tm.TileConfig(32, 32, 16, group_m=rng.choice([1, 2, 3]))
    r = tm.check(m, n, k, dtype, cfg, seed=rng.randrange(1000))
    assert r["passed"], r
    assert r["interpreter"] == (r["device"] == "cpu")  # natively on a GPU, the interpreter on a CPU
    assert r["max_abs_err"] <= r["atol"] + r["rtol"] * 8 * k ** 0.5


def _fresh_if_native(test_name: str) -> bool:
    """On a CPU, run `test_name` again in a child Python when this process's Triton is native (a
    torch.compile test earlier in the same worker imported it so): True when the child ran it."""
    import torch

    if torch.cuda.is_available() or tm.import_triton(True):
        return False
    code = f"import sys; sys.path[:0] = ['tests', '.']; import test_triton_kernels as t; t.{test_name}()"
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(Path(tm.__file__).resolve().parents[2]),
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, TRITON_INTERPRET="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return True


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


# ---------------------------------------------------------------- compiled for sm_80 and sm_90

@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("PERFLAB_KERNEL_CACHE", str(tmp_path_factory.mktemp("kernels")))
    yield
    mp.undo()


def random_configs(seed: int, count: int) -> list[tm.TileConfig]:
    """Configs nobody here picked: drawn from the usual ranges with a fixed seed."""
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        c = tm.TileConfig(rng.choice([32, 64, 128]), rng.choice([32, 64, 128]), rng.choice([16, 32, 64]),
                          rng.choice([2, 4, 8]), rng.choice([2, 3, 4]), rng.choice([1, 4, 8]))
        if c not in out:
            out.append(c)
    return out


def cuobjdump_report(cubin) -> dict[str, int]:
    from perflab.gemm.compiled import cuobjdump_path

    text = subprocess.run([str(cuobjdump_path()), "--dump-resource-usage", str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    line = text.split("Function matmul_kernel:")[1].strip().splitlines()[0]
    return {k: int(v) for k, v in re.findall(r"([A-Z]+):(\d+)", line)}


@needs_triton
@pytest.mark.parametrize(("target", "seed", "kinds"), [("sm_90", 90, ("wgmma", "mma")), ("sm_80", 80, ("mma",))])
def test_compiled_figures_equal_cuobjdumps(kernel_cache, target, seed, kinds):
    from perflab.gemm import compiled

    dtype = {"sm_90": "fp16", "sm_80": "bf16"}[target]
    configs = random_configs(seed, 2)
    results = compiled.compile_many(configs, dtype, target)
    for cfg, r in zip(configs, results, strict=True):
        rep = cuobjdump_report(r.cubin_path)
        assert r.registers == rep["REG"] and r.spill_bytes == rep["STACK"], (cfg, rep)
        assert r.shared_bytes == r.metadata["shared"] + rep["SHARED"]
        assert r.metadata["shared"] >= (cfg.block_m + cfg.block_n) * cfg.block_k * 2  # at least one stage of A and B
        # sm_90 has both: Triton emits wgmma (a warp group of 4 warps on a 64-row slice) when the
        # tile allows it and Ampere's mma.sync otherwise (e.g. BLOCK_M = 32); sm_80 has only mma
        assert r.num_warps == cfg.num_warps and r.tensor_core_instructions > 0
        assert r.tensor_core_kind in kinds and str(r.tensor_core_kind) in r.ptx_excerpt
        lim = occ.sm_limits(target)
        want = occ.occupancy(rep["REG"], r.shared_bytes, cfg.num_warps, lim)
        assert r.occ == want
        rpt = compiled.report(r, (3000, 5000, 1024))
        assert rpt["tiles"] == -(-3000 // cfg.block_m) * -(-5000 // cfg.block_n)
        assert rpt["waves"] == -(-rpt["tiles"] // (lim.sm_count * want.blocks_per_sm))
        assert rpt["wave_efficiency"] == pytest.approx(rpt["tiles"] / (rpt["waves"] * lim.sm_count * want.blocks_per_sm))


@needs_triton
def test_a_cached_config_answers_fast(kernel_cache):
    import time

    from perflab.gemm import compiled

    cfg = random_configs(90, 1)[0]
    first = compiled.compile_tile(cfg, "fp16", "sm_90")
    t = time.perf_counter()
    again = compiled.compile_tile(cfg, "fp16", "sm_90")
    assert again.cached and time.perf_counter() - t < 1.0
    assert (again.registers, again.shared_bytes, again.spill_bytes) == (first.registers, first.shared_bytes, first.spill_bytes)


@needs_triton
def test_cli_reports_the_figures_and_refuses_bad_input(kernel_cache):
    import json

    cfg = random_configs(90, 1)[0]
    args = ("kernel", "--tile", f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k}", "--warps", str(cfg.num_warps),
            "--stages", str(cfg.num_stages), "--group-m", str(cfg.group_m), "--dtype", "fp16", "--target", "sm_90")
    first = perflab(*args, "--m", "1040", "--n", "3040", "--k", "496", "--json")
    assert first.returncode == 0, first.stderr
    r = perflab(*args, "--m", "1024", "--n", "3072", "--k", "512", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for key in ("registers", "spill_bytes", "shared_bytes", "blocks_per_sm", "occupancy", "limited_by",
                "tensor_core_instructions", "tiles", "waves", "wave_efficiency"):
        assert d[key] is not None, key
    # the same kernel as the first call (sizes divisible by 16 give the same compiled signature): cached
    assert d["cached"] is True and json.loads(first.stdout)["registers"] == d["registers"]
    r = perflab("kernel", "--tile", "32x32x16", "--warps", "2", "--target", "sm_80", "--dtype", "bf16",
                "--m", "37", "--n", "45", "--k", "53", "--run", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["run_passed"] and d["max_abs_err"] <= d["run_atol"] + d["run_rtol"] * 4 * 53 ** 0.5
    assert d["tiles"] == 2 * 2 and d["waves"] == 1 and d["tensor_core_kind"] == "mma"
    for bad, said in ((["--tile", "100x128x64"], "power of two"), (["--target", "sm_70"], "sm_75"),
                      (["--m", "64"], "all three"), (["--dtype", "fp8"], "fp32, fp16, bf16"),
                      (["--tile", "256x256x128", "--stages", "4"], "shared memory")):
        r = perflab("kernel", *bad)
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, (bad, r.stderr)


# ---------------------------------------------------------------- the fused bias + GeLU (lesson 10)

@needs_triton
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_fused_bias_gelu_matches_eager_within_the_dtype(dtype):
    from perflab.gemm import triton_fused

    rng = random.Random(f"gelu-{dtype}")
    r = triton_fused.check(rng.randrange(3, 40), rng.randrange(1025, 3000), dtype, seed=rng.randrange(1000))
    assert r["passed"], r  # cols > BLOCK: two column blocks, the second ragged


@needs_triton
def test_fused_check_can_fail():
    """Against GeLU's erf form (not the tanh form the kernel computes) fp32 is out of tolerance."""
    import torch

    if _fresh_if_native("test_fused_check_can_fail"):
        return
    import torch.nn.functional as F

    from perflab.gemm import triton_fused

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    x, b = 2 * torch.randn(8, 300, device=dev), torch.randn(300, device=dev)
    y = triton_fused.bias_gelu(x, b)
    rtol, atol = triton_fused.tolerance("fp32")
    assert torch.allclose(y, triton_fused.eager(x, b), rtol=rtol, atol=atol)
    assert not torch.allclose(y, F.gelu(x + b), rtol=rtol, atol=atol)


@needs_triton
def test_fused_kernel_compiles_for_sm_90(kernel_cache):
    from perflab.gemm import triton_fused

    r = triton_fused.compile_for("sm_90", "bf16")
    rep = subprocess.run([str(__import__("perflab.gemm.compiled", fromlist=["x"]).cuobjdump_path()),
                          "--dump-resource-usage", r["cubin"]], capture_output=True, text=True, check=True).stdout
    line = rep.split("Function bias_gelu_kernel:")[1].strip().splitlines()[0]
    figs = {k: int(v) for k, v in re.findall(r"([A-Z]+):(\d+)", line)}
    assert r["registers"] == figs["REG"] and r["spill_bytes"] == figs["STACK"] == 0
    assert r["blocks_per_sm"] >= 1 and 0 < r["occupancy"] <= 1
