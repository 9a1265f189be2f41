"""Tests of `perflab.core.roofline`."""

import pytest

from perflab.core import roofline
from perflab.core.roofline import Roofline, matmul_intensity


def test_roofline_refuses_an_unknown_elementwise_op():
    with pytest.raises(ValueError, match="op must be 'add' or 'mul'"):
        roofline.elementwise_flops_and_bytes(1024, 4, "div")


def test_intensity_and_roofline():
    # a square n×n×n fp32 matmul has intensity 2n³ / (3n²·4) = n/6
    assert matmul_intensity(1200, 1200, 1200, 4) == pytest.approx(200)
    roof = Roofline(peak_flops=100e12, bandwidth=2e12)
    assert roof.ridge == 50
    assert roof.attainable(10) == 20e12 and roof.attainable(100) == 100e12
    assert roof.bound(10) == "memory-bound" and roof.bound(100) == "compute-bound"
