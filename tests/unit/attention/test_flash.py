"""Lesson 13's FlashAttention kernel in Triton's interpreter: right against SDPA on odd shapes, its loads and
stores counted against the formula, the eager path's s² bytes, the recompute backward."""

import pytest

from perflab.attention import formulas as io
from perflab.core.errors import InputError
from tests.unit.gemm.helpers import needs_triton


@needs_triton
@pytest.mark.parametrize("s,d,causal,dtype,bm,bn", [
    (77, 64, False, "fp16", 32, 16),
    (77, 64, True, "fp16", 64, 32),
    (45, 128, True, "bf16", 32, 16),
    (33, 128, False, "bf16", 16, 64),
])
def test_matches_sdpa_on_odd_lengths(s, d, causal, dtype, bm, bn):
    from perflab.attention import flash

    r = flash.check(1, 2, s, d, dtype, causal=causal, block_m=bm, block_n=bn, seed=s)
    assert r.passed, r
    assert r.max_abs_err <= flash.tolerance(dtype) and r.lse_max_abs_err < 1e-3
    assert (r.seq, r.head_dim, r.causal, r.dtype) == (s, d, causal, dtype)


@needs_triton
@pytest.mark.parametrize("causal", [False, True])
def test_counted_bytes_match_the_formula(causal):
    from perflab.attention import flash

    c = flash.count_bytes(1, 2, 200, 64, block_m=64, block_n=32, causal=causal)
    assert c.other == 0
    assert c.total == c.predicted == c.read + c.written  # every masked load and store, to the byte
    pred = io.flash_bytes(1, 2, 200, 64, 2, block_m=64, block_n=32, causal=causal)
    assert (c.q, c.k, c.v, c.o, c.lse) == tuple(pred[k] for k in ("q", "k", "v", "o", "lse"))
    if not causal:
        assert c.total == c.predicted_closed
    else:  # the closed form is short by exactly the keys its even spread over the tiles leaves out
        gap = io.causal_gap(200, 64, 2, block_m=64, block_n=32)
        assert gap.tile_keys == [64, 128, 192, 200] and gap.closed_keys == 500
        assert c.total - c.predicted_closed == 2 * gap.gap_bytes == 2 * 21_504  # two heads


def test_eager_bytes_show_the_s_squared_term():
    from perflab.attention import flash

    a = flash.count_eager_bytes(1, 2, 64, 64)
    b = flash.count_eager_bytes(1, 2, 128, 64)
    assert a.largest == a.s2_bytes == 2 * 64 * 64 * 4  # the scores of both heads, fp32
    # at least standard attention's 4·s² (S and P, each written and read), on top of Q, K, V and O
    assert b.total >= io.standard_bytes(1, 2, 128, 64, 4)["total"]
    assert b.total > 2 * a.total  # faster than linear in s
    # eager PyTorch scales S in a multiplication of its own: one more read and write of s² values
    assert [r.op for r in b.ops] == ["bmm", "mul", "_softmax", "bmm"]
    assert b.total == sum(r.read + r.written for r in b.ops)


@needs_triton
def test_backward_recompute_matches_autograd():
    from perflab.attention import flash

    r = flash.check_backward(1, 2, 50, 64, "fp32", causal=True)
    assert r.passed, r
    assert r.backward_flops == 2.5 * r.forward_flops and max(r.dq, r.dk, r.dv) <= r.tolerance


@needs_triton
def test_bad_input_is_one_line():
    from perflab.attention import flash

    with pytest.raises(InputError, match="head dimensions 64 and 128"):
        flash.check(1, 1, 16, 80)
    with pytest.raises(InputError, match="power of two"):
        flash.count_bytes(1, 1, 16, 64, block_m=48)
    with pytest.raises(InputError, match="too large"):
        flash.count_bytes(8, 32, 4096, 128)


def test_the_lesson_shows_the_kernels_loop_without_importing_triton():
    from perflab.attention import flash

    loop = flash.kernel_source()
    assert loop.startswith("m_i = tl.zeros") and "alpha = tl.exp2(m_i - m_new)" in loop and loop.rstrip().endswith("m_i = m_new")
    assert flash.kernel_source(loop_only=False).startswith("def flash_attention_fwd_kernel(")


def test_the_eager_table_has_no_empty_cell_and_says_how_it_grows():
    from perflab.attention import flash

    frame, last = flash.eager_frame([32, 64], 64, "fp32")
    assert not frame.isna().any().any()
    assert list(frame["growth"]) == ["first size", f"{last.total / frame['eager counted (B)'][0]:.2f}× from s = 32"]
    assert frame["s² × 4 B"].tolist() == [32 * 32 * 4, 64 * 64 * 4]
