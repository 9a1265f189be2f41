"""Hand counts against torch's FlopCounterMode (which counts matmuls and convolutions)."""

import pytest
import torch
from torch import nn

from perflab.core.errors import InputError
from perflab.core.roofline import Roofline, matmul_intensity
from perflab.flops.counting import (
    conv2d_flops,
    flops_to_macs,
    linear_backward_flops,
    linear_flops,
    macs_to_flops,
    matmul_flops,
    torch_flop_count,
)


def test_mac_is_two_flops():
    assert macs_to_flops(50) == 100 and flops_to_macs(100) == 50


def test_matmul():
    a, b = torch.randn(7, 5), torch.randn(5, 3)
    total, per_op = torch_flop_count(lambda: a @ b)
    assert total == matmul_flops(7, 3, 5) == 2 * 7 * 3 * 5


def test_linear_forward_backward():
    layer = nn.Linear(48, 24)
    x = torch.randn(10, 48, requires_grad=True)
    fwd, _ = torch_flop_count(lambda: layer(x))
    assert fwd == linear_flops(10, 48, 24)
    both, _ = torch_flop_count(lambda: layer(x).sum().backward())
    assert both - fwd == linear_backward_flops(10, 48, 24, input_requires_grad=True)
    x2 = torch.randn(10, 48)  # data: no gradient wanted, so backward skips dX
    both2, _ = torch_flop_count(lambda: layer(x2).sum().backward())
    assert both2 - fwd == linear_backward_flops(10, 48, 24, input_requires_grad=False)


@pytest.mark.parametrize("stride,padding,groups", [(1, 0, 1), (2, 1, 1), (1, 1, 4)])
def test_conv2d(stride, padding, groups):
    conv = nn.Conv2d(8, 16, 3, stride=stride, padding=padding, groups=groups)
    x = torch.randn(2, 8, 15, 15)
    total, _ = torch_flop_count(lambda: conv(x))
    assert total == conv2d_flops(2, 8, 16, 15, 15, 3, stride=stride, padding=padding, groups=groups)


def test_conv_too_big_kernel():
    with pytest.raises(InputError):
        conv2d_flops(1, 1, 1, 2, 2, 5)


def test_intensity_and_roofline():
    # a square n×n×n fp32 matmul has intensity 2n³ / (3n²·4) = n/6
    assert matmul_intensity(1200, 1200, 1200, 4) == pytest.approx(200)
    roof = Roofline(peak_flops=100e12, bandwidth=2e12)
    assert roof.ridge == 50
    assert roof.attainable(10) == 20e12 and roof.attainable(100) == 100e12
    assert roof.bound(10) == "memory-bound" and roof.bound(100) == "compute-bound"
