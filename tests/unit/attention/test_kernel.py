"""Tests of `perflab.attention.kernel`: lesson 13's kernel launched, its inputs and the eager path."""

import pytest
import torch
import torch.nn.functional as F

from perflab.attention import flash, kernel
from perflab.core.errors import InputError
from tests.unit.gemm.helpers import needs_triton


def test_flash_re_exports_the_kernels_names():
    for name in ("attention", "eager_attention", "tolerance", "check_blocks", "check_head_dim", "tm_itemsize",
                 "HEAD_DIMS", "BLOCKS", "LOG2E", "INTERPRETER_MAX_ELEMENTS"):
        assert getattr(flash, name) is getattr(kernel, name)


def test_the_shapes_the_kernel_takes_and_the_ones_it_refuses():
    assert kernel.check_blocks(16, 512) == (16, 512) and kernel.check_head_dim(128) == 128
    with pytest.raises(InputError, match="^block_n=48: use a power of two from 16 to 512"):
        kernel.check_blocks(64, 48)
    with pytest.raises(InputError, match="^head_dim=96: the course's kernel is built for head dimensions 64 and 128"):
        kernel.check_head_dim(96)
    assert [kernel.tm_itemsize(d) for d in ("fp32", "fp16", "bf16")] == [4, 2, 2]


@pytest.mark.parametrize("causal", [False, True])
def test_the_eager_path_is_attention(causal):
    q, k, v = kernel.inputs(1, 2, 24, 64, "fp32", seed=3, device="cpu")
    assert torch.equal(q, kernel.inputs(1, 2, 24, 64, "fp32", seed=3, device="cpu")[0])  # the seed fixes them
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert torch.allclose(kernel.eager_attention(q, k, v, causal=causal), ref, atol=1e-5)


@needs_triton
def test_the_kernel_in_the_interpreter_is_the_eager_path_within_fp16s_tolerance():
    from perflab.gemm import triton_matmul as tm

    if torch.cuda.is_available() or tm.import_triton(True) is False:
        pytest.skip("Triton runs natively in this process (flash.check runs the kernel in a child interpreter instead)")
    q, k, v = kernel.inputs(1, 1, 40, 64, "fp16", seed=1, device="cpu")
    o, lse = kernel.attention(q, k, v, causal=True, block_m=16, block_n=16, return_lse=True)
    assert o.dtype == torch.float16 and lse.shape == (1, 1, 40) and lse.dtype == torch.float32
    ref = kernel.eager_attention(q.float(), k.float(), v.float(), causal=True)
    assert (o.float() - ref).abs().max() <= kernel.tolerance("fp16")
    with pytest.raises(InputError, match="^q, k, v must all be"):
        kernel.attention(q, k[:, :, :20], v)
