"""Tests of `perflab.flops.counter`."""

from __future__ import annotations

import pytest
import torch

from perflab.flops import aten as ops
from perflab.flops import counter
from perflab.flops.counter import count_flops, count_flops_with

aten = torch.ops.aten


def test_gpu_attention_kernels_are_counted_in_their_bshd_layout():
    q = torch.empty(2, 5, 3, 4, device="meta", dtype=torch.float16)  # [b, s_q, h, d]
    k = torch.empty(2, 7, 3, 4, device="meta", dtype=torch.float16)  # [b, s_k, h, d]
    c = count_flops(lambda: aten._flash_attention_forward(q, k, k, None, None, 5, 7, 0.0, False, False))
    # scores and values: 2 products of 2·(b·h)·s_q·s_k·d each; read as [b, h, s, d] it would be 1440
    assert c.by_op == {"_flash_attention_forward": 2 * (2 * 6 * 5 * 7 * 4)}
    n, recomputed = ops.sdpa_backward_flops(aten._flash_attention_backward.default, (None, q, k, k))
    assert (n, recomputed) == (4 * (2 * 6 * 5 * 7 * 4), 2 * 6 * 5 * 7 * 4)


def test_packed_variable_length_attention_uses_torchs_formula():
    q = torch.empty(10, 2, 8, device="meta", dtype=torch.float16)  # two sequences, 4 and 6 tokens, packed
    offsets = torch.tensor([0, 4, 10], dtype=torch.int32)
    c = count_flops(lambda: aten._flash_attention_forward(q, q, q, offsets, offsets, 6, 6, 0.0, False, False))
    assert c.total == c.by_phase["forward"] == 2 * (2 * 2 * 8) * (4 * 4 + 6 * 6)


def test_foreach_ops_are_estimated_by_the_elements_they_write():
    a, b = torch.ones(3), torch.ones(5)
    c = count_flops(lambda: torch._foreach_add([a, b], [a, b]))
    assert (c.total, c.other) == (0, 8)
    c = count_flops(lambda: torch._foreach_mul_([a, b], 2.0))  # in place: returns nothing to count
    assert (c.total, c.other) == (0, 0)


def test_a_product_of_zero_flops_is_not_booked():
    c = count_flops(lambda: torch.ones(0, 3) @ torch.ones(3, 4))
    assert (c.total, c.by_op, c.by_module) == (0, {}, {})


def test_an_estimate_that_fails_does_not_break_the_run():
    def broken(func, args, out):
        raise RuntimeError("no estimate")

    c = count_flops_with(broken, lambda: (torch.ones(2, 3) @ torch.ones(3, 4)).relu())
    assert (c.total, c.other) == (2 * 2 * 3 * 4, 0) and c.result.shape == (2, 4)


def test_backward_work_outside_every_module_is_booked_to_global_only():
    lin = torch.nn.Linear(4, 4, bias=False)
    m1, m2 = torch.ones(2, 3), torch.ones(3, 5)

    def step_with_callback():
        y = lin(torch.ones(3, 4))
        # a callback the engine runs at the end of the backward (as DDP queues one): no autograd node runs it
        y.register_hook(lambda g: torch.autograd.Variable._execution_engine.queue_callback(lambda: m1 @ m2))
        y.sum().backward()

    c = count_flops(step_with_callback)
    assert c.by_module["Linear"]["backward"] == 2 * 3 * 4 * 4  # the weight's gradient
    assert c.by_module["Global"]["backward"] == 2 * 3 * 4 * 4 + 2 * 2 * 3 * 5


def test_a_backward_inside_a_modules_forward_is_counted():
    class InputGradient(torch.nn.Module):  # e.g. a gradient penalty: autograd.grad inside forward
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3, bias=False)

        def forward(self, x):
            (g,) = torch.autograd.grad(self.lin(x).sum(), x)
            return g

    m = InputGradient()
    c = count_flops(m, torch.ones(2, 4, requires_grad=True))
    assert c.by_phase == {"forward": 2 * 2 * 4 * 3, "backward": 2 * 2 * 3 * 4, "recompute": 0}
    assert c.by_module["InputGradient.lin"] == c.by_module["InputGradient"] == c.by_phase
    assert torch.allclose(c.result, torch.ones(2, 3) @ m.lin.weight)


def test_the_table_without_the_global_row():
    lin = torch.nn.Linear(8, 4, bias=False)
    c = count_flops(lambda: lin(torch.ones(3, 8)))
    assert list(c.table(root=False).index) == ["Linear"]
    assert list(c.table().index) == ["Global", "Linear"]


def test_counter_read_outs_agree():
    lin = torch.nn.Linear(8, 4, bias=False)
    c = count_flops(lambda: lin(torch.ones(3, 8)).sum().backward())
    assert c.by_phase["forward"] == 2 * 3 * 8 * 4
    assert c.hardware == c.total and c.model == c.by_phase["forward"] + c.by_phase["backward"]
    d = c.as_dict()
    assert d["total"] == c.total and d["by_phase"]["forward"] == 2 * 3 * 8 * 4 and "other_estimate" in d
    html = c._repr_html_()
    assert html.startswith(f"<p>{c}</p>") and "<table" in html


@pytest.mark.parametrize("cin, cout, groups", [(8, 8, 8), (8, 16, 2), (6, 12, 3)])
def test_grouped_and_depthwise_convolutions_equal_the_analytic_count(cin, cout, groups):
    """Per group, C_in/g input channels meet C_out/g output channels: forward, input gradient and weight
    gradient are each 2·N·C_out·(C_in/g)·k²·out elements (torch's formula counts the weight gradient g× too
    much)."""
    n, hw, k = 2, 10, 3
    x = torch.randn(n, cin, hw, hw, requires_grad=True)
    conv = torch.nn.Conv2d(cin, cout, k, padding=1, groups=groups, bias=False)
    c = count_flops(lambda: conv(x).sum().backward())
    one = 2 * n * cout * (cin // groups) * k * k * hw * hw
    assert c.by_op == {"convolution": one, "convolution_backward": 2 * one}
    assert c.total == 3 * one


def test_a_grouped_transposed_convolution_equals_the_analytic_count():
    n, cin, cout, g, k, hw = 2, 8, 4, 2, 3, 6
    x = torch.randn(n, cin, hw, hw, requires_grad=True)
    conv = torch.nn.ConvTranspose2d(cin, cout, k, groups=g, bias=False)
    c = count_flops(lambda: conv(x).sum().backward())
    one = 2 * n * cin * (cout // g) * k * k * hw * hw  # every input element meets a k×k filter per output channel of its group
    assert c.total == 3 * one


@pytest.mark.parametrize("layers, bidirectional, batch_first", [(1, False, False), (2, True, True)])
def test_an_lstm_on_a_cpu_counts_its_four_gates_products(layers, bidirectional, batch_first):
    t, b, i, h = 5, 3, 8, 16
    lstm = torch.nn.LSTM(i, h, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
    x = torch.randn((b, t, i) if batch_first else (t, b, i), requires_grad=True)
    c = count_flops(lambda: lstm(x)[0].sum().backward())
    dirs = 2 if bidirectional else 1
    fwd = sum(dirs * 2 * t * b * 4 * h * ((i if layer == 0 else h * dirs) + h) for layer in range(layers))
    assert c.by_phase["forward"] == fwd and c.by_phase["backward"] == 2 * fwd
    assert not c.uncounted


def test_a_product_with_no_formula_is_named_uncounted_not_left_at_zero():
    a, b = torch.randn(6, 4), torch.randn(5, 4)
    c = count_flops(lambda: torch.cdist(a, b) @ torch.randn(5, 3))
    assert c.uncounted == {"aten::_cdist_forward": 1}
    assert c.by_op == {"mm": 2 * 6 * 5 * 3}
    assert "not counted (no formula): aten::_cdist_forward ×1" in str(c)


def test_a_custom_op_from_outside_torch_is_named_uncounted_whatever_its_name():
    lib = torch.library.Library("perflab_test_ns", "DEF")  # a custom op, as a library registers one
    lib.define("fused_block(Tensor x, Tensor w) -> Tensor")
    lib.impl("fused_block", lambda x, w: x @ w, "CPU")
    x, w = torch.randn(4, 8), torch.randn(8, 2)
    c = count_flops(lambda: torch.ops.perflab_test_ns.fused_block(x, w))
    assert c.uncounted == {"perflab_test_ns::fused_block": 1}


def test_vector_products_are_counted():
    v, m = torch.randn(5), torch.randn(3, 5)
    c = count_flops(lambda: (m @ v, v @ v))
    assert c.by_op == {"mv": 2 * 15, "dot": 2 * 5}


def test_causal_attention_is_counted_dense_and_named_for_the_halved_convention():
    import torch.nn.functional as F

    b, h, s, d = 1, 2, 16, 8
    q = torch.randn(b, h, s, d, requires_grad=True)
    c = count_flops(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward())
    dense_fwd = 2 * 2 * b * h * s * s * d
    assert c.by_phase["forward"] == dense_fwd and c.causal["forward"] == dense_fwd
    assert c.model_causal_halved == c.model - (dense_fwd + 2 * dense_fwd) // 2
    full = count_flops(lambda: F.scaled_dot_product_attention(q, q, q).sum().backward())
    assert full.model == c.model and full.model_causal_halved == full.model and full.causal["forward"] == 0


def test_causal_attention_is_recognised_by_its_mask_and_on_the_math_path():
    """A causal mask passed as a tensor, and a causal call that SDPA runs as plain batched products (dropout
    on a CPU takes the math path), are halved in that convention too; a padding mask is not causal."""
    import torch.nn.functional as F

    b, h, s, d = 2, 2, 8, 4
    q = torch.randn(b, h, s, d, requires_grad=True)
    tril = torch.ones(s, s, dtype=torch.bool).tril()
    additive = torch.zeros(s, s).masked_fill(~tril, float("-inf"))
    dense_fwd = 2 * 2 * b * h * s * s * d
    for mask, kw in ((tril, {}), (additive, {}), (None, {"is_causal": True, "dropout_p": 0.5})):
        c = count_flops(lambda m=mask, kw=kw: F.scaled_dot_product_attention(q, q, q, attn_mask=m, **kw).sum().backward())
        assert c.causal["forward"] == dense_fwd and c.causal["backward"] == 2 * dense_fwd, (mask, kw)
    padding = tril.clone()
    padding[:, -1] = False
    assert not counter.is_causal_mask(padding, s, s) and counter.is_causal_mask(tril[None, None], s, s)
    assert counter.is_causal_mask(torch.ones(2, 5, dtype=torch.bool).tril(3), 2, 5)  # bottom-right aligned
    c = count_flops(lambda: F.scaled_dot_product_attention(q, q, q, attn_mask=padding).sum().backward())
    assert c.causal == {"forward": 0, "backward": 0, "recompute": 0}
