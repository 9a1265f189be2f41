"""Lesson 13's formulas: attention's bytes (standard and fused) and FLOPs (forward, backward with recompute)."""

import pytest

from perflab.attention import formulas as io
from perflab.core.errors import InputError


def test_standard_bytes_have_the_s_squared_term():
    b = io.standard_bytes(1, 1, 1024, 64, 2)
    assert b["scores"] == 4 * 1024 * 1024 * 2 and b["qkvo"] == 4 * 1024 * 64 * 2
    # doubling s quadruples the scores' bytes, doubles Q, K, V and O
    b2 = io.standard_bytes(1, 1, 2048, 64, 2)
    assert b2["scores"] == 4 * b["scores"] and b2["qkvo"] == 2 * b["qkvo"]


def test_flash_bytes_reread_k_and_v_once_per_q_tile():
    f = io.flash_bytes(2, 3, 256, 64, 2, block_m=64, block_n=32)
    assert f["k"] == f["v"] == 2 * 3 * (256 // 64) * 256 * 64 * 2
    assert f["q"] == f["o"] == 2 * 3 * 256 * 64 * 2 and f["lse"] == 2 * 3 * 256 * 4
    assert f["total"] == io.flash_bytes_closed(2, 3, 256, 64, 2, block_m=64)
    # bigger Q tiles, fewer re-reads
    assert io.flash_bytes(1, 1, 256, 64, block_m=128)["k"] == f["k"] // (2 * 3) // 2


def test_causal_reads_about_half_and_the_closed_form_is_exact_when_blocks_divide():
    s = 1024
    full = io.flash_bytes(1, 1, s, 64, block_m=64, block_n=64)["k"]
    causal = io.flash_bytes(1, 1, s, 64, block_m=64, block_n=64, causal=True)["k"]
    assert causal == (s // 64 + 1) * s * 64 * 2 // 2 and 0.5 < causal / full < 0.55
    assert io.flash_bytes(1, 1, s, 64, block_m=64, block_n=32, causal=True)["total"] == \
        io.flash_bytes_closed(1, 1, s, 64, block_m=64, causal=True)
    # an odd length or blocks that do not divide: the gap is the keys the closed form's even spread
    # (tile i reads (i+1)·s/T) leaves out, tile by tile
    for s_, bm, bn in ((1000, 64, 64), (333, 32, 64), (200, 64, 32), (1024, 64, 32)):
        exact = io.flash_bytes(1, 1, s_, 64, block_m=bm, block_n=bn, causal=True)["total"]
        closed = io.flash_bytes_closed(1, 1, s_, 64, block_m=bm, causal=True)
        gap = io.causal_gap(s_, 64, 2, block_m=bm, block_n=bn)
        assert exact - closed == gap.gap_bytes and sum(gap.tile_keys) == gap.keys
        assert f"{gap.gap_bytes:,} B" in gap.text
    assert io.causal_gap(1024, 64, block_m=64, block_n=32).gap_bytes == 0


def test_flops_follow_the_matmuls():
    assert io.forward_flops(2, 8, 128, 64) == 4 * 2 * 8 * 128**2 * 64
    assert io.forward_flops(2, 8, 128, 64, causal=True) == 2 * 2 * 8 * 128**2 * 64
    assert io.forward_flops(1, 1, 4, 64, causal=True, exact_causal=True) == 4 * 64 * 10
    f = io.forward_flops(1, 16, 1024, 64)
    assert io.backward_flops(1, 16, 1024, 64) == 2.5 * f  # five matmuls against two (flash-attention#741)
    assert io.backward_flops(1, 16, 1024, 64, recompute=False) == 2 * f
    st = io.step_flops(1, 16, 1024, 64)
    assert st["model"] == 3 * f and st["hardware"] == 3.5 * f


def test_flash_attention_issue_741_figures():
    """Tri Dao's numbers in Dao-AILab/flash-attention#741: seq 1024, head dim 64, 16 heads, batch 64: forward
    275 GFLOPs; with the backward, 825 GFLOPs (standard, 2×) and 963 GFLOPs (FlashAttention, 2.5×)."""
    f = io.forward_flops(64, 16, 1024, 64)
    assert round(f / 1e9) == 275
    assert round(io.step_flops(64, 16, 1024, 64)["model"] / 1e9) == 825
    assert round(io.step_flops(64, 16, 1024, 64)["hardware"] / 1e9) == 962  # 962.1: the issue rounds to 963


def test_memory_at_long_sequences():
    m = io.memory_bytes(1, 1, 8192, 64, 2)
    assert m["standard"] == 2 * 8192**2 * 2 and m["flash"] == 8192 * 4


def test_bad_input_is_one_line():
    with pytest.raises(InputError):
        io.flash_bytes(1, 1, 0, 64)
    with pytest.raises(InputError):
        io.standard_bytes(1, 1, 64, 64, itemsize=3)
    with pytest.raises(InputError):
        io.fraction_of_peak(1e12, 0, 100)
    assert io.fraction_of_peak(1e12, 1.0, 1.0) == 1.0 and io.fraction_of_peak(0, 1.0, 1.0) == 0.0
    assert io.fraction_of_peak(1e12, 2.0, 1.0) == 0.5
    with pytest.raises(InputError, match="faster than the peak given"):  # above 100 %: the peak is wrong
        io.fraction_of_peak(2e12, 1.0, 1.0)


def test_the_fused_kernels_rereads_are_a_fraction_d_over_2_block_m_of_standard_traffic():
    """K and V re-read once per Q tile: 2·(s/BLOCK_M)·s·d against 4·s², so the ratio tends to 2·BLOCK_M/d."""
    for bm, d in ((64, 64), (128, 64), (64, 128)):
        s = 1 << 15
        ratio = io.standard_bytes(1, 1, s, d)["total"] / io.flash_bytes(1, 1, s, d, block_m=bm)["total"]
        assert ratio == pytest.approx(2 * bm / d, rel=0.02)


def test_long_sequences_as_the_lesson_tabulates_them():
    mem = io.long_sequences((8192, 32768), b=1, a=32, d=128, itemsize=2)
    assert mem.standard_gib(8192) == 8 and mem.standard_gib(32768) == 128  # 2·b·a·s²·2 B
    assert mem.table().to_dict("records") == [
        {"seq": 8192, "standard: S and P (GiB)": "8", "fused: log-sum-exp (MiB)": "1", "Q, K, V, O at d = 128 (GiB)": "0.25"},
        {"seq": 32768, "standard: S and P (GiB)": "128", "fused: log-sum-exp (MiB)": "4", "Q, K, V, O at d = 128 (GiB)": "1"}]


def test_the_flops_table_halves_causal_and_gives_the_backward_two_and_a_half_times():
    fl = io.attention_flops(8, 16, 2048, 128)
    assert fl.describe() == "b = 8, heads = 16, s = 2048, d = 128"
    rows = fl.table().set_index("causal")
    # 4·b·a·s²·d = 4 · 8 · 16 · 2048² · 128 = 274.9 GFLOPs, half of it causal
    assert rows.loc[False, "forward (GFLOPs)"] == "274.9" and rows.loc[True, "forward (GFLOPs)"] == "137.4"
    assert rows.loc[False, "backward, recompute (GFLOPs)"] == "687.2"  # 2.5 × the forward
    assert rows.loc[False, "step, model FLOPs (GFLOPs)"] == "824.6"  # 3 × the forward
    assert rows.loc[False, "step, hardware FLOPs (GFLOPs)"] == "962.1"  # 3.5 × the forward
