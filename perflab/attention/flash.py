"""Lesson 13's FlashAttention forward in Triton: run, checked, its bytes counted, timed.

    >>> from perflab.attention import flash
    >>> o = flash.attention(q, k, v, causal=True)            # [b, a, s, d] fp16/bf16/fp32 tensors
    >>> flash.check(1, 2, 77, 64, "fp16", causal=True)       # FlashCheck against torch's SDPA, in the interpreter here
    >>> flash.count_bytes(1, 2, 200, 64, block_m=64, block_n=32)   # ByteCount: every tl.load/tl.store, masks respected

The launch itself (`attention`, `eager_attention`, the shape checks) is `perflab.attention.kernel`; the
byte counts (`count_bytes`, `count_eager_bytes`, `eager_frame`) are `perflab.attention.counting`; both are
re-exported here. What the compiler makes of the kernel (registers, spills, shared memory, occupancy) is
`perflab.attention.compiled`.

The kernel is `perflab.gemm.triton_kernels.flash_attention_fwd_kernel` (its docstring explains the
online softmax). On a CPU it runs in Triton's interpreter (`triton_matmul.jitted`), on a CUDA GPU
natively. Formulas for its bytes and FLOPs are in `perflab.attention.formulas`.

**The backward** (`attention_backward`) is a PyTorch recompute from Q, K, V, O, dO and the
log-sum-exp the kernel stored: P = exp(Q·Kᵀ·scale − lse) again, then dV, dP, dS, dQ, dK. Five
matmuls: its FLOPs are 2.5× the forward's (`attention_io.backward_flops`).

On a GPU `time_paths` times the kernel against SDPA's flash backend and eager attention. That path
has never run on a GPU in this project's tests (there is none here): it is written to the same
launch as the interpreter path, which the tests check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from perflab.attention import formulas as io
from perflab.attention.counting import ByteCount as ByteCount
from perflab.attention.counting import EagerBytes as EagerBytes
from perflab.attention.counting import EagerOp as EagerOp
from perflab.attention.counting import count_bytes as count_bytes
from perflab.attention.counting import count_eager_bytes as count_eager_bytes
from perflab.attention.counting import count_totals as count_totals
from perflab.attention.counting import counting_loads_and_stores as counting_loads_and_stores
from perflab.attention.counting import eager_frame as eager_frame
from perflab.attention.kernel import BLOCKS as BLOCKS
from perflab.attention.kernel import DEFAULT_BLOCKS as DEFAULT_BLOCKS
from perflab.attention.kernel import HEAD_DIMS as HEAD_DIMS
from perflab.attention.kernel import INTERPRETER_MAX_ELEMENTS as INTERPRETER_MAX_ELEMENTS
from perflab.attention.kernel import LOG2E as LOG2E
from perflab.attention.kernel import attention as attention
from perflab.attention.kernel import check_blocks as check_blocks
from perflab.attention.kernel import check_head_dim as check_head_dim
from perflab.attention.kernel import eager_attention as eager_attention
from perflab.attention.kernel import inputs
from perflab.attention.kernel import tm_itemsize as tm_itemsize
from perflab.attention.kernel import tolerance as tolerance
from perflab.core.errors import InputError, UnsupportedError
from perflab.core.jsonable import JSON
from perflab.core.validate import positive_int
from perflab.gemm import triton_matmul as tm


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
    q, k, v = inputs(b, a, s, d, name, seed, dev)
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


@dataclass
class FlashChecks:
    """Several `check`s, as lesson 13 shows them."""

    checks: list[FlashCheck]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def table(self):
        """One row per shape: its length, head dimension, mask and dtype, O's largest error against SDPA
        and its tolerance, the log-sum-exp's largest error, and whether both are within."""
        import pandas as pd

        from perflab.core.readout import num

        return pd.DataFrame([{"seq": c.seq, "head_dim": c.head_dim, "causal": c.causal, "dtype": c.dtype,
                              "max |O − SDPA|": num(c.max_abs_err, 2), "tolerance": num(c.tolerance, 2),
                              "max |lse error|": num(c.lse_max_abs_err, 2), "within": "✓" if c.passed else "✗"}
                             for c in self.checks])


def checks(shapes, *, block_m: int = 32, block_n: int = 16, batch: int = 1, heads: int = 2) -> FlashChecks:
    """`check` for each (seq, head_dim, causal, dtype) of `shapes` (the sequence length also starts the random generator); all in one
    child interpreter when this process imported Triton natively (a child costs seconds to start)."""
    if _in_child():  # the inputs checked here, so that a wrong one is still one line
        for sh_s, sh_d, _, sh_dt in shapes:
            n = positive_int("batch", batch) * positive_int("heads", heads) * positive_int("seq", sh_s)
            check_head_dim(positive_int("head_dim", sh_d))
            tm.dtype_name(sh_dt)
            if n * sh_d > INTERPRETER_MAX_ELEMENTS:
                raise InputError(f"b·a·s·d = {n * sh_d:,} is too large for the interpreter here (it runs every program "
                                 f"as numpy): keep it ≤ {INTERPRETER_MAX_ELEMENTS:,}, e.g. batch 1, heads 2, seq 512")
        check_blocks(block_m, block_n)
        raw = tm.run_in_interpreter_process(__name__, "checks", dict(
            shapes=[list(sh) for sh in shapes], block_m=block_m, block_n=block_n, batch=batch, heads=heads))
        return FlashChecks([FlashCheck(**c) for c in raw["checks"]])
    return FlashChecks([check(batch, heads, s, d, dt, causal=c, block_m=block_m, block_n=block_n, seed=s)
                        for s, d, c, dt in shapes])


def _in_child() -> bool:
    """Whether a CPU run of the kernel must go to a child interpreter (this process imported Triton natively)."""
    import torch

    return not torch.cuda.is_available() and tm.import_triton(True) is False


# ---------------------------------------------------------------- backward (PyTorch recompute)

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

    def text(self) -> str:
        return (f"recompute backward against autograd through SDPA: max |dQ| err {self.dq:.2g}, |dK| {self.dk:.2g}, "
                f"|dV| {self.dv:.2g} (tolerance {self.tolerance:.0e}): {'ok' if self.passed else 'FAILED'}")


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
    q, k, v = inputs(b, a, s, d, name, seed, dev)
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

    def against_ceiling(self, ceiling_tflops: float) -> dict[str, str]:
        """Each path named for a reader (`PATH_NAMES`) → its TFLOP/s and share of a matmul ceiling, or its error."""
        out = {}
        for k, v in self.paths.items():
            out[PATH_NAMES.get(k, k)] = (f"{v.tflops:.0f} TFLOP/s ({v.tflops / ceiling_tflops:.0%} of the measured bf16 "
                                         f"matmul ceiling, {ceiling_tflops:.0f} TFLOP/s)" if v.tflops is not None
                                         else str(v.error))
        return out

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
    q, k, v = inputs(b, a, s, d, name, 0, "cuda")
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
