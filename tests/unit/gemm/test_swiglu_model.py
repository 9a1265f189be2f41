"""Tests of `perflab.gemm.swiglu_model`: lesson 05's tables before measuring."""

from __future__ import annotations

from perflab.course.reference import published
from perflab.gemm import shapes, swiglu_model


def test_released_widths_read_against_eight_thirds():
    t = swiglu_model.released_widths(published("swiglu_widths"))
    assert list(t.columns) == ["model", "h", "d_ff", "d_ff / h", "8/3·h", "divisible by", "parameters vs 8/3·h (%)"]
    r = t.set_index("model")
    assert r.loc["Llama-2-7B", "d_ff / h"] == "2.688" and r.loc["Llama-2-7B", "divisible by"] == 256
    assert r.loc["Llama-2-70B", "parameters vs 8/3·h (%)"] == "+31.2" and r.loc["Llama-2-7B", "8/3·h"] == "10,922.7"


def test_the_baseline_alignment_table_gives_utilization_in_percent():
    t = swiglu_model.baseline_alignment([4096, 5120], shapes.model_target(None, "h100-sxm"))
    assert t.loc[5120, "⌊8/3·h⌋"] == 13653 and t.loc[5120, "divisible by"] == 1  # lesson 05: odd for h = 5120
    row = t.loc[4096]
    assert row["⌊8/3·h⌋"] == 10922 and row["divisible by"] == 2 and row["next multiple of 64"] == 10944
    assert float(row["model utilization, fwd GEMM (%)"]) <= float(row["… at the multiple of 64 (%)"]) <= 100


def test_the_published_search_keeps_its_figures_and_computes_the_rest():
    t = swiglu_model.published_table(published("swiglu_h100_h4096"))
    assert list(t.columns) == ["d_ff", "TFLOP/s (published)", "vs ⌊8/3·h⌋ (×)", "parameters vs 8/3·h", "MLP parameters"]
    first = t.iloc[0]
    assert first["d_ff"] == 10922 and first["vs ⌊8/3·h⌋ (×)"] == "1.00" and first["parameters vs 8/3·h"] == "-8,192"


def test_the_planning_view_shows_the_best_rated_candidates_and_the_baseline():
    table = swiglu_model.candidate_table(4096, 100, 4, target=shapes.model_target(None, "h100-sxm"))
    view = swiglu_model.candidate_view(table, top=5)
    assert len(view) == 5 and view["d_ff"].iloc[-1] == "10922 (⌊8/3·h⌋)"
    assert list(view.columns) == ["d_ff", "d_ff / h", "parameters vs 8/3·h (%)", "divisible by",
                                  "Tensor Core rule (bf16)", "model utilization, fwd GEMM (%)"]
    utils = [float(u) for u in view["model utilization, fwd GEMM (%)"].iloc[:-1]]
    assert utils == sorted(utils, reverse=True)
