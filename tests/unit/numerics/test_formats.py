"""Formats from their bit layout: the layout's figures equal torch.finfo's wherever torch has the dtype."""

import math

import pytest
import torch

from perflab.core.errors import InputError
from perflab.numerics import formats as F

WITH_TORCH = [f for f in F.ALL if f.torch_name is not None]


@pytest.mark.parametrize("fmt", WITH_TORCH, ids=lambda f: f.name)
def test_the_layout_reproduces_torch_finfo(fmt):
    chk = F.finfo_check(fmt)
    assert chk is not None
    for what, (ours, torchs) in chk.items():
        assert ours == torchs, (fmt.name, what, ours, torchs)


@pytest.mark.parametrize("fmt", [F.FP32, F.BF16, F.FP16, F.E4M3, F.E5M2], ids=lambda f: f.name)
def test_the_smallest_subnormal_is_the_last_value_before_zero(fmt):
    dt = fmt.torch_dtype()
    tiny = torch.tensor([fmt.smallest_subnormal], dtype=torch.float64)
    assert tiny.to(dt).double().item() == fmt.smallest_subnormal
    assert (tiny * 0.5).to(dt).double().item() == 0.0  # half of it is a tie, to even: zero
    assert fmt.smallest_subnormal == torch.finfo(dt).smallest_normal * torch.finfo(dt).eps


def test_tf32_from_its_layout():
    assert F.TF32.layout == "1-8-10" and F.TF32.torch_dtype() is None and F.finfo_check(F.TF32) is None
    assert F.TF32.max == (2 - 2**-10) * 2.0**127
    assert F.TF32.eps == 2.0**-10 == F.FP16.eps and F.TF32.smallest_normal == F.FP32.smallest_normal
    assert F.TF32.smallest_subnormal == 2.0**-136


def test_the_fp8_figures_of_the_ocp_specification():
    # OCP OFP8 Table 1 / Micikevicius et al. 2022 Table 1: E4M3 max 448, min normal 2^-6, min subnormal 2^-9;
    # E5M2 max 57344, min normal 2^-14, min subnormal 2^-16
    assert (F.E4M3.max, F.E4M3.smallest_normal, F.E4M3.smallest_subnormal) == (448.0, 2.0**-6, 2.0**-9)
    assert (F.E5M2.max, F.E5M2.smallest_normal, F.E5M2.smallest_subnormal) == (57344.0, 2.0**-14, 2.0**-16)
    assert F.FP16.max == 65504.0 and F.E4M3.max_exponent == 8 and not F.E4M3.has_inf and F.E5M2.has_inf
    assert round(F.E4M3.binades, 1) == 17.8 and round(F.E5M2.binades, 1) == 31.8
    assert F.E4M3.unit_roundoff == 2.0**-4 and F.E5M2.unit_roundoff == 2.0**-3


def test_bf16_keeps_fp32s_exponent_range():
    assert F.BF16.exp_bits == F.FP32.exp_bits and F.BF16.smallest_normal == F.FP32.smallest_normal
    assert math.isclose(F.BF16.max, F.FP32.max, rel_tol=2**-7)


def test_mx_block_costs_eight_and_a_quarter_bits():
    assert F.MXFP8.block == 32 and F.MXFP8.scale is F.E8M0 and F.MXFP8.bits_per_element == 8.25
    assert F.E8M0.max == 2.0**127 and F.E8M0.smallest_normal == 2.0**-127 and F.E8M0.bits == 8


def test_names_parse_and_unknown_ones_say_what_exists():
    assert F.by_name("fp8 e4m3") is F.E4M3 and F.by_name("torch.float8_e5m2") is F.E5M2 and F.by_name("BF16") is F.BF16
    with pytest.raises(InputError, match="use one of"):
        F.by_name("fp4")
    with pytest.raises(InputError):
        F.FloatFormat("x", "x", 1, 3)


def test_the_table_says_which_rows_torch_confirms():
    t = F.FormatTable().table()
    assert list(t["torch.finfo agrees"]) == ["yes", "no torch dtype", "yes", "yes", "yes", "yes"]
    assert t.loc["fp8 E4M3", "largest"] == "448" and t.loc["fp8 E4M3", "smallest subnormal"].startswith("2^-9 = ")


def test_the_layouts_trade_exponent_bits_for_mantissa_bits():
    assert (F.BF16.exp_bits, F.BF16.man_bits) == (8, 7) and F.E4M3.bias == 7
    assert F.FP16.man_bits - F.BF16.man_bits == 3 == F.BF16.exp_bits - F.FP16.exp_bits
    assert F.E4M3.exp_bits + F.E4M3.man_bits == 7 == F.E5M2.exp_bits + F.E5M2.man_bits
    assert F.E4M3.unit_roundoff == F.E5M2.unit_roundoff / 2 and F.E5M2.binades > F.E4M3.binades + 10
