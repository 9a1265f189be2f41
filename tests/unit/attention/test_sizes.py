"""Tests of `perflab.attention.sizes`: lesson 13's sizes by kind of run."""

from perflab.attention import flash
from perflab.attention.sizes import SIZES
from perflab.core.sizes import for_run


def test_each_kind_of_run_has_its_sizes():
    assert set(SIZES) == {"smoke", "cpu", "gpu"}
    assert for_run(SIZES, True, "cpu") is SIZES["smoke"] and for_run(SIZES, False, "cpu") is SIZES["cpu"]
    assert for_run(SIZES, False, "cuda") is SIZES["gpu"]


def test_what_the_interpreter_runs_stays_within_its_limit():
    """On a CPU every checked and counted shape runs in Triton's interpreter: within its size limit, with
    head dimensions and tiles the kernel takes."""
    for kind in ("smoke", "cpu"):
        s = SIZES[kind]
        for seq, d, _causal, dtype in s.checks:
            assert 1 * 2 * seq * d <= flash.INTERPRETER_MAX_ELEMENTS and d in flash.HEAD_DIMS and dtype in ("fp16", "bf16")
        for seq, bm, bn, _causal in s.odd + ((s.count_seq, s.count_block_m, s.count_block_n, False),):
            assert seq * 64 <= flash.INTERPRETER_MAX_ELEMENTS and flash.check_blocks(bm, bn) == (bm, bn)
    assert (64, 64) in SIZES["smoke"].tiles and 64 in SIZES["smoke"].head_dims  # the prediction's tile is compiled


def test_the_gpu_times_the_shape_the_course_checked_on_an_h200():
    assert SIZES["gpu"].timed_shape == (4, 16, 4096, 128)
    assert SIZES["gpu"].flops_shape == SIZES["cpu"].flops_shape  # a formula: the same example everywhere
