"""Scaled fp8 at every granularity: the edges, MX's power-of-two scale, and what outliers cost."""

import math

import pytest
import torch

from perflab.core.errors import InputError
from perflab.numerics import scaling as S
from perflab.numerics.formats import E4M3, E5M2


def test_a_row_of_small_values_keeps_its_digits_rowwise_but_not_tensorwise():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 64, generator=g)
    x[0] *= 1e4
    x[1] *= 1e-4
    row, tensor = S.scaled_error(x, "row"), S.scaled_error(x, "tensor")
    assert row.imprecise == 0 and tensor.imprecise > 0.4


def test_each_block_gets_its_amax_on_the_formats_largest_value():
    x = torch.randn(256, 256) * torch.logspace(-3, 3, 256).reshape(256, 1)
    for g in ("tensor", "row", "1x128", "128x128"):
        back, scales = S.quantize(x, g)
        br, bc = S.block_shape(g, 256, 256)
        assert scales.shape == (256 // br, 256 // bc)
        blocks = x.reshape(256 // br, br, 256 // bc, bc).abs().amax(dim=(1, 3))
        assert torch.allclose(blocks * scales, torch.full_like(scales, E4M3.max), rtol=1e-6)


def test_mx_scales_are_powers_of_two_and_saturate_above_448():
    x = torch.randn(4, 64)
    x[0, 0] = 500.0  # amax 500: shared exponent 8 - 8 = 0, so 500 lands past 448 and saturates
    back, scales = S.quantize(x, "mx 1x32")
    assert torch.equal(scales, torch.exp2(torch.round(torch.log2(scales))))
    assert back[0, 0].item() == 448.0
    blocks = x.reshape(4, 1, 2, 32).abs().amax(dim=(1, 3))
    assert ((blocks * scales >= 256) & (blocks * scales < 512)).all()


def test_zero_denormal_inf_and_nan_rows():
    x = torch.zeros(4, 32)
    x[1] = 1e-40
    x[2, :] = torch.linspace(-2, 2, 32)
    x[2, 3], x[3, 0], x[3, 1] = math.inf, math.nan, 5.0
    back, scales = S.quantize(x, "row", E5M2)
    assert torch.isfinite(scales).all() and (back[0] == 0).all() and torch.isfinite(back[1]).all()
    assert back[2, 3].item() == pytest.approx(2.0, rel=E5M2.unit_roundoff)  # inf saturates to the row's amax
    assert math.isnan(back[3, 0]) and back[3, 1] == 5.0  # NaN stays; it does not set the scale
    assert S.AMAX_FLOOR == 1e-12


def test_outlier_columns_fall_in_two_of_four_128_blocks():
    assert S.outlier_columns(512) == [64, 65, 320, 321]
    x, mask = S.with_outliers(torch.ones(3, 512), 100)
    assert mask.sum() == 12 and x[mask].eq(100).all() and x[~mask].eq(1).all()


def test_outliers_cost_tensorwise_and_rowwise_scaling_most_and_small_blocks_least():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(256, 512, generator=g)
    t = S.compare(x, "gaussian", outlier_factor=1024)
    share = {r.granularity: r.imprecise for r in t.rows}
    assert share["mx 1x32"] < share["1x128"] < share["row"] <= share["tensor"]
    assert t.error("row").scale_bytes == 4 / 512 and t.error("mx 1x32").scale_bytes == 1 / 32
    assert t.table().shape == (5, 5)
    with pytest.raises(InputError, match="granularity"):
        S.quantize(x, "column")


def test_e5m2_rounds_twice_as_coarsely_as_e4m3_where_both_fit():
    g = torch.Generator().manual_seed(3)
    layers = {"a": torch.randn(128, 64, generator=g), "b": torch.randn(64, 32, generator=g)}
    fc = S.format_choice({"gaussian": layers})
    for gran in ("tensor", "row"):
        ratio = fc.get("gaussian", gran, "e5m2").rel_error / fc.get("gaussian", gran, "e4m3").rel_error
        assert 1.6 < ratio < 2.4
    assert fc.table().shape[0] == 4


def test_span_counts_powers_of_two_from_amax_to_the_first_percentile():
    x = torch.tensor([[1.0] * 99 + [1024.0] * 1])  # 1st percentile 1, amax 1024
    assert S.span(x, "row") == pytest.approx(10.0) and S.span(x, "tensor") == pytest.approx(10.0)
    assert math.isnan(S.span(torch.zeros(2, 4), "row"))
