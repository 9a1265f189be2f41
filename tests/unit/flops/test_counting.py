"""Tests of `perflab.flops.counting`."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from perflab.core.errors import InputError
from perflab.flops.counting import (
    conv2d_flops,
    count_flops,
    flops_to_macs,
    linear_backward_flops,
    linear_flops,
    macs_to_flops,
    matmul_flops,
    torch_flop_count,
)


def test_matmul_conv_and_unfused_attention():
    a, b = torch.randn(7, 5), torch.randn(5, 3)
    assert count_flops(lambda: a @ b).total == 2 * 7 * 3 * 5
    conv = torch.nn.Conv2d(4, 8, 3, padding=1)
    x = torch.randn(2, 4, 9, 9)
    assert count_flops(conv, x).total == conv2d_flops(2, 4, 8, 9, 9, 3, padding=1)
    # the unfused ("math") attention path is counted through its batched products, with no recompute
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (torch.randn(2, 3, 16, 8, requires_grad=True) for _ in range(3))
    with sdpa_kernel(SDPBackend.MATH):
        c = count_flops(lambda: F.scaled_dot_product_attention(q, k, v).sum().backward())
    assert c.by_phase["forward"] == 4 * 2 * 3 * 16 * 16 * 8
    assert c.by_phase["backward"] == 2 * c.by_phase["forward"]
    assert c.by_phase["recompute"] == 0


def test_fused_attention_counted_with_recompute():
    q, k, v = (torch.randn(2, 3, 16, 8, requires_grad=True) for _ in range(3))
    c = count_flops(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward())
    fwd = 4 * 2 * 3 * 16 * 16 * 8
    assert c.by_phase == {"forward": fwd, "backward": 2 * fwd, "recompute": fwd // 2}


def test_other_flops_estimated_separately():
    x = torch.randn(100, 50)
    c = count_flops(lambda: torch.relu(x) + 1)
    assert c.total == 0 and c.other >= 2 * 100 * 50


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


def test_hand_counts_equal_torchs_counter_for_every_layer():
    """Lesson 01's table: every layer counted by hand agrees with torch's FlopCounterMode."""
    from perflab.flops.counting import hand_vs_counter

    counts = hand_vs_counter("cpu")
    assert counts.all_equal and len(counts.rows) == 5
    assert counts.linear_forward.counted == linear_flops(64, 1024, 4096) == 536_870_912
    assert counts.example_line() == "nn.Linear forward (64 tokens, 1024→4096): 536,870,912 FLOPs = 268,435,456 MACs"
    t = counts.table()
    assert list(t.columns) == ["layer", "shape", "by hand (FLOPs)", "counted by torch (FLOPs)", "equal"]
    assert set(t["equal"]) == {"yes"} and t["by hand (FLOPs)"][0] == "33,554,432"
