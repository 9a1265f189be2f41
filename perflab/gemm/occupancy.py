"""Blocks resident per SM, occupancy and the limit that binds, from a kernel's resources.

The arithmetic follows `cuda_occupancy.h`, the header behind `cudaOccupancyMaxActiveBlocksPerMultiprocessor`
(CUDA Toolkit; also shipped in Triton's wheel, triton/backends/nvidia/include):

* registers: a warp's registers are rounded up to the allocation unit (256), and each of the 4
  sub-partitions holds ⌊(registers per SM / 4) / registers per warp⌋ warps; blocks =
  ⌊4 · that / warps per block⌋. A kernel over 255 registers per thread, or a block over the
  registers per block, cannot launch.
* shared memory: a block takes its shared bytes plus what CUDA reserves per block (1 KB from
  compute capability 8.0 on), rounded up to 128 bytes; blocks = ⌊shared per SM / that⌋ (the
  largest carve-out, which the driver picks when a kernel asks for more than the default). Over
  the per-block maximum, the kernel cannot launch.
* warps: ⌊max warps per SM / warps per block⌋; blocks: the per-SM cap.

occupancy = resident warps / max warps per SM. The per-SM limits come from perflab's hardware
table (`per_sm` of the A100 and H100 records, with their sources).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, package_json, to_json

# Which table record gives a compilation target's per-SM limits (same compute capability) and SM count.
TARGET_GPU = {"sm_80": "a100-sxm-80gb", "sm_90": "h100-sxm"}


@dataclass(frozen=True)
class SMLimits:
    gpu: str
    name: str
    compute_capability: str
    sm_count: int
    registers: int
    max_registers_per_block: int
    max_registers_per_thread: int
    max_warps: int
    max_blocks: int
    max_threads_per_block: int
    shared_bytes: int
    max_shared_bytes_per_block: int
    reserved_shared_bytes_per_block: int
    register_allocation_unit: int
    register_sub_partitions: int
    shared_allocation_unit: int
    source: str = ""

    def as_dict(self) -> JSON:
        return to_json(self)


@lru_cache(maxsize=1)
def _records() -> dict[str, dict[str, Any]]:
    raw = package_json("perflab.core", "accelerators.json")
    return {r["id"]: r for r in raw["accelerators"]}


def gpus_with_limits() -> list[str]:
    """Table ids that carry per-SM limits."""
    return [i for i, r in _records().items() if r.get("per_sm")]


def sm_limits(gpu: str) -> SMLimits:
    """Per-SM limits of a table GPU ('h100-sxm', 'a100-sxm-80gb') or of a target ('sm_90' → h100-sxm)."""
    key = TARGET_GPU.get(str(gpu).strip().lower(), str(gpu).strip().lower())
    rec = _records().get(key)
    if rec is None or not rec.get("per_sm"):
        have = ", ".join(sorted(TARGET_GPU) + gpus_with_limits())
        raise InputError(f"no per-SM limits for {gpu!r} in perflab's table: use one of {have}")
    p = rec["per_sm"]
    ints = {k: int(v) for k, v in p.items() if k != "compute_capability"}
    return SMLimits(gpu=rec["id"], name=rec["name"], sm_count=int(rec["sm_count"]), source=rec["sources"]["per_sm"],
                    compute_capability=str(p["compute_capability"]), **ints)


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float  # resident warps / max warps per SM
    limited_by: str  # 'registers', 'shared memory', 'warps' or 'blocks' (several joined by ' and ' on a tie)
    blocks_by: dict[str, int]  # blocks each limit allows on its own
    registers_per_warp: int  # after rounding to the allocation unit
    shared_per_block: int  # bytes, with the reserved part and rounding

    def as_dict(self) -> JSON:
        return to_json(self)


def occupancy(registers: int, shared_bytes: int, num_warps: int, limits: SMLimits) -> Occupancy:
    """Resident blocks and occupancy of a kernel using `registers` per thread and `shared_bytes` per block.

    Raises InputError, naming the limit and what to change, when the kernel cannot launch at all.
    """
    lim = limits
    if num_warps < 1 or num_warps * 32 > lim.max_threads_per_block:
        raise InputError(f"{num_warps} warps = {num_warps * 32} threads per block: {lim.name} allows "
                         f"{lim.max_threads_per_block}; use at most {lim.max_threads_per_block // 32} warps")
    if registers > lim.max_registers_per_thread:
        raise InputError(f"{registers} registers per thread: {lim.name} allows {lim.max_registers_per_thread}; "
                         "use a smaller tile or more warps")
    reg_warp = _round_up(max(registers, 0) * 32, lim.register_allocation_unit)
    sub = lim.register_sub_partitions
    if reg_warp * _round_up(num_warps, sub) > lim.max_registers_per_block:
        raise InputError(f"{registers} registers × {num_warps * 32} threads is over the {lim.max_registers_per_block} "
                         f"registers a block may hold on {lim.name}: use fewer warps or a smaller tile")
    need = shared_bytes + lim.reserved_shared_bytes_per_block
    if shared_bytes > lim.max_shared_bytes_per_block:
        raise InputError(
            f"shared memory per block {shared_bytes / 1024:.0f} KiB is over {lim.name}'s limit of "
            f"{lim.max_shared_bytes_per_block / 1024:.0f} KiB per block: lower num_stages or BLOCK_K "
            "(each stage holds a BLOCK_M×BLOCK_K tile of A and a BLOCK_K×BLOCK_N tile of B)")
    smem_block = _round_up(need, lim.shared_allocation_unit)
    by = {
        "registers": (lim.registers // sub // reg_warp) * sub // num_warps if reg_warp else lim.max_blocks,
        "shared memory": lim.shared_bytes // smem_block if smem_block else lim.max_blocks,
        "warps": lim.max_warps // num_warps,
        "blocks": lim.max_blocks,
    }
    blocks = min(by.values())
    if blocks < 1:  # pragma: no cover - every case above that gives 0 raised already
        raise InputError(f"this kernel cannot launch on {lim.name}")
    binding = [k for k, v in by.items() if v == blocks]
    warps = blocks * num_warps
    return Occupancy(blocks, warps, warps / lim.max_warps, " and ".join(binding), by, reg_warp, smem_block)
