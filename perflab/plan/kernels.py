"""The GPU's kernels on this machine's fake tensors: a plan for an H100 runs the operators an H100 would.

The planned step runs on CPU fake tensors, where torch picks CPU kernels whose saved tensors differ from
a GPU's. `GpuKernels` (a `TorchFunctionMode`, active while the plan runs the step) sends the calls whose
kernel differs to the CUDA operator instead, whose meta implementation gives the CUDA kernel's outputs:

* `F.scaled_dot_product_attention` → `aten._scaled_dot_product_flash_attention` (FlashAttention-2: bf16 or
  fp16, no explicit mask, head size a multiple of 8 up to 256, key/value heads shared by query heads as
  FA2 does), else `aten._scaled_dot_product_efficient_attention` (any mask, fp32), as torch's CUDA
  dispatcher prefers them (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp). On a CPU, torch runs
  `_scaled_dot_product_flash_attention_for_cpu`, or the math path when dropout is on, which keeps the
  s × s probabilities and their dropout mask; the fused CUDA kernels keep neither (dropout is replayed
  from the RNG state).
* `F.dropout` → `aten.native_dropout`, CUDA's fused dropout: its mask is a bool, 1 byte per element
  (aten/src/ATen/native/cuda/Dropout.cu). On a CPU `F.dropout` draws its mask in the input's dtype
  (`at::native::dropout` → `_dropout_impl`: `empty_like(input).bernoulli_()`), 2 bytes in bf16: the
  planned activations would be Korthikanti et al.'s 36sbh + 6as²b per layer instead of their 34sbh +
  5as²b (arXiv:2205.05198, §4.1, which books each dropout mask at 1 byte).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

aten = torch.ops.aten
F = torch.nn.functional

_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_DROPOUT_ARGS = ("input", "p", "training", "inplace")


def _bind(names: tuple[str, ...], args: tuple, kwargs: dict) -> dict[str, Any]:
    out = dict(zip(names, args, strict=False))
    out.update(kwargs)
    return out


def flash_fits(q: torch.Tensor, k: torch.Tensor, mask: Any) -> bool:
    """Whether torch's CUDA dispatcher would run FlashAttention-2 on these operands (module docstring)."""
    d = int(q.shape[-1])
    return (mask is None and q.dtype in (torch.bfloat16, torch.float16) and q.dim() == 4 and d % 8 == 0
            and d <= 256 and k.shape[-1] == d and int(q.shape[1]) % max(int(k.shape[1]), 1) == 0)


def sdpa_on_gpu(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """`F.scaled_dot_product_attention` as a CUDA GPU runs it: the flash kernel, else the memory-efficient
    one (key and value heads repeated to the query's, as torch does for it). Under autocast the operands
    are cast to its dtype first, as CUDA's autocast casts attention's (a CPU's does not)."""
    if torch.is_autocast_enabled("cpu") and query.is_floating_point():
        dt = torch.get_autocast_dtype("cpu")
        query, key, value = (x.to(dt) for x in (query, key, value))
    if flash_fits(query, key, attn_mask):
        return aten._scaled_dot_product_flash_attention(query, key, value, float(dropout_p), bool(is_causal), False,
                                                        scale=scale)[0]
    if query.dim() == 4 and key.shape[1] != query.shape[1]:
        rep = int(query.shape[1]) // max(int(key.shape[1]), 1)
        key, value = key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1)
    bias = attn_mask
    if isinstance(bias, torch.Tensor) and bias.dtype == torch.bool:
        bias = torch.zeros(bias.shape, dtype=query.dtype).masked_fill(~bias, float("-inf"))
    if isinstance(bias, torch.Tensor) and query.dim() == 4:
        bias = bias.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    causal = bool(is_causal) and bias is None
    return aten._scaled_dot_product_efficient_attention(query, key, value, bias, True, float(dropout_p), causal,
                                                         scale=scale)[0]


class GpuKernels(TorchFunctionMode):
    """Attention and dropout as a CUDA GPU runs them (module docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            a = _bind(_SDPA_ARGS, args, kwargs)
            if isinstance(a.get("query"), torch.Tensor) and a["query"].dim() == 4:
                return sdpa_on_gpu(**a)
        elif func is F.dropout:
            a = _bind(_DROPOUT_ARGS, args, kwargs)
            x, p = a.get("input"), float(a.get("p", 0.5))
            if isinstance(x, torch.Tensor) and a.get("training", True) and 0 < p < 1 and not a.get("inplace", False):
                return aten.native_dropout(x, p, True)[0]
        return func(*args, **kwargs)


def run_on_gpu_kernels(module: torch.nn.Module) -> None:
    """Make `module`'s forward enter `GpuKernels` itself. A function mode does not reach the autograd
    engine, where activation checkpointing runs a block's forward again: wrapping each block's forward
    makes the recomputed forward run the same kernels as the first."""
    import functools

    forward = module.forward

    @functools.wraps(forward)
    def on_gpu(*args, **kwargs):
        with GpuKernels():
            return forward(*args, **kwargs)

    module.forward = on_gpu  # pyright: ignore[reportAttributeAccessIssue]
