"""A tensor cast into a format and back: TF32 by its bit pattern, saturation, and the shares counted."""

import math

import pytest
import torch

from perflab.numerics import cast
from perflab.numerics.formats import BF16, E4M3, E5M2, FP16, FP32, TF32


def test_rounding_the_mantissa_to_7_bits_is_torchs_bf16_cast():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(10000, generator=g) * 10 ** torch.randint(-30, 30, (10000,), generator=g).float(),
                   torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 3.0e38])])
    assert torch.equal(cast.round_mantissa(x, 7), x.bfloat16().float())


def test_tf32_rounds_to_nearest_even_at_2_to_the_minus_10():
    x = torch.tensor([1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-10, math.inf, math.nan])
    got = cast.round_to(x, TF32)
    assert got[:3].tolist() == [1.0, 1 + 2**-9, 1 + 2**-10]
    assert got[3] == TF32.max and math.isnan(got[4])  # saturates; NaN stays


def test_values_past_the_largest_saturate_and_nan_stays():
    x = torch.tensor([500.0, -1e6, math.inf, math.nan, 1.0])
    got = cast.round_to(x, E4M3)
    assert got[:3].tolist() == [448.0, -448.0, 448.0] and math.isnan(got[3]) and got[4] == 1
    assert cast.round_to(torch.tensor([1e5]), E5M2).item() == 57344.0


def test_a_trip_counts_overflow_flush_and_subnormals():
    x = torch.tensor([1e5, 1e-9, 1e-6, 1.0, 0.0])  # fp16: overflow, flush, subnormal, exact, zero
    t = cast.trip(x, FP16, "made up")
    assert (t.n, t.nonzero) == (5, 4)
    assert t.overflow == pytest.approx(0.25) and t.flushed == pytest.approx(0.25) and t.subnormal == pytest.approx(0.25)
    assert t.lost == pytest.approx(0.5) and 0 < t.rel_error < 2**-11 * 2
    assert cast.trip(x, FP32).rel_error == 0 and cast.trip(x, BF16).flushed == 0


def test_the_relative_error_is_half_a_spacing_at_most():
    g = torch.Generator().manual_seed(1)
    x = torch.rand(4096, generator=g) + 1  # [1, 2): one binade, every value normal
    for fmt in (TF32, BF16, FP16, E4M3, E5M2):
        err = (cast.round_to(x, fmt) - x).abs() / x
        assert float(err.max()) <= fmt.unit_roundoff + 1e-7


def test_trips_make_a_table_and_a_range_table():
    tt = cast.trips({"a": torch.tensor([1e-3, 2.0]), "b": torch.tensor([0.0, 1e-20, 3.0])}, (FP16, E4M3))
    assert tt.get("b", "fp16").flushed == pytest.approx(0.5)
    assert tt.table().shape == (4, 4) and list(tt.range_table().index) == ["a", "b"]
    assert cast.nonzero_range(torch.tensor([0.0, math.inf])) != cast.nonzero_range(torch.tensor([1.0]))
    with pytest.raises(KeyError):
        tt.get("c", "fp16")
