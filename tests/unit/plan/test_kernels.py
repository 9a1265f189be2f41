"""Tests of `perflab.plan.kernels`: a planned step runs a CUDA GPU's attention and dropout kernels."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from perflab.plan.kernels import GpuKernels, flash_fits

F = torch.nn.functional


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def _ops(fn) -> list[str]:
    with FakeTensorMode(), GpuKernels(), _Ops() as ops:
        fn()
    return ops.names


def test_flash_runs_where_torchs_cuda_dispatcher_would_run_it():
    """FlashAttention-2: bf16 or fp16, no mask, head size a multiple of 8 up to 256 (sdp_utils.cpp)."""
    bf = torch.empty(1, 8, 16, 64, dtype=torch.bfloat16, device="meta")
    assert flash_fits(bf, bf, None)
    assert not flash_fits(bf.float(), bf.float(), None)
    assert not flash_fits(bf, bf, torch.ones(16, 16, dtype=torch.bool, device="meta"))
    odd = torch.empty(1, 8, 16, 60, dtype=torch.bfloat16, device="meta")
    assert not flash_fits(odd, odd, None)


def test_attention_and_dropout_run_the_cuda_kernels_not_the_cpus():
    def step():
        q = torch.empty(1, 8, 16, 64, dtype=torch.bfloat16)
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
        F.scaled_dot_product_attention(q.float(), q.float(), q.float())
        F.dropout(torch.empty(4, 8, dtype=torch.bfloat16), 0.1, training=True)

    names = _ops(step)
    assert any(n.startswith("_scaled_dot_product_flash_attention.") for n in names), names
    assert any(n.startswith("_scaled_dot_product_efficient_attention") for n in names), names
    assert not any("for_cpu" in n for n in names), names
    assert any(n.startswith("native_dropout") for n in names), names


def test_the_dropout_mask_is_one_byte_per_element_as_cudas():
    """Korthikanti et al. (arXiv:2205.05198, §4.1) book each dropout mask at 1 byte: CUDA's bool mask."""
    with FakeTensorMode(), GpuKernels():
        x = torch.empty(4, 8, dtype=torch.bfloat16)
        _, mask = torch.ops.aten.native_dropout(x, 0.1, True)
        out = F.dropout(x, 0.1, training=True)
    assert mask.dtype == torch.bool and mask.element_size() == 1 and out.shape == x.shape
