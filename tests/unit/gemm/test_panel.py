"""Lesson 04's panels driven from outside the lesson: the wave panel's what-if, the tile panel's
refusals and sliders, its units, and the fit table a learner reads.
"""

from __future__ import annotations

import functools

import pytest

from perflab.core.device import describe
from perflab.core.errors import InputError
from perflab.course.widgets import Panel, choice, int_slider, log2_slider, toggle
from perflab.gemm import (
    compiled,
    panel,
    plots,
    shapes,
)
from perflab.gemm import panel as gemm_panel
from perflab.gemm import triton_matmul as tm

from .helpers import needs_triton, tile


@needs_triton
def test_tile_panel_refuses_what_cannot_run_or_has_no_limits(monkeypatch, tmp_path):
    monkeypatch.setattr(compiled, "compile_tile", lambda *a, **kw: tile(tmp_path, cannot_run="too many registers"))
    with pytest.raises(InputError, match="^too many registers$"):
        panel.tile_config(target="sm_90")
    monkeypatch.setattr(compiled, "compile_tile", lambda *a, **kw: tile(tmp_path, target="sm_75", with_limits=False))
    with pytest.raises(InputError, match="^no per-SM limits for sm_75 in perflab's table: choose sm_80 or sm_90$"):
        panel.tile_config(target="sm_75")


def test_the_wave_panel_answers_one_column_past_the_full_wave_with_and_without_more_sms():
    info = describe("cpu")
    ex = {"m": 1536, "k": 4096, "tile": (256, 128), "sms": 108}
    target = shapes.model_target(info, "a100-sxm-80gb")
    full = shapes.full_wave_sizes("n", {"m": ex["m"], "k": ex["k"]}, sms=target.sms, tile=ex["tile"], limit=3 * 1536)
    panel = Panel(functools.partial(plots.wave_panel, info=info), m=int_slider("m", ex["m"], 64, 16384, 64),
                  n=int_slider("n", full[0], 16, 16384, 16), k=int_slider("k", ex["k"], 64, 16384, 64),
                  dtype=choice("dtype", ["bf16", "fp32"]), tile=choice("tile", ["256x128"]),
                  gpu=choice("GPU", ["a100-sxm-80gb"]), more_sms=toggle("4 more SMs"))
    for more in (False, True):
        panel.set(n=full[0] + ex["tile"][1], more_sms=more)
        assert panel.last_error is None, panel.last_error
        assert ("+4 what-if" in panel.last[1].loc["SMs (wave size)", "value"]) is more


def test_the_block_sliders_offer_only_values_the_tile_panel_accepts():
    offered = log2_slider("BLOCK_M", 128, *gemm_panel.BLOCK_MN).options
    assert list(offered) == [16, 32, 64, 128, 256]
    for v in offered:
        compiled.check_config(tm.TileConfig(v, 64, 32, 4, 2), "fp16", "sm_90")  # raises on a refused value


@pytest.mark.skipif(not tm.available(), reason="Triton is not installed")
def test_refusals_are_one_line_and_speak_the_tables_units():
    pow2 = gemm_panel.refusal(block_m=96)
    assert pow2 and "not a power of two" in pow2 and "\n" not in pow2
    big = gemm_panel.refusal(block_m=256, block_n=256, block_k=128, num_stages=4)
    assert big and "KiB of shared memory" in big and "kB" not in big


@pytest.mark.skipif(not tm.available(), reason="Triton is not installed")
def test_the_tile_table_gives_shared_memory_in_kib_like_the_refusal():
    _fig, table, _text = gemm_panel.tile_config(block_m=64, block_n=64, block_k=32, num_stages=2)
    row = table.loc["shared memory per block"]
    assert row["value"].endswith("KiB") and "227.0 KiB" in row["from"]


def test_the_fit_table_merges_identical_fits_and_never_shows_a_negative_fixed_time():
    values = list(range(128, 1025, 64))
    fixed = {"m": 512, "k": 512}
    w = [shapes.wave_count(shapes.tile_count(512, n, 128, 128), 4, 1) for n in values]
    times = [1e-3 * x - 0.4e-3 for x in w]  # a line with a negative intercept
    fit = shapes.fit_tile(values, times, "n", fixed, sms=4)
    assert (fit.table["overhead_s"] >= 0).all()
    df = fit.frame(top=5, unit="thread")
    assert list(df.columns) == ["tile × blocks per thread", "time per wave", "fixed time", "RMS error (relative)",
                                "R²", "steps in the range"]
    assert not df.duplicated(subset=list(df.columns[1:])).any() and len(df) <= 5
    assert not any(s.startswith("-") for s in df["fixed time"])


def test_a_share_of_the_ceiling_is_never_above_100_percent():
    from perflab.core.ceiling import CeilingRecord
    from perflab.core.quietness import UNKNOWN
    from perflab.gemm.panel import ceiling_share

    rec = CeilingRecord(600.0, "bf16", (8192, 8192, 8192), "mean", "a search's best", "2026-11-26T08:00:00", UNKNOWN,
                        "2.9", "NVIDIA H100", kind="search", version=1)
    assert ceiling_share([420.0, 540.0], rec) == "; 70 % and 90 % of the measured ceiling 600 TFLOP/s (2026-11-26)"
    over = ceiling_share([420.0, 660.0], rec)
    assert "%" not in over and "ceiling is suspect" in over and "2026-11-26" in over
    assert ceiling_share([1.0], None).startswith("; no measured ceiling yet")
