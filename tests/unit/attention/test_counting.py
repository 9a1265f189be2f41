"""Tests of `perflab.attention.counting`: the kernel's loads and stores counted in Triton's interpreter,
tabulated beside the formula as lesson 13 shows them (the counts themselves: tests/unit/attention/test_flash.py)."""

from perflab.attention import counting, flash
from perflab.attention import formulas as io
from tests.unit.gemm.helpers import needs_triton


def test_flash_re_exports_the_counting_names():
    for name in ("ByteCount", "EagerBytes", "EagerOp", "count_bytes", "count_eager_bytes", "count_totals",
                 "counting_loads_and_stores", "eager_frame"):
        assert getattr(flash, name) is getattr(counting, name)


def _count(**kw) -> counting.ByteCount:
    pred = io.flash_bytes(1, 1, kw.get("seq", 64), 64, 2, block_m=32, block_n=32, causal=kw.get("causal", False))
    base = dict(q=pred["q"], k=pred["k"], v=pred["v"], o=pred["o"], lse=pred["lse"], read=0, written=0, other=0,
                total=pred["total"], predicted=pred["total"], predicted_closed=pred["total"], batch=1, heads=1, seq=64,
                head_dim=64, dtype="fp16", causal=False, block_m=32, block_n=32)
    return counting.ByteCount(**{**base, **kw})


def test_a_count_is_tabulated_tensor_by_tensor_beside_the_formula():
    table = _count().table()
    assert list(table.index) == ["q", "k", "v", "o", "lse", "total"]
    assert list(table.columns) == ["counted (B)", "formula (B)"]
    assert (table["counted (B)"] == table["formula (B)"]).all() and table.loc["total", "formula (B)"] == 49_408
    assert table.loc["lse", "formula (B)"] == 4 * 64  # the log-sum-exp in fp32, one per row


def test_several_counts_in_one_table_and_the_causal_gap_computed_tile_by_tile():
    gap = io.causal_gap(50, 64, 2, block_m=16, block_n=32)
    counts = counting.ByteCounts([_count(seq=50, block_m=16, causal=True, predicted=54_984, total=54_984,
                                         predicted_closed=45_000), _count()])
    table = counts.table()
    assert list(table.columns) == ["seq", "block_m", "block_n", "causal", "counted (B)", "formula, exact (B)",
                                   "closed form (B)"]
    assert list(table["closed form (B)"]) == [45_000, 49_408]
    assert counts.causal_gaps() == gap.text  # only the causal count has a gap to explain


@needs_triton
def test_count_points_counts_one_head_each():
    got = counting.count_points([(50, 16, 32, True)], d=64, dtype="fp16")
    (c,) = got.counts
    assert (c.seq, c.block_m, c.block_n, c.causal, c.heads) == (50, 16, 32, True, 1)
    assert c.total == c.predicted == 54_984 and c.predicted_closed == 45_000


def test_the_count_beside_standard_attentions_bytes():
    c = _count()  # one head, s = 64, d = 64, fp16, BLOCK_M = 32: 49,408 B
    assert c.beside_standard() == ("addresses outside Q, K, V, O and lse: 0 B; standard attention would move 65.5 kB, "
                                   "1.3× the fused kernel's (2·BLOCK_M/d = 1 once s ≫ d)")
