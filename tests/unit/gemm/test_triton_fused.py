"""Lesson 10 §6 names the limits that keep the fused kernel's next block off an SM from the compiled
kernel itself: every limit that allows no more blocks, not one chosen by hand."""

import pytest

from perflab.gemm import triton_matmul as tm

needs_triton = pytest.mark.skipif(not tm.available(), reason=f"{tm.unavailable_reason()}")


@needs_triton
@pytest.mark.parametrize("target", ["sm_90", "sm_80"])
def test_fused_kernel_names_every_binding_limit(target, tmp_path, monkeypatch):
    from perflab.gemm import triton_fused
    from perflab.gemm.occupancy import occupancy, sm_limits

    monkeypatch.setenv("PERFLAB_KERNEL_CACHE", str(tmp_path))
    r = triton_fused.compile_for(target, "bf16")
    o = occupancy(r["registers"], r["shared_bytes"], r["num_warps"], sm_limits(target))
    binding = {k for k, v in o.blocks_by.items() if v == o.blocks_per_sm}
    assert set(r["limited_by"].split(" and ")) == binding
    assert r["blocks_per_sm"] == o.blocks_per_sm
    assert "warps" in binding  # 4 warps per block: the warps limit always binds at full occupancy
