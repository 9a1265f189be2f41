"""Tests of `perflab.gemm.occupancy`."""

from __future__ import annotations

import dataclasses

import pytest

from perflab.core.errors import InputError
from perflab.gemm import occupancy as occ


def cc70_limits() -> occ.SMLimits:
    """Compute capability 7.0 as the CUDA C++ Best Practices Guide states it in its example: 65,536
    registers and at most 2048 threads (64 warps) per SM; 32 blocks and 96 KB shared memory per SM
    from the Programming Guide's table, column 7.0 (shared memory plays no part in the example)."""
    h = occ.sm_limits("sm_90")
    return dataclasses.replace(h, name="compute capability 7.0", compute_capability="7.0", shared_bytes=96 * 1024,
                               max_shared_bytes_per_block=96 * 1024, reserved_shared_bytes_per_block=0)


def test_occupancy_records_as_dicts_and_the_per_block_register_limit():
    lim = occ.sm_limits("sm_90")
    d = lim.as_dict()
    assert (d["gpu"], d["sm_count"], d["max_registers_per_block"]) == ("h100-sxm", 132, 65536)
    o = occ.occupancy(128, 32768, 4, lim)
    assert o.as_dict() == {"blocks_per_sm": o.blocks_per_sm, "warps_per_sm": o.warps_per_sm, "occupancy": o.occupancy,
                           "limited_by": o.limited_by, "blocks_by": o.blocks_by,
                           "registers_per_warp": 4096, "shared_per_block": o.shared_per_block}
    with pytest.raises(InputError, match=r"^255 registers × 1024 threads is over the 65536 registers a block may hold "
                                         r"on NVIDIA H100 SXM5 80GB: use fewer warps or a smaller tile$"):
        occ.occupancy(255, 0, 32, lim)


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
