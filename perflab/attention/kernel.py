"""Lesson 13's FlashAttention kernel launched: its shapes and tiles checked, its inputs, the launch
itself (Triton's interpreter on a CPU, natively on a CUDA GPU) and the textbook eager path it is
held against. `perflab.attention.flash` checks it against SDPA and times it; `perflab.attention.counting`
counts its loads and stores; both re-use what is here (and `flash` re-exports it).

The kernel is `perflab.gemm.triton_kernels.flash_attention_fwd_kernel` (its docstring explains the
online softmax).
"""

from __future__ import annotations

import math
from typing import Any

from perflab.core.errors import InputError, UnsupportedError
from perflab.gemm import triton_matmul as tm

HEAD_DIMS = (64, 128)
BLOCKS = (16, 32, 64, 128, 256, 512)
DEFAULT_BLOCKS = (64, 64)
LOG2E = 1.4426950408889634  # exp(x) = exp2(x·log2 e): the kernel works in base 2
INTERPRETER_MAX_ELEMENTS = 2 * 1024 * 64 * 8  # b·a·s·d: beyond this the interpreter takes minutes here


def check_blocks(block_m: int, block_n: int) -> tuple[int, int]:
    for name, v in (("block_m", block_m), ("block_n", block_n)):
        if not isinstance(v, int) or isinstance(v, bool) or v not in BLOCKS:
            raise InputError(f"{name}={v!r}: use a power of two from 16 to 512 (tl.dot needs at least 16 rows)")
    return block_m, block_n


def check_head_dim(d: int) -> int:
    if d not in HEAD_DIMS:
        raise InputError(f"head_dim={d!r}: the course's kernel is built for head dimensions {HEAD_DIMS[0]} and "
                         f"{HEAD_DIMS[1]} (tl.arange needs a power of two; pad other sizes up)")
    return d


# ---------------------------------------------------------------- run

def _kernel(interpret: bool):
    tm.import_triton(interpret)  # before triton_kernels imports triton.language in whatever mode
    from perflab.gemm.triton_kernels import flash_attention_fwd_kernel

    return tm.jitted(flash_attention_fwd_kernel, interpret)


def attention(q, k, v, *, causal: bool = False, block_m: int = 64, block_n: int = 64, sm_scale: float | None = None,
              interpret: bool | None = None, return_lse: bool = False, num_warps: int = 4, num_stages: int = 2):
    """softmax(Q·Kᵀ·scale [+ causal mask])·V with the Triton kernel; Q, K, V are [b, a, s, d].

    scale defaults to 1/√d. Returns O (Q's dtype), and with `return_lse` also the fp32 log-sum-exp
    [b, a, s] of every row's scaled scores. On CPU tensors it runs in the interpreter."""
    import torch

    tm.require()
    if q.ndim != 4 or k.shape != q.shape or v.shape != q.shape:
        raise InputError(f"q, k, v must all be [batch, heads, seq, head_dim] of one shape (got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)})")
    if not (q.dtype == k.dtype == v.dtype):
        raise InputError(f"q, k, v have dtypes {q.dtype}, {k.dtype}, {v.dtype}: give all three the same")
    tm.dtype_name(str(q.dtype))
    b, a, s, d = q.shape
    check_head_dim(int(d))
    check_blocks(block_m, block_n)
    if interpret is None:
        interpret = q.device.type == "cpu"
    if not interpret and q.device.type != "cuda":
        raise UnsupportedError(f"native Triton needs CUDA tensors (got {q.device.type}); run with interpret=True")
    q, k, v = (t.contiguous() for t in (q, k, v))
    o = torch.empty_like(q)
    lse = torch.empty((b, a, s), dtype=torch.float32, device=q.device)
    scale = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(d)
    grid = (tm.triton_cdiv(s, block_m), b * a)
    kw: dict[str, Any] = dict(HEAD_DIM=int(d), BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=bool(causal),
                              WIDEN=bool(interpret and q.dtype == torch.bfloat16))
    if not interpret:
        kw.update(num_warps=num_warps, num_stages=num_stages)
    _kernel(bool(interpret))[grid](q, k, v, o, lse, s, a, scale * LOG2E, q.stride(0), q.stride(1), q.stride(2),
                                   k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
                                   o.stride(0), o.stride(1), o.stride(2), **kw)
    return (o, lse) if return_lse else o


def eager_attention(q, k, v, *, causal: bool = False, sm_scale: float | None = None):
    """The textbook path: S = Q·Kᵀ·scale, mask, P = softmax(S), O = P·V, each step a tensor in memory."""
    import torch

    scale = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        n = q.shape[-2]
        keep = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return p @ v


def tolerance(dtype: str) -> float:
    """Absolute tolerance of O against SDPA in the same dtype, inputs N(0, 1): 8 units of the dtype's
    rounding (2^-11 fp16, 2^-8 bf16; 1e-5 for fp32). Both round P·V's result once to the dtype; the
    kernel also rounds P to the dtype before P·V (a Tensor Core takes fp16/bf16 operands), SDPA's math
    may not, which is the part the margin covers. |O| ≤ max|V| ≈ 4, so 8 units is ~1-2 ulps of O."""
    return {"fp16": 8 * 2.0 ** -11, "bf16": 8 * 2.0 ** -8, "fp32": 1e-5}[tm.dtype_name(dtype)]


def inputs(b: int, a: int, s: int, d: int, dtype: str, seed: int, device: str):
    """Q, K and V of shape [b, a, s, d], N(0, 1) from `seed`, in `dtype` on `device`."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    dt = tm.torch_dtype(dtype)
    return tuple(torch.randn(b, a, s, d, generator=g).to(dt).to(device) for _ in range(3))


def tm_itemsize(dtype: str) -> int:
    return {"fp32": 4, "fp16": 2, "bf16": 2}[tm.dtype_name(dtype)]
