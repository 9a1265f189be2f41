"""Lesson 13's FlashAttention kernel in Triton's interpreter: right against SDPA on odd shapes, its loads and
stores counted against the formula, the eager path's s² bytes, the recompute backward."""

import pytest

from perflab.attention import formulas as io
from perflab.core.errors import InputError
from tests.unit.attention.helpers import ODD_SHAPES
from tests.unit.gemm.helpers import needs_triton


@pytest.fixture(scope="module")
def kernel_runs():
    """The kernel's runs that these tests read, made in one interpreter (`helpers.runs`)."""
    from tests.unit.attention import helpers

    return helpers.runs()


@needs_triton
@pytest.mark.parametrize("i", range(len(ODD_SHAPES)), ids=["-".join(map(str, sh)) for sh in ODD_SHAPES])
def test_matches_sdpa_on_odd_lengths(i, kernel_runs):
    from perflab.attention import flash

    s, d, causal, dtype, bm, bn = ODD_SHAPES[i]
    r = kernel_runs["odd"][i]  # flash.check(1, 2, s, d, dtype, causal=causal, block_m=bm, block_n=bn, seed=s)
    assert r.passed, r
    assert r.max_abs_err <= flash.tolerance(dtype) and r.lse_max_abs_err < 1e-3
    assert (r.seq, r.head_dim, r.causal, r.dtype) == (s, d, causal, dtype)


@needs_triton
@pytest.mark.parametrize("causal", [False, True])
def test_counted_bytes_match_the_formula(causal, kernel_runs):
    c = kernel_runs["bytes"]["causal" if causal else "plain"]  # flash.count_bytes(1, 2, 200, 64, block_m=64, block_n=32)
    assert (c.seq, c.block_m, c.block_n, c.causal) == (200, 64, 32, causal)
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
def test_backward_recompute_matches_autograd(kernel_runs):
    r = kernel_runs["backward"]  # flash.check_backward(1, 2, 50, 64, "fp32", causal=True)
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
    # several at once (in one child when this process imported Triton natively): still one line, before any run
    from perflab.attention.counting import count_points

    with pytest.raises(InputError, match="head dimensions 64 and 128"):
        flash.checks([(21, 64, False, "fp16"), (16, 80, False, "fp16")])
    with pytest.raises(InputError, match="power of two"):
        count_points([(16, 64, 32, False), (16, 48, 16, False)])


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


def _check(passed=True, **kw):
    from perflab.attention import flash

    base = dict(batch=1, heads=2, seq=37, head_dim=64, dtype="fp16", causal=True, block_m=32, block_n=16, device="cpu",
                interpreter=True, max_abs_err=0.0009766, lse_max_abs_err=4.3e-07, tolerance=0.003906, passed=passed)
    return flash.FlashCheck(**{**base, **kw})


def test_the_checks_table_says_each_error_and_whether_it_is_within():
    from perflab.attention import flash

    checks = flash.FlashChecks([_check(), _check(False, seq=21, max_abs_err=0.5)])
    assert not checks.passed and flash.FlashChecks([_check()]).passed
    rows = checks.table().to_dict("records")
    assert rows[0] == {"seq": 37, "head_dim": 64, "causal": True, "dtype": "fp16", "max |O − SDPA|": "0.00098",
                       "tolerance": "0.0039", "max |lse error|": "4.3e-07", "within": "✓"}
    assert rows[1]["within"] == "✗" and rows[1]["max |O − SDPA|"] == "0.50"


@needs_triton
def test_checks_runs_each_shape_with_its_length_as_the_seed(kernel_runs):
    from perflab.attention import flash

    got = flash.checks([(21, 64, False, "fp16")], block_m=32, block_n=16)  # here, or all shapes in one child
    assert got.passed and [(c.seq, c.heads, c.block_m, c.block_n) for c in got.checks] == [(21, 2, 32, 16)]
    assert got.checks[0] == kernel_runs["check21"]  # flash.check(1, 2, 21, 64, "fp16", block_m=32, block_n=16, seed=21)


def test_timed_paths_against_the_ceiling_name_each_path():
    from perflab.attention import flash

    t = flash.PathTimings(1e12, {"triton": flash.PathTiming(0.002, 500.0, 1e-3),
                                 "eager": flash.PathTiming(error="out of memory")})
    assert t.against_ceiling(800.0) == {
        flash.PATH_NAMES["triton"]: "500 TFLOP/s (62% of the measured bf16 matmul ceiling, 800 TFLOP/s)",
        flash.PATH_NAMES["eager"]: "out of memory"}


def test_the_backward_check_in_one_line():
    from perflab.attention import flash

    ok = flash.BackwardCheck(5.4e-07, 5.4e-07, 7.2e-07, 1e-4, True, 1.0, 2.5)
    assert ok.text() == ("recompute backward against autograd through SDPA: max |dQ| err 5.4e-07, |dK| 5.4e-07, "
                         "|dV| 7.2e-07 (tolerance 1e-04): ok")
    assert flash.BackwardCheck(0.1, 0.0, 0.0, 1e-4, False, 1.0, 2.5).text().endswith("FAILED")
