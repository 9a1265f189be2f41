"""Tests of `perflab.flops.counter`."""

from __future__ import annotations

import torch

from perflab.flops import counter
from perflab.flops.counter import count_flops

aten = torch.ops.aten


def test_gpu_attention_kernels_are_counted_in_their_bshd_layout():
    q = torch.empty(2, 5, 3, 4, device="meta", dtype=torch.float16)  # [b, s_q, h, d]
    k = torch.empty(2, 7, 3, 4, device="meta", dtype=torch.float16)  # [b, s_k, h, d]
    c = count_flops(lambda: aten._flash_attention_forward(q, k, k, None, None, 5, 7, 0.0, False, False))
    # scores and values: 2 products of 2·(b·h)·s_q·s_k·d each; read as [b, h, s, d] it would be 1440
    assert c.by_op == {"_flash_attention_forward": 2 * (2 * 6 * 5 * 7 * 4)}
    n, recomputed = counter._sdpa_backward_flops(aten._flash_attention_backward.default, (None, q, k, k))
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


def test_an_estimate_that_fails_does_not_break_the_run(monkeypatch):
    def broken(func, args, out):
        raise RuntimeError("no estimate")

    monkeypatch.setattr(counter, "_other_flops", broken)
    c = count_flops(lambda: (torch.ones(2, 3) @ torch.ones(3, 4)).relu())
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


def test_fp32_convolutions_are_tagged_tf32_on_a_gpu_where_cudnn_allows_it_by_default(monkeypatch):
    """cuDNN runs fp32 convolutions in TF32 unless `torch.backends.cudnn.allow_tf32` is off (its default
    is on), while fp32 matmuls use TF32 only with `torch.backends.cuda.matmul.allow_tf32` (off)."""
    from perflab.flops.counter import _operand_dtype

    class OnCuda(torch.Tensor):
        @property
        def is_cuda(self):  # a CUDA tensor's dtype question, asked on a CPU
            return True

    x = torch.zeros(2, 3, 4, 4).as_subclass(OnCuda)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    assert _operand_dtype((x,), conv=True) == "tf32" and _operand_dtype((x,)) == "fp32"
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    assert _operand_dtype((x,), conv=True) == "fp32"
    assert _operand_dtype((torch.zeros(2, 3, 4, 4),), conv=True) == "fp32"  # on a CPU: fp32
