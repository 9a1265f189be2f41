"""Lesson 13's FlashAttention forward in Triton: run, checked, its bytes counted, timed.

    >>> from perflab.attention import flash
    >>> o = flash.attention(q, k, v, causal=True)            # [b, a, s, d] fp16/bf16/fp32 tensors
    >>> flash.check(1, 2, 77, 64, "fp16", causal=True)       # FlashCheck against torch's SDPA, in the interpreter here
    >>> flash.count_bytes(1, 2, 200, 64, block_m=64, block_n=32)   # ByteCount: every tl.load/tl.store, masks respected

What the compiler makes of it (registers, spills, shared memory, occupancy) is `perflab.attention.compiled`.

The kernel is `perflab.gemm.triton_kernels.flash_attention_fwd_kernel` (its docstring explains the
online softmax). On a CPU it runs in Triton's interpreter (`triton_matmul.jitted`), on a CUDA GPU
natively. Formulas for its bytes and FLOPs are in `perflab.attention.formulas`.

**Counting bytes.** Triton's interpreter executes every `tl.load`/`tl.store` through one object,
`triton.runtime.interpreter.interpreter_builder` (`create_masked_load`/`create_masked_store`;
unmasked ones go through them too with an all-true mask). `count_bytes` wraps those two methods
for the duration of one launch and adds, per call, the number of elements whose mask is true times
the element size, split by which tensor the addresses fall in. That is what the compiled kernel
would ask HBM for if nothing were cached (a GPU's L2 can serve re-reads of K and V: the count is
the traffic the algorithm requests, the formula's quantity). The `triton-viz` package (PyPI,
version 3.0) records loads and stores the same way, but does not import with the Triton 3.9.0
perflab pins (its patch module reads `InterpreterBuilder.create_make_block_ptr`, which 3.9 no
longer has: AttributeError, checked on 2026-11-25), so perflab keeps this hook of its own.

**The eager path.** `count_eager_bytes` runs the textbook softmax(Q·Kᵀ/√d)·V in PyTorch under a
TorchDispatchMode and adds, for every operator, the bytes of the tensors it reads and writes: the
s×s scores and probabilities appear as the s² term.

**The backward** (`attention_backward`) is a PyTorch recompute from Q, K, V, O, dO and the
log-sum-exp the kernel stored: P = exp(Q·Kᵀ·scale − lse) again, then dV, dP, dS, dQ, dK. Five
matmuls: its FLOPs are 2.5× the forward's (`attention_io.backward_flops`).

On a GPU `time_paths` times the kernel against SDPA's flash backend and eager attention. That path
has never run on a GPU in this project's tests (there is none here): it is written to the same
launch as the interpreter path, which the tests check.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

from perflab.attention import formulas as io
from perflab.core.errors import InputError, UnsupportedError
from perflab.core.jsonable import JSON
from perflab.core.validate import positive_int
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


def _inputs(b: int, a: int, s: int, d: int, dtype: str, seed: int, device: str):
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    dt = tm.torch_dtype(dtype)
    return tuple(torch.randn(b, a, s, d, generator=g).to(dt).to(device) for _ in range(3))


@dataclass
class FlashCheck:
    """The kernel's O (and log-sum-exp) against torch's SDPA on N(0, 1) inputs of one shape."""

    batch: int
    heads: int
    seq: int
    head_dim: int
    dtype: str
    causal: bool
    block_m: int
    block_n: int
    device: str
    interpreter: bool  # run by Triton's interpreter (a CPU), not compiled
    max_abs_err: float  # max |O − O_sdpa|
    lse_max_abs_err: float  # against a float64 log-sum-exp
    tolerance: float  # of O (`tolerance`); the log-sum-exp's is 1e-3
    passed: bool


def check(b: int, a: int, s: int, d: int, dtype: str = "fp16", *, causal: bool = False, block_m: int = 64,
          block_n: int = 64, seed: int = 0, device: str | None = None) -> FlashCheck:
    """Run the kernel on N(0, 1) inputs and compare O with torch's scaled_dot_product_attention:
    max_abs_err, the tolerance, whether it passed. On a CPU through the interpreter (in a child
    process when this one imported Triton natively)."""
    import torch
    import torch.nn.functional as F

    tm.require()
    b, a, s, d = (positive_int(n, v) for n, v in (("batch", b), ("heads", a), ("seq", s), ("head_dim", d)))
    check_head_dim(d)
    check_blocks(block_m, block_n)
    name = tm.dtype_name(dtype)
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if torch.device(dev).type == "cpu":
        if b * a * s * d > INTERPRETER_MAX_ELEMENTS:
            raise InputError(f"b·a·s·d = {b * a * s * d:,} is too large for the interpreter here (it runs every program "
                             f"as numpy): keep it ≤ {INTERPRETER_MAX_ELEMENTS:,}, e.g. batch 1, heads 2, seq 512")
        if tm.import_triton(True) is False:
            return FlashCheck(**tm.run_in_interpreter_process(__name__, "check", dict(
                b=b, a=a, s=s, d=d, dtype=name, causal=causal, block_m=block_m, block_n=block_n, seed=seed, device="cpu")))
    q, k, v = _inputs(b, a, s, d, name, seed, dev)
    o, lse = attention(q, k, v, causal=causal, block_m=block_m, block_n=block_n, return_lse=True)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    err = float((o.float() - ref.float()).abs().max())
    # the log-sum-exp against float64 (what a backward reads)
    sc = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(d)
    if causal:
        sc = sc.masked_fill(~torch.ones(s, s, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    lse_err = float((lse.double() - torch.logsumexp(sc, dim=-1)).abs().max())
    tol = tolerance(name)
    if name == "fp32" and torch.device(dev).type == "cuda":  # tl.dot and SDPA take fp32 through tf32 on a GPU
        tol = tolerance("fp16")
    return FlashCheck(b, a, s, d, name, bool(causal), block_m, block_n, dev, torch.device(dev).type == "cpu", err,
                      lse_err, tol, bool(err <= tol and lse_err <= 1e-3))


# ---------------------------------------------------------------- counting bytes in the interpreter

@contextlib.contextmanager
def counting_loads_and_stores(tensors: dict[str, Any]):
    """Within the block, count the bytes every interpreted tl.load/tl.store moves, masks respected.

    Yields a dict {name: {'read': bytes, 'written': bytes}} for the named tensors (by address range)
    plus 'other' for addresses outside them. Needs this process's Triton in interpreter mode."""
    import numpy as np

    if tm.import_triton(True) is False:
        raise UnsupportedError("Triton runs natively in this process: counting loads needs the interpreter")
    from triton.runtime import interpreter as ti

    builder = ti.interpreter_builder
    ranges = [(n, int(t.data_ptr()), int(t.data_ptr()) + t.numel() * t.element_size()) for n, t in tensors.items()]
    counts: dict[str, dict[str, int]] = {n: {"read": 0, "written": 0} for n in [*tensors, "other"]}

    def add(ptrs, mask, kind: str) -> None:
        addr = np.asarray(ptrs.data).reshape(-1).astype(np.int64)
        m = np.broadcast_to(np.asarray(mask.data, dtype=bool), np.asarray(ptrs.data).shape).reshape(-1)
        item = ptrs.get_element_ty().primitive_bitwidth // 8
        live = addr[m]
        seen = np.zeros(live.shape, dtype=bool)
        for name, lo, hi in ranges:
            inside = (live >= lo) & (live < hi)
            counts[name][kind] += int(inside.sum()) * item
            seen |= inside
        counts["other"][kind] += int((~seen).sum()) * item

    orig_load = builder.create_masked_load
    orig_store = builder.create_masked_store

    def load(ptrs, mask, other, cache_policy, is_volatile):
        add(ptrs, mask, "read")
        return orig_load(ptrs, mask, other, cache_policy, is_volatile)

    def store(ptrs, value, mask, cache_policy):
        add(ptrs, mask, "written")
        return orig_store(ptrs, value, mask, cache_policy)

    builder.create_masked_load = load  # an instance attribute: shadows the class's method, also for create_load
    builder.create_masked_store = store
    try:
        yield counts
    finally:
        del builder.create_masked_load
        del builder.create_masked_store


@dataclass
class ByteCount:
    """The bytes one launch's loads and stores moved (counted in the interpreter), beside the formula's."""

    q: int  # per tensor: bytes read + written
    k: int
    v: int
    o: int
    lse: int
    read: int
    written: int
    other: int  # addresses outside the five tensors: must be 0
    total: int  # read + written
    predicted: int  # the formula, tile by tile (`formulas.flash_bytes`)
    predicted_closed: int  # its closed form (`formulas.flash_bytes_closed`)
    batch: int
    heads: int
    seq: int
    head_dim: int
    dtype: str
    causal: bool
    block_m: int
    block_n: int


def count_bytes(b: int, a: int, s: int, d: int, dtype: str = "fp16", *, causal: bool = False, block_m: int = 64,
                block_n: int = 64, seed: int = 0) -> ByteCount:
    """Run the kernel once in the interpreter and count the bytes of every load and store, per tensor,
    with the formula's figures beside them."""
    b, a, s, d = (positive_int(n, v) for n, v in (("batch", b), ("heads", a), ("seq", s), ("head_dim", d)))
    check_head_dim(d)
    check_blocks(block_m, block_n)
    name = tm.dtype_name(dtype)
    if b * a * s * d > INTERPRETER_MAX_ELEMENTS:
        raise InputError(f"b·a·s·d = {b * a * s * d:,} is too large to count in the interpreter here: keep it ≤ "
                         f"{INTERPRETER_MAX_ELEMENTS:,} (the bytes scale by formula; count small, predict large)")
    if tm.import_triton(True) is False:
        return ByteCount(**tm.run_in_interpreter_process(__name__, "count_bytes", dict(
            b=b, a=a, s=s, d=d, dtype=name, causal=causal, block_m=block_m, block_n=block_n, seed=seed)))
    import torch

    q, k, v = _inputs(b, a, s, d, name, seed, "cpu")
    o = torch.empty_like(q)
    lse = torch.empty((b, a, s), dtype=torch.float32)
    tm.import_triton(True)
    from perflab.gemm.triton_kernels import flash_attention_fwd_kernel

    kern = tm.jitted(flash_attention_fwd_kernel, True)
    with counting_loads_and_stores({"q": q, "k": k, "v": v, "o": o, "lse": lse}) as c:
        kern[(tm.triton_cdiv(s, block_m), b * a)](
            q, k, v, o, lse, s, a, LOG2E / math.sqrt(d), q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1),
            k.stride(2), v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
            HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=bool(causal), WIDEN=name == "bf16")
    per = {n: c[n]["read"] + c[n]["written"] for n in ("q", "k", "v", "o", "lse")}
    read, written = sum(c[n]["read"] for n in c), sum(c[n]["written"] for n in c)
    pred = io.flash_bytes(b, a, s, d, tm_itemsize(name), block_m=block_m, block_n=block_n, causal=causal)
    closed = io.flash_bytes_closed(b, a, s, d, tm_itemsize(name), block_m=block_m, causal=causal)
    return ByteCount(**per, read=read, written=written, other=c["other"]["read"] + c["other"]["written"],
                     total=read + written, predicted=pred["total"], predicted_closed=closed, batch=b, heads=a, seq=s,
                     head_dim=d, dtype=name, causal=bool(causal), block_m=block_m, block_n=block_n)


def count_totals(points: list[dict[str, Any]]) -> list[int]:
    """`count_bytes(**p).total` for each p, in one interpreter process (a child one when this
    process runs Triton natively, as on a GPU after a native launch: one child for all points)."""
    if tm.import_triton(True) is False:
        return tm.run_in_interpreter_process(__name__, "count_totals", {"points": points})
    return [int(count_bytes(**p).total) for p in points]


def tm_itemsize(dtype: str) -> int:
    return {"fp32": 4, "fp16": 2, "bf16": 2}[tm.dtype_name(dtype)]


# ---------------------------------------------------------------- the eager path's bytes

@dataclass
class EagerOp:
    """One operator of the eager path: bytes it read and wrote, and its largest output."""

    op: str
    read: int
    written: int
    largest: int


@dataclass
class EagerBytes:
    """The eager path's bytes, operator by operator (views, which move nothing, left out)."""

    total: int
    ops: list[EagerOp]
    largest: int  # the biggest tensor any operator wrote: the s×s matrix
    s2_bytes: int  # b·a·s² × the itemsize
    batch: int
    heads: int
    seq: int
    head_dim: int
    dtype: str
    causal: bool


def count_eager_bytes(b: int, a: int, s: int, d: int, dtype: str = "fp32", *, causal: bool = False) -> EagerBytes:
    """Run `eager_attention` under a TorchDispatchMode and add each operator's input and output bytes.

    The tensors live on PyTorch's
    "meta" device: every operator runs and gives its outputs' shapes and dtypes, but nothing is
    computed or allocated, so any size and dtype counts in milliseconds."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    b, a, s, d = (positive_int(n, v) for n, v in (("batch", b), ("heads", a), ("seq", s), ("head_dim", d)))
    name = tm.dtype_name(dtype)
    rows: list[EagerOp] = []

    def nbytes(x) -> int:
        return x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            ins = sum(nbytes(x) for x in tree_flatten((args, kwargs or {}))[0])
            outs = [x for x in tree_flatten(out)[0] if isinstance(x, torch.Tensor)]
            rows.append(EagerOp(str(func.overloadpacket.__name__), ins, sum(nbytes(x) for x in outs),
                                max((nbytes(x) for x in outs), default=0)))
            return out

    q, k, v = (torch.empty(b, a, s, d, dtype=tm.torch_dtype(name), device="meta") for _ in range(3))
    with Count():
        eager_attention(q, k, v, causal=causal)
    # views (transpose, expand) move nothing: only operators that compute count
    moved = [r for r in rows if r.op not in {"transpose", "t", "view", "expand", "_unsafe_view", "reshape",
                                             "detach", "alias", "unsqueeze", "permute", "clone_view"}]
    total = sum(r.read + r.written for r in moved)
    return EagerBytes(total, moved, max((r.largest for r in moved), default=0), b * a * s * s * tm_itemsize(name), b,
                      a, s, d, name, bool(causal))


# ---------------------------------------------------------------- backward (PyTorch recompute)

def eager_frame(sizes: list[int], d: int = 64, dtype: str = "fp32") -> tuple[Any, EagerBytes]:
    """Lesson 13's eager table: per sequence length (one head, batch 1), the bytes counted, the largest
    tensor, s² × itemsize, Algorithm 0's prediction, and the growth from the previous length (the first
    row has no previous one and says so). Returns (frame, the last length's count)."""
    import pandas as pd

    rows, last, prev = [], None, None
    for s in sizes:
        last = count_eager_bytes(1, 1, s, d, dtype)
        item = tm_itemsize(tm.dtype_name(dtype))
        growth = "first size" if prev is None else f"{last.total / prev[1]:.2f}× from s = {prev[0]}"
        rows.append({"seq": s, "eager counted (B)": last.total, "largest tensor (B)": last.largest,
                     f"s² × {item} B": s * s * item, f"Algorithm 0, {dtype} (B)": io.standard_bytes(1, 1, s, d, item)["total"],
                     "growth": growth})
        prev = (s, last.total)
    if last is None:
        raise InputError("give at least one sequence length")
    return pd.DataFrame(rows), last

def attention_backward(q, k, v, o, lse, do, *, causal: bool = False, sm_scale: float | None = None):
    """dQ, dK, dV from the forward's O and log-sum-exp, recomputing P (FlashAttention's backward, in PyTorch).

    S = Q·Kᵀ·scale (recomputed), P = exp(S − lse), dV = Pᵀ·dO, dP = dO·Vᵀ, D = rowsum(dO ∘ O),
    dS = P ∘ (dP − D), dQ = dS·K·scale, dK = dSᵀ·Q·scale: five matmuls of the forward's size, so
    2.5× its FLOPs (`attention_io.backward_flops(recompute=True)`). Computed in fp32, returned in
    Q's dtype. Unlike the fused kernel it holds s×s tensors: it shows the arithmetic, not the bytes."""
    import torch

    scale = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    qf, kf, vf, of, dof = (t.float() for t in (q, k, v, o, do))
    s = (qf @ kf.transpose(-1, -2)) * scale  # matmul 1: the recompute
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    p = torch.exp(s - lse.float()[..., None])
    dv = p.transpose(-1, -2) @ dof  # matmul 2
    dp = dof @ vf.transpose(-1, -2)  # matmul 3
    delta = (dof * of).sum(-1, keepdim=True)
    ds = p * (dp - delta)
    dq = (ds @ kf) * scale  # matmul 4
    dk = (ds.transpose(-1, -2) @ qf) * scale  # matmul 5
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)

@dataclass
class BackwardCheck:
    """The recompute backward's gradients against autograd through SDPA: max |error| of each."""

    dq: float
    dk: float
    dv: float
    tolerance: float
    passed: bool
    forward_flops: float
    backward_flops: float  # with the recompute: 2.5× the forward's


def check_backward(b: int, a: int, s: int, d: int, dtype: str = "fp32", *, causal: bool = False,
                   seed: int = 0) -> BackwardCheck:
    """The recompute backward against autograd through SDPA (fp32 on a CPU): max_abs_err of dQ, dK, dV.

    Uses the kernel's forward (interpreter on a CPU) for O and the log-sum-exp."""
    import torch
    import torch.nn.functional as F

    b, a, s, d = (positive_int(n, v) for n, v in (("batch", b), ("heads", a), ("seq", s), ("head_dim", d)))
    check_head_dim(d)
    name = tm.dtype_name(dtype)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cpu" and tm.import_triton(True) is False:
        return BackwardCheck(**tm.run_in_interpreter_process(__name__, "check_backward", dict(
            b=b, a=a, s=s, d=d, dtype=name, causal=causal, seed=seed)))
    q, k, v = _inputs(b, a, s, d, name, seed, dev)
    g = torch.Generator(device="cpu").manual_seed(seed + 1)
    do = torch.randn(b, a, s, d, generator=g).to(q.dtype).to(dev)
    o, lse = attention(q, k, v, causal=causal, return_lse=True)
    dq, dk, dv = attention_backward(q, k, v, o, lse, do, causal=causal)
    qr, kr, vr = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal).backward(do)
    grads = [r.grad for r in (qr, kr, vr)]
    assert all(g is not None for g in grads)
    errs = {n: float((x.float() - g.float()).abs().max()) for n, x, g in zip(("dq", "dk", "dv"), (dq, dk, dv), grads)
            if g is not None}
    tol = 4 * tolerance(name) if name != "fp32" else 1e-4
    return BackwardCheck(errs["dq"], errs["dk"], errs["dv"], tol, all(e <= tol for e in errs.values()),
                         io.forward_flops(b, a, s, d, causal), io.backward_flops(b, a, s, d, causal, recompute=True))

# ---------------------------------------------------------------- timing on a GPU

# What each timed path is, as a reader should see it named. PyTorch's SDPA flash backend is
# FlashAttention-2 (PyTorch 2.2 release notes), not the Hopper-specific FlashAttention-3.
PATH_NAMES = {"triton": "the course's Triton kernel (FlashAttention-2's loop order)",
              "sdpa_flash": "SDPA's flash backend (FlashAttention-2)",
              "eager": "eager PyTorch (S and P written to memory)"}

@dataclass
class PathTiming:
    """One attention path timed on a GPU, checked against SDPA first; or why it could not run."""

    seconds: float | None = None  # median
    tflops: float | None = None
    max_abs_err: float | None = None
    error: str | None = None  # a backend this GPU or shape lacks


@dataclass
class PathTimings:
    """The forward's FLOPs and each path's timing (`PATH_NAMES` names them)."""

    flops: float
    paths: dict[str, PathTiming] = field(default_factory=dict)

    def to_json(self) -> JSON:
        """{"flops", then each path: its figures, or {"error"}}."""
        out: JSON = {"flops": self.flops}
        for k, p in self.paths.items():
            out[k] = {"error": p.error} if p.error is not None else {"seconds": p.seconds, "tflops": p.tflops,
                                                                      "max_abs_err": p.max_abs_err}
        return out


def time_paths(b: int, a: int, s: int, d: int, dtype: str = "bf16", *, causal: bool = False, block_m: int = 128,
               block_n: int = 64, num_warps: int = 8, num_stages: int = 2, rep_ms: float = 100) -> PathTimings:
    """On a CUDA GPU: seconds and TFLOP/s of the Triton kernel, SDPA's flash backend and eager attention.

    Each is checked against SDPA before it is timed. Never run in this project's tests (no GPU here)."""
    import torch
    import torch.nn.functional as F

    from perflab.core.timing import bench

    if not torch.cuda.is_available():
        raise UnsupportedError("timing attention needs a CUDA GPU (the interpreter's timings mean nothing)")
    b, a, s, d = (positive_int(n, v) for n, v in (("batch", b), ("heads", a), ("seq", s), ("head_dim", d)))
    check_head_dim(d)
    name = tm.dtype_name(dtype)
    q, k, v = _inputs(b, a, s, d, name, 0, "cuda")
    flops = io.forward_flops(b, a, s, d, causal)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out = PathTimings(flops)

    def triton_fn():
        o = attention(q, k, v, causal=causal, block_m=block_m, block_n=block_n, num_warps=num_warps,
                      num_stages=num_stages, interpret=False)
        assert not isinstance(o, tuple)  # O alone without return_lse
        return o

    def flash_fn():
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def eager_fn():
        return eager_attention(q, k, v, causal=causal)

    for label, fn in (("triton", triton_fn), ("sdpa_flash", flash_fn), ("eager", eager_fn)):
        try:
            err = float((fn().float() - ref.float()).abs().max())
            r = bench(fn, rep_ms=rep_ms, device=torch.device("cuda"), label=f"{label} attention s={s} d={d}")
            out.paths[label] = PathTiming(r.median_s, flops / r.median_s / 1e12, err)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:  # a backend this GPU or shape lacks: recorded
            out.paths[label] = PathTiming(error=str(e).strip().splitlines()[0][:200] if str(e).strip()
                                          else type(e).__name__)
    return out

def kernel_source(loop_only: bool = True) -> str:
    """The kernel's source text, read from its file (importing it would fix Triton's mode): the whole
    function, or from the state's initialisation to the end of the K/V loop."""
    from pathlib import Path

    text = Path(tm.__file__).with_name("triton_kernels.py").read_text()  # the kernels' one file, in perflab.gemm
    start = text.index("def flash_attention_fwd_kernel(")
    body = text[start:]
    if not loop_only:
        return body.rstrip() + "\n"
    lines = body.splitlines()
    first = next(i for i, line in enumerate(lines) if "m_i = tl.zeros" in line)
    last = next(i for i, line in enumerate(lines) if line.strip() == "m_i = m_new")
    return "\n".join(line[4:] for line in lines[first: last + 1]) + "\n"
