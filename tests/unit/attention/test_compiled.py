"""Tests of `perflab.attention.compiled`: lesson 13's kernel compiled for a GPU that is not here."""

import pytest

from perflab.attention import compiled
from perflab.core.errors import InputError
from tests.unit.gemm.helpers import needs_triton


@needs_triton
def test_compiled_for_hopper_and_a_config_that_does_not_fit():
    r = compiled.compile_attention(64, 64, 64, "fp16", "sm_90")
    assert r.cannot_run is None and r.tensor_core_kind == "wgmma"
    assert r.registers and r.shared_bytes and r.blocks_per_sm and r.blocks_per_sm >= 1 and r.limited_by
    big = compiled.compile_configs([(256, 512)], 128, "fp16", "sm_90")
    assert big == [] or "KiB" in (big[0].cannot_run or "")


def _row(**kw) -> compiled.CompiledConfig:
    base = dict(block_m=64, block_n=64, head_dim=64, dtype="fp16", target="sm_90", causal=False, num_warps=4,
                num_stages=2, gpu="NVIDIA H100 SXM5 80GB", registers=128, spill_bytes=0, shared_bytes=32768,
                tensor_core_kind="wgmma", tensor_core_instructions=16, cached=True, blocks_per_sm=3, occupancy=0.375,
                limited_by="registers")
    return compiled.CompiledConfig(**{**base, **kw})


def test_the_compiled_table_is_narrow_and_names_what_cannot_run():
    ok = _row()
    bad = _row(block_n=256, cannot_run="K and V blocks alone need 256 KiB of shared memory")
    frame, why = compiled.compiled_frame([ok, bad])
    assert frame.shape[1] <= 7 and not frame.isna().any().any()
    assert "None" not in frame.to_string() and "nan" not in frame.to_string().lower()
    assert why == ["sm_90 64×256, d 64: K and V blocks alone need 256 KiB of shared memory"]
    assert frame.loc[0, "blocks/SM (occupancy)"] == "3 (38%)"


def test_its_json_has_only_the_figures_it_got():
    """`perflab attention --json` keeps its keys: the compiler's figures only when it compiled, the
    occupancy only when it was read."""
    refused = _row(block_n=256, cannot_run="K and V blocks alone need 256 KiB", registers=None, spill_bytes=None,
                   shared_bytes=None, tensor_core_kind=None, tensor_core_instructions=None, cached=None,
                   blocks_per_sm=None, occupancy=None, limited_by=None)
    assert list(refused.to_json()) == ["block_m", "block_n", "head_dim", "dtype", "target", "causal", "num_warps",
                                       "num_stages", "gpu", "cannot_run"]
    no_limits = _row(gpu=None, blocks_per_sm=None, occupancy=None, limited_by=None, tensor_core_kind=None)
    assert no_limits.to_json()["tensor_core_kind"] is None and "blocks_per_sm" not in no_limits.to_json()
    assert _row().to_json()["limited_by"] == "registers"


def test_a_config_refused_before_compiling_says_which_limit():
    with pytest.raises(InputError, match="fp16 or bf16"):
        compiled.compile_configs([(64, 64)], 64, "fp32", "sm_90")
    with pytest.raises(InputError, match="num_warps=3"):
        compiled.compile_configs([(64, 64)], 64, "fp16", "sm_90", num_warps=3)
    assert compiled.shared_estimate(64, 128, 64, 2) == 2 * 128 * 64 * 2
    job = compiled.attention_job(64, 32, 64, "fp16", 90)
    assert job["kernel"] == "flash_attention_fwd_kernel" and job["constexprs"]["BLOCK_N"] == 32


def test_the_grid_finds_a_tile_and_says_what_cannot_run():
    ok, bad = _row(), _row(block_n=256, cannot_run="K and V blocks alone need 256 KiB of shared memory")
    grid = compiled.CompiledGrid([ok, bad])
    assert grid.find("sm_90", 64, 64, 64) is ok and len(grid.table()) == 2
    assert grid.notes() == "cannot run:\nsm_90 64×256, d 64: K and V blocks alone need 256 KiB of shared memory"
    assert compiled.CompiledGrid([ok]).notes() == "every configuration compiled here can run"
    with pytest.raises(InputError, match="^sm_80 64×64, d 64 was not compiled here$"):
        grid.find("sm_80", 64, 64, 64)


@needs_triton
def test_compile_grid_compiles_every_tile_for_each_target():
    grid = compiled.compile_grid([(64, 64)], (64,), "fp16", targets=("sm_90", "sm_80"))
    assert [(r.target, r.block_m, r.head_dim) for r in grid.rows] == [("sm_90", 64, 64), ("sm_80", 64, 64)]
    assert grid.find("sm_80", 64, 64, 64).tensor_core_kind == "mma"
