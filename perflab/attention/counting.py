"""Lesson 13's byte counts: every load and store of the FlashAttention kernel counted in Triton's
interpreter, and every tensor the eager path reads and writes counted under a dispatch mode.

    >>> from perflab.attention import counting
    >>> counting.count_bytes(1, 2, 200, 64, block_m=64, block_n=32)   # ByteCount: every tl.load/tl.store, masks respected
    >>> counting.count_eager_bytes(1, 1, 512, 64)                     # EagerBytes: operator by operator

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

`perflab.attention.flash` re-exports these names.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

from perflab.attention import formulas as io
from perflab.attention.kernel import (
    INTERPRETER_MAX_ELEMENTS,
    LOG2E,
    check_blocks,
    check_head_dim,
    eager_attention,
    inputs,
    tm_itemsize,
)
from perflab.core.errors import InputError, UnsupportedError
from perflab.core.validate import positive_int
from perflab.gemm import triton_matmul as tm

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

    def table(self):
        """Bytes per tensor (Q, K, V, O, the log-sum-exp) and in total: counted, and the formula's
        (`formulas.flash_bytes`, tile by tile)."""
        import pandas as pd

        pred = io.flash_bytes(self.batch, self.heads, self.seq, self.head_dim, tm_itemsize(self.dtype),
                              block_m=self.block_m, block_n=self.block_n, causal=self.causal)
        keys = ("q", "k", "v", "o", "lse", "total")
        return pd.DataFrame({"counted (B)": {k: getattr(self, k) for k in keys}, "formula (B)": {k: pred[k] for k in keys}})

    def beside_standard(self) -> str:
        """The bytes outside the five tensors (none, if the count is right) and what standard attention would
        move for the same shape, as a multiple of the count, beside its limit 2·BLOCK_M/d once s ≫ d."""
        from perflab.core.readout import nbytes

        std = io.standard_bytes(self.batch, self.heads, self.seq, self.head_dim, tm_itemsize(self.dtype))["total"]
        return (f"addresses outside Q, K, V, O and lse: {self.other} B; standard attention would move {nbytes(std)}, "
                f"{std / self.total:.2g}× the fused kernel's (2·BLOCK_M/d = {2 * self.block_m / self.head_dim:.2g} "
                "once s ≫ d)")


@dataclass
class ByteCounts:
    """Several launches counted (`count_points`), each beside the formula tile by tile and its closed form."""

    counts: list[ByteCount]

    def table(self):
        import pandas as pd

        return pd.DataFrame([{"seq": c.seq, "block_m": c.block_m, "block_n": c.block_n, "causal": c.causal,
                              "counted (B)": c.total, "formula, exact (B)": c.predicted,
                              "closed form (B)": c.predicted_closed} for c in self.counts])

    def causal_gaps(self) -> str:
        """For each causal count, the closed form's gap computed tile by tile (`formulas.causal_gap`)."""
        return "\n".join(io.causal_gap(c.seq, c.head_dim, tm_itemsize(c.dtype), block_m=c.block_m,
                                        block_n=c.block_n).text for c in self.counts if c.causal)


def count_points(points, d: int = 64, dtype: str = "fp16") -> ByteCounts:
    """`count_bytes` of one head (batch 1) for each (seq, block_m, block_n, causal) in `points`; all in one
    child interpreter when this process imported Triton natively (a child costs seconds to start)."""
    if tm.import_triton(True) is False:
        for s, bm, bn, _ in points:  # the inputs checked here, so that a wrong one is still one line
            positive_int("seq", s)
            check_blocks(bm, bn)
            if s * d > INTERPRETER_MAX_ELEMENTS:
                raise InputError(f"b·a·s·d = {s * d:,} is too large to count in the interpreter here: keep it ≤ "
                                 f"{INTERPRETER_MAX_ELEMENTS:,} (the bytes scale by formula; count small, predict large)")
        check_head_dim(positive_int("head_dim", d))
        raw = tm.run_in_interpreter_process(__name__, "count_points", dict(
            points=[list(p) for p in points], d=d, dtype=tm.dtype_name(dtype)))
        return ByteCounts([ByteCount(**c) for c in raw["counts"]])
    return ByteCounts([count_bytes(1, 1, s, d, dtype, block_m=bm, block_n=bn, causal=c) for s, bm, bn, c in points])


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

    q, k, v = inputs(b, a, s, d, name, seed, "cpu")
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
