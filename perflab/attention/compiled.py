"""What the compiler made of lesson 13's attention kernel for a GPU that is not here.

    >>> from perflab.attention import compiled
    >>> r = compiled.compile_attention(64, 64, 64, "fp16", "sm_90")   # CompiledConfig
    >>> r.registers, r.spill_bytes, r.shared_bytes, r.blocks_per_sm, r.limited_by

The kernel is `perflab.gemm.triton_kernels.flash_attention_fwd_kernel`, compiled through lesson 04's
machinery (`perflab.gemm.compiled`: one child process for every uncached configuration, a cache on
disk, cuobjdump's figures) and its occupancy read against the target's per-SM limits
(`perflab.gemm.occupancy`). No GPU is needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perflab.attention.kernel import check_blocks, check_head_dim, tm_itemsize
from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, fields_json
from perflab.gemm import triton_matmul as tm


def attention_job(block_m: int, block_n: int, d: int, dtype: str, cc: int, *, causal: bool = False,
                  num_warps: int = 4, num_stages: int = 2, seq: int = 4096, heads: int = 16) -> JSON:
    """The compile request for the attention kernel on contiguous [b, heads, seq, d] tensors: the JSON
    the compiler's child process reads (`perflab.gemm.compiled.build`)."""
    from perflab.gemm.compiled import TRITON_DTYPE, kernel_signature

    ty = "*" + TRITON_DTYPE[dtype]
    sd, hsd = seq * d, heads * seq * d
    args: list[tuple[str, Any]] = [("q_ptr", ty), ("k_ptr", ty), ("v_ptr", ty), ("o_ptr", ty), ("lse_ptr", "*fp32"),
                                   ("seq_len", seq), ("n_heads", heads), ("qk_scale", "fp32")]
    for t in ("q", "k", "v", "o"):
        args += [(f"stride_{t}b", hsd), (f"stride_{t}h", sd), (f"stride_{t}s", d)]
    signature, constexprs, divisible = kernel_signature(
        args, (("HEAD_DIM", d), ("BLOCK_M", block_m), ("BLOCK_N", block_n), ("CAUSAL", bool(causal)), ("WIDEN", False)))
    return {"kernel": "flash_attention_fwd_kernel", "signature": signature, "constexprs": constexprs,
            "divisible": divisible, "cc": cc, "num_warps": num_warps, "num_stages": num_stages}


def shared_estimate(block_m: int, block_n: int, d: int, itemsize: int) -> int:
    """A lower bound of the shared memory a tile needs, bytes: one K block and one V block
    (BLOCK_N × d each). The Q tile and P may also be staged there, and pipelining keeps more K/V
    stages: the compiler's figure is the real one."""
    return 2 * block_n * d * itemsize


def _check_compile_args(block_m: int, block_n: int, d: int, dtype: str, num_warps: int, num_stages: int) -> str:
    check_blocks(block_m, block_n)
    check_head_dim(d)
    name = tm.dtype_name(dtype)
    if name == "fp32":
        raise InputError("compile the attention kernel in fp16 or bf16 (Tensor Core inputs)")
    if num_warps not in (1, 2, 4, 8, 16):
        raise InputError(f"num_warps={num_warps}: use 1, 2, 4, 8 or 16")
    if not isinstance(num_stages, int) or not 1 <= num_stages <= 6:
        raise InputError(f"num_stages={num_stages}: use 1 to 6")
    return name


_COMPILED = ("registers", "spill_bytes", "shared_bytes", "tensor_core_kind", "tensor_core_instructions", "cached")
_RESIDENT = ("blocks_per_sm", "occupancy", "limited_by")


@dataclass
class CompiledConfig:
    """One (BLOCK_M, BLOCK_N) of the kernel compiled for a target. The compiler's figures are None when
    it was refused before or by the compiler; the occupancy is None without the target's limits or when
    it cannot run (`cannot_run` says why, in one line)."""

    block_m: int
    block_n: int
    head_dim: int
    dtype: str
    target: str  # 'sm_90'
    causal: bool
    num_warps: int
    num_stages: int
    gpu: str | None  # the table GPU whose per-SM limits apply
    cannot_run: str | None = None
    registers: int | None = None  # per thread
    spill_bytes: int | None = None
    shared_bytes: int | None = None  # per block
    tensor_core_kind: str | None = None  # 'wgmma', 'mma' or None
    tensor_core_instructions: int | None = None
    cached: bool | None = None  # served from the kernel cache
    blocks_per_sm: int | None = None
    occupancy: float | None = None  # resident warps / max warps
    limited_by: str | None = None

    @property
    def compiled(self) -> bool:
        return self.registers is not None

    def to_json(self) -> JSON:
        """Its fields, without the compiler's figures it has not got (nor the occupancy)."""
        out = fields_json(self)
        for k in (() if self.compiled else _COMPILED) + (() if self.blocks_per_sm is not None else _RESIDENT):
            del out[k]
        return out


def compile_configs(configs: list[tuple[int, int]], d: int = 64, dtype: str = "fp16", target: str | int = "sm_90", *,
                    causal: bool = False, num_warps: int = 4, num_stages: int = 2,
                    verbose: bool = False) -> list[CompiledConfig]:
    """Compile the kernel for each (block_m, block_n) for `target` (no GPU needed; one compiler
    process for all uncached ones) and read registers, spills, shared memory, Tensor Core
    instructions and blocks per SM with the binding limit (lesson 04's machinery).

    A configuration that does not fit gets 'cannot_run': one line naming the limit."""
    from perflab.gemm import compiled
    from perflab.gemm.occupancy import occupancy

    name = ""
    for bm, bn in configs:
        name = _check_compile_args(bm, bn, d, dtype, num_warps, num_stages)
    cc = compiled.parse_target(target)
    limits = compiled.limits_for(cc, None)
    rows: list[CompiledConfig] = []
    jobs: list[JSON] = []
    job_of: dict[int, int] = {}  # row → its job
    for bm, bn in configs:
        row = CompiledConfig(bm, bn, d, name, f"sm_{cc}", bool(causal), num_warps, num_stages,
                             limits.name if limits else None)
        need = shared_estimate(bm, bn, d, tm_itemsize(name))
        if limits is not None and need > limits.max_shared_bytes_per_block:
            row.cannot_run = (f"K and V blocks alone need {need / 1024:.0f} KiB of shared memory (2 × {bn}×{d} × "
                              f"{tm_itemsize(name)} B), over {limits.name}'s "
                              f"{limits.max_shared_bytes_per_block / 1024:.0f} KiB per block: use a smaller BLOCK_N")
        else:
            jobs.append(attention_job(bm, bn, d, name, cc, causal=causal, num_warps=num_warps, num_stages=num_stages))
            job_of[len(rows)] = len(jobs) - 1
        rows.append(row)
    summaries, todo = compiled.build(jobs, verbose=verbose) if jobs else ([], set())
    for i, row in enumerate(rows):
        j = job_of.get(i)
        if j is None:
            continue
        s = summaries[j]
        if "error" in s:
            msg = s["error"]
            if "shared memory" in msg.lower() or "OutOfResources" in msg:
                row.cannot_run = f"the compiler refused it: {msg}"
                continue
            raise InputError(f"Triton could not compile the attention kernel {row.block_m}x{row.block_n} "
                             f"d={d}: {msg}")
        figs, md = s["cuobjdump"], s["metadata"]
        row.registers, row.spill_bytes = int(figs["REG"]), int(figs.get("STACK", 0))
        row.shared_bytes = int(md["shared"]) + int(figs.get("SHARED", 0))
        row.tensor_core_kind, row.tensor_core_instructions = s["tensor_core_kind"], int(s["tensor_core_instructions"])
        row.cached = j not in todo
        if limits is not None:
            try:
                occ = occupancy(row.registers, row.shared_bytes, num_warps, limits)
                row.blocks_per_sm, row.occupancy, row.limited_by = occ.blocks_per_sm, occ.occupancy, occ.limited_by
            except InputError as e:
                row.cannot_run = str(e).replace(
                    "lower num_stages or BLOCK_K (each stage holds a BLOCK_M×BLOCK_K tile of A and a BLOCK_K×BLOCK_N "
                    "tile of B)", "use a smaller BLOCK_N or fewer stages (each stage holds a K and a V block)")
    return rows


def compiled_frame(rows: list[CompiledConfig]) -> tuple[Any, list[str]]:
    """`compile_configs` rows as a reader reads them: one narrow table (no empty cells: a config that
    cannot run says so in its last column) and, apart, one line per config that cannot run, with why."""
    import pandas as pd

    from perflab.core.readout import nbytes

    table, why = [], []
    for r in rows:
        tile = f"{r.block_m}×{r.block_n}, d {r.head_dim}"
        if r.cannot_run:
            table.append({"target": r.target, "tile": tile, "registers": "–", "spilled": "–", "shared": "–",
                          "blocks/SM (occupancy)": "–", "limited by": "cannot run (below)"})
            why.append(f"{r.target} {tile}: {r.cannot_run}")
            continue
        table.append({"target": r.target, "tile": tile, "registers": r.registers,
                      "spilled": nbytes(r.spill_bytes or 0), "shared": nbytes(r.shared_bytes or 0),
                      "blocks/SM (occupancy)": (f"{r.blocks_per_sm} ({r.occupancy or 0.0:.0%})"
                                                if r.blocks_per_sm is not None else "no limits known"),
                      "limited by": r.limited_by or "–"})
    return pd.DataFrame(table), why


def compile_attention(block_m: int = 64, block_n: int = 64, d: int = 64, dtype: str = "fp16",
                      target: str | int = "sm_90", **kw) -> CompiledConfig:
    """One configuration: see `compile_configs`."""
    return compile_configs([(block_m, block_n)], d, dtype, target, **kw)[0]


@dataclass
class CompiledGrid:
    """`compile_configs` over tiles × head dimensions × targets, as lesson 13 shows them."""

    rows: list[CompiledConfig]

    def table(self):
        return compiled_frame(self.rows)[0]

    def notes(self) -> str:
        """One line per configuration that cannot run, with why (or that every one can)."""
        cannot = compiled_frame(self.rows)[1]
        return "cannot run:\n" + "\n".join(cannot) if cannot else "every configuration compiled here can run"

    def find(self, target: str, block_m: int, block_n: int, head_dim: int) -> CompiledConfig:
        for r in self.rows:
            if (r.target, r.block_m, r.block_n, r.head_dim) == (target, block_m, block_n, head_dim):
                return r
        raise InputError(f"{target} {block_m}×{block_n}, d {head_dim} was not compiled here")


def compile_grid(tiles: list[tuple[int, int]], head_dims=(64,), dtype: str = "fp16", targets=("sm_90", "sm_80"),
                 **kw) -> CompiledGrid:
    """`compile_configs` of every tile for each target and head dimension (targets outermost)."""
    rows: list[CompiledConfig] = []
    for tgt in targets:
        for d in head_dims:
            rows += compile_configs(list(tiles), d, dtype, tgt, **kw)
    return CompiledGrid(rows)
