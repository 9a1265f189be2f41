"""Tests of `perflab.flops.aten`: one aten call's FLOPs, as the counter books them."""

from __future__ import annotations

import torch

from perflab.flops import aten as ops
from perflab.flops.counter import count_flops


def test_the_cudnn_rnn_formula_counts_every_weight_matrix_of_every_layer():
    t, b, i, h = 7, 2, 4, 6
    meta = {"device": "meta"}
    w = [torch.empty(3 * h, i, **meta), torch.empty(3 * h, h, **meta), torch.empty(3 * h, **meta),
         torch.empty(3 * h, **meta)]  # one GRU layer: W_ih, W_hh and two biases
    x = torch.empty(t, b, i, **meta)
    fwd = 2 * t * b * 3 * h * (i + h)
    assert ops.rnn_flops(torch.ops.aten._cudnn_rnn.default, [x, w]) == fwd
    bwd_args = [x, w, *[None] * 19, [True, False, False, True]]
    assert ops.rnn_flops(torch.ops.aten._cudnn_rnn_backward.default, bwd_args) == 2 * fwd
    bwd_args[21] = [True, False, False, False]
    assert ops.rnn_flops(torch.ops.aten._cudnn_rnn_backward.default, bwd_args) == fwd


def test_op_flops_books_one_call_as_the_counter_does():
    import torch

    from perflab.flops.aten import op_flops

    a, b = torch.randn(8, 16), torch.randn(16, 4)
    aten = torch.ops.aten
    assert op_flops(aten.mm.default, (a, b), {}, a @ b) == 2 * 8 * 16 * 4
    q = k = v = torch.randn(2, 3, 5, 4)
    out = aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v)
    # scores Q·Kᵀ and P·V: 2·(b·h)·s·s·d each
    assert op_flops(aten._scaled_dot_product_flash_attention_for_cpu.default, (q, k, v), {}, out) == 2 * 2 * 6 * 5 * 5 * 4
    assert op_flops(aten.relu.default, (a,), {}, a.relu()) == 0


def test_op_flops_books_grouped_convolutions_and_rnns_as_the_counter_does():
    """One rule for a call's FLOPs: the per-call figure the planner uses equals what the counter books."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from perflab.flops.aten import op_flops

    class Sum(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            Sum.total += op_flops(func, args, kwargs or {}, out)
            return out

    conv = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
    lstm = torch.nn.LSTM(4, 6)
    x, seq = torch.randn(2, 8, 6, 6, requires_grad=True), torch.randn(5, 2, 4, requires_grad=True)
    for step in (lambda: conv(x).sum().backward(), lambda: lstm(seq)[0].sum().backward()):
        Sum.total = 0
        with Sum():
            step()
        assert Sum.total == count_flops(step).total > 0


def test_fp32_convolutions_are_tagged_tf32_on_a_gpu_where_cudnn_allows_it_by_default(monkeypatch):
    """cuDNN runs fp32 convolutions in TF32 unless `torch.backends.cudnn.allow_tf32` is off (its default
    is on), while fp32 matmuls use TF32 only with `torch.backends.cuda.matmul.allow_tf32` (off)."""
    class OnCuda(torch.Tensor):
        @property
        def is_cuda(self):  # a CUDA tensor's dtype question, asked on a CPU
            return True

    x = torch.zeros(2, 3, 4, 4).as_subclass(OnCuda)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    assert ops.operand_dtype((x,), conv=True) == "tf32" and ops.operand_dtype((x,)) == "fp32"
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    assert ops.operand_dtype((x,), conv=True) == "fp32"
    assert ops.operand_dtype((torch.zeros(2, 3, 4, 4),), conv=True) == "fp32"  # on a CPU: fp32
