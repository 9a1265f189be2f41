"""Helpers the tests of this folder share."""

import subprocess
from pathlib import Path

import pytest

from perflab.gemm import (
    compiled,
)
from perflab.gemm import occupancy as occ
from perflab.gemm import triton_matmul as tm

needs_triton = pytest.mark.skipif(not tm.available(), reason=f"{tm.unavailable_reason()}")


def failed_process(stderr: str):
    """A subprocess.run stand-in for a child that exits 1 with `stderr`."""
    def run(args, **kw):
        return subprocess.CompletedProcess(args, 1, "", stderr)
    return run


def tile(tmp_path: Path, target: str = "sm_90", with_limits: bool = True, cannot_run: str | None = None):
    """A compiled result as compile_many builds it, with figures of a real 128×128×64 fp16 sm_90 kernel."""
    cfg = tm.TileConfig(128, 128, 64, num_warps=4, num_stages=3)
    lim = occ.sm_limits(target) if with_limits else None
    r = compiled.CompiledTile(config=cfg, dtype="fp16", target=target, shape=(4096, 4096, 4096), registers=168,
                              spill_bytes=0, shared_bytes=98304, num_warps=4, num_stages=3, tensor_core_kind="wgmma",
                              tensor_core_instructions=32, ptx_excerpt="wgmma.mma_async.sync.aligned.m64n128k16",
                              cuobjdump={"REG": 168, "STACK": 0, "SHARED": 0}, metadata={"shared": 98304},
                              cache_dir=str(tmp_path), cached=True, seconds=0.0, limits=lim, cannot_run=cannot_run)
    if lim is not None and cannot_run is None:
        r.occ = occ.occupancy(r.registers, r.shared_bytes, r.num_warps, lim)
    return r


def _needs_triton():
    from perflab.gemm import triton_matmul as tm

    if not tm.available():
        pytest.skip(str(tm.unavailable_reason()))


KERNEL = ["kernel", "--tile", "32x32x16", "--warps", "2", "--dtype", "bf16"]  # the config test_triton_kernels caches
