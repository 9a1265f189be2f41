"""The course's tiled matmul in Triton: native on a CUDA GPU, Triton's interpreter on a CPU.

    >>> from perflab.gemm import triton_matmul as tm
    >>> c = tm.matmul(a, b, TileConfig(64, 64, 32))      # a, b: torch tensors, fp32/fp16/bf16

The kernel (`perflab.gemm.triton_kernels.matmul_kernel`) cuts C into BLOCK_M × BLOCK_N tiles, one
program each, steps through K in BLOCK_K slices and accumulates in fp32; `num_warps` and
`num_stages` are compile options (threads per program / software-pipelining depth).

Interpreter or native: Triton 3.x decides when `@triton.jit` runs, from `TRITON_INTERPRET`
(`triton.knobs.runtime.interpret`). Here nothing is decorated at import; `jitted(fn, interpret)`
builds `InterpretedFunction(fn)` or `JITFunction(fn)` explicitly, and `interpret=None` picks the
interpreter exactly when tensors are on the CPU. So one process can run a kernel on the CPU and
compile the same kernel for sm_90, and `TRITON_INTERPRET` set by a user changes nothing here.

Interpreter timings mean nothing (every program runs as numpy on the CPU, one after another):
perflab never shows them as a speed.

Triton ships wheels for Linux on x86_64 and aarch64 only; `available()` says why it is missing
elsewhere, and callers skip with that reason.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from perflab.core.errors import InputError, UnsupportedError
from perflab.core.jsonable import JSON, to_json

INTERPRETER_TIMING_NOTE = ("Triton's interpreter runs each program as numpy on the CPU, one after another: "
                           "its timings say nothing about a GPU, so perflab never shows them as speed.")
DTYPES = ("fp32", "fp16", "bf16")


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None when Triton is installed here, else one line saying why not (and where it is).

    Looks for the package without importing it: the first import fixes Triton's interpreter mode."""
    import importlib.util
    import platform

    try:
        found = importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        where = f"{platform.system()} {platform.machine()}"
        return (f"Triton is not installed here ({where}); its wheels exist for Linux x86_64 and aarch64: "
                "`pip install 'perflab[kernels]'` there")
    return None


def available() -> bool:
    return unavailable_reason() is None


def require() -> None:
    """Raise UnsupportedError (one line) when Triton is missing."""
    reason = unavailable_reason()
    if reason:
        raise UnsupportedError(reason)


def triton_version() -> str:
    require()
    import triton

    return str(triton.__version__)


# ---------------------------------------------------------------- the tile configuration

def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


@dataclass(frozen=True)
class TileConfig:
    """One matmul kernel configuration. Blocks are powers of two (Triton's tl.arange needs them)."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    num_warps: int = 4
    num_stages: int = 3
    group_m: int = 8

    def __post_init__(self):
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"{name}={v!r}: a block size is a whole number ≥ 1 (e.g. 64 or 128)")
            if not _pow2(v):
                lo = 1 << (v.bit_length() - 1)
                raise InputError(f"{name}={v} is not a power of two (Triton's tl.arange needs one): use {lo} or {lo * 2}")
            if name != "block_k" and v < 16:
                raise InputError(f"{name}={v}: tl.dot needs tiles of at least 16 rows and columns: use 16 or more")
            if v > 512:
                raise InputError(f"{name}={v}: above 512 no tile of this kernel fits a GPU's registers: use ≤ 256")
        if self.block_k < 16:
            raise InputError(f"block_k={self.block_k}: tl.dot needs a K slice of at least 16: use 16, 32 or 64")
        if not _pow2(self.num_warps) or self.num_warps > 32:
            raise InputError(f"num_warps={self.num_warps}: use a power of two from 1 to 32 "
                             "(a block has at most 1024 threads = 32 warps)")
        if not isinstance(self.num_stages, int) or not 1 <= self.num_stages <= 8:
            raise InputError(f"num_stages={self.num_stages}: use 1 to 8 (2–4 are usual)")
        if not isinstance(self.group_m, int) or self.group_m < 1:
            raise InputError(f"group_m={self.group_m}: use a whole number ≥ 1 (8 is usual)")

    @property
    def tile(self) -> tuple[int, int]:
        return self.block_m, self.block_n

    def label(self) -> str:
        return f"{self.block_m}x{self.block_n}x{self.block_k} w{self.num_warps} s{self.num_stages}"

    def as_dict(self) -> JSON:
        return to_json(self)


def parse_tile3(text: str) -> tuple[int, int, int]:
    """'128x128x64' as (block_m, block_n, block_k)."""
    parts = [p for p in re.split(r"\s*[x×X*,]\s*", str(text).strip()) if p]
    if len(parts) != 3:
        raise InputError(f"tile {text!r} should look like 128x128x64 (BLOCK_M x BLOCK_N x BLOCK_K)")
    try:
        bm, bn, bk = (int(p) for p in parts)
    except ValueError:
        raise InputError(f"tile {text!r} should be three whole numbers, e.g. 128x128x64") from None
    return bm, bn, bk


def dtype_name(dtype: Any) -> str:
    """'fp16' for 'fp16', 'float16', torch.float16 or a perflab DType; InputError for anything else."""
    from perflab.core.dtypes import parse_dtype

    name = parse_dtype(str(dtype)).name
    if name not in DTYPES:
        raise InputError(f"dtype {name}: the Triton matmul takes {', '.join(DTYPES)} inputs")
    return name


def torch_dtype(name: str):
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name(name)]


# ---------------------------------------------------------------- interpreter or native

def process_interprets() -> bool | None:
    """How this process imported Triton: True in interpreter mode, False natively, None not yet.

    Triton's own @jit helpers (tl.cdiv, tl.zeros, ...) are wrapped when triton.language is first
    imported, so a kernel can be interpreted only in a process that imported it in interpreter mode.
    """
    if "triton.language" not in sys.modules:
        return None
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    return not isinstance(tl.cdiv, JITFunction)


def import_triton(interpret: bool) -> bool:
    """Import Triton in the wanted mode if it is not imported yet; return the mode it has."""
    require()
    mode = process_interprets()
    if mode is None:
        # Kept for the whole process: Triton imports more of itself later (its interpreter loads
        # triton.experimental.gluon on first use) and checks the mode again then.
        os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
        os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # 3.9's default, said so it does not warn
        import triton.language  # noqa: F401

        mode = bool(interpret)
    return mode


def run_in_interpreter_process(module: str, func: str, kwargs: dict[str, Any], timeout: float = 300) -> Any:
    """Call `module.func(**kwargs)` in a child Python whose Triton runs in interpreter mode; its
    result as JSON (`perflab.core.jsonable.to_json`: a typed result comes back as its fields, for the
    caller to make it again). Used when this process imported Triton natively (torch.compile does so
    even on a CPU)."""
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "1"
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    root = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    code = ("import json, sys, importlib; from perflab.core.jsonable import to_json; "
            "m = importlib.import_module(sys.argv[1]); "
            "print(json.dumps(to_json(getattr(m, sys.argv[2])(**json.loads(sys.argv[3])))))")
    proc = subprocess.run([sys.executable, "-c", code, module, func, json.dumps(kwargs)], capture_output=True,
                          text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise UnsupportedError(f"the interpreter process failed: {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def jitted(fn, interpret: bool):
    """`fn` wrapped for Triton: interpreted on the CPU, or a JITFunction (compiles for a GPU)."""
    mode = import_triton(interpret)
    if interpret and not mode:
        raise UnsupportedError("Triton was imported natively in this process (torch.compile does that): "
                               "run the kernel through run_in_interpreter_process, or in a fresh kernel")
    return _jitted(fn, bool(interpret))


@functools.cache
def _jitted(fn, interpret: bool):
    if interpret:
        from triton.runtime.interpreter import InterpretedFunction

        return InterpretedFunction(fn)
    from triton.runtime.jit import JITFunction

    return JITFunction(fn)


def matmul_jit(interpret: bool):
    import_triton(interpret)  # before the kernels' module imports triton.language in whatever mode
    from perflab.gemm.triton_kernels import matmul_kernel

    return jitted(matmul_kernel, interpret)


def tolerance(dtype: str, k: int, device_type: str = "cpu") -> tuple[float, float]:
    """(rtol, atol) for comparing this kernel's C with torch's, inputs drawn from N(0, 1).

    Both accumulate in fp32 and round C to the dtype once, so they differ by the dtype's rounding
    of C (half a unit in the last place: 2^-11 fp16, 2^-8 bf16) plus fp32 summation-order error
    (~√k · 2^-24 · |C|, |C| ~ √k). fp32 inputs on a GPU go through tf32 Tensor Cores (10-bit
    mantissa) in both torch (when allowed) and Triton, so a GPU's fp32 check uses tf32's 2^-11.
    """
    eps = {"fp32": 2.0 ** -24, "fp16": 2.0 ** -11, "bf16": 2.0 ** -8}[dtype_name(dtype)]
    if dtype_name(dtype) == "fp32" and device_type == "cuda":
        eps = 2.0 ** -11
    scale = math.sqrt(max(1, k))
    rtol = 4 * eps
    atol = 8 * eps * scale + 64 * 2.0 ** -24 * scale * scale
    return rtol, atol


def matmul(a, b, config: TileConfig | None = None, *, interpret: bool | None = None):
    """C = A · B with the Triton kernel; C has A's dtype. On a CPU tensor this uses the interpreter."""
    import torch

    require()
    config = config or TileConfig()
    if a.ndim != 2 or b.ndim != 2:
        raise InputError(f"matmul takes 2-D matrices (got {a.ndim}-D and {b.ndim}-D)")
    if a.shape[1] != b.shape[0]:
        raise InputError(f"inner sizes differ: A is {tuple(a.shape)}, B is {tuple(b.shape)} (A's columns must equal B's rows)")
    if a.dtype != b.dtype:
        raise InputError(f"A is {a.dtype} and B is {b.dtype}: give both the same dtype")
    dtype_name(str(a.dtype))
    if a.device != b.device:
        raise InputError(f"A is on {a.device} and B on {b.device}: put both on one device")
    if interpret is None:
        interpret = a.device.type == "cpu"
    if not interpret and a.device.type != "cuda":
        raise UnsupportedError(f"native Triton needs CUDA tensors (got {a.device.type}); run with interpret=True")
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    grid = (triton_cdiv(m, config.block_m) * triton_cdiv(n, config.block_n),)
    kern = matmul_jit(bool(interpret))
    kw: dict[str, Any] = dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                              GROUP_M=config.group_m, WIDEN=bool(interpret and a.dtype == torch.bfloat16))
    if not interpret:
        kw.update(num_warps=config.num_warps, num_stages=config.num_stages)
    kern[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), **kw)
    return c


def triton_cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


@dataclass
class KernelCheck:
    """The kernel's C against torch's on N(0, 1) inputs of one shape."""

    m: int
    n: int
    k: int
    dtype: str
    device: str
    interpreter: bool  # run by Triton's interpreter (a CPU), not compiled
    max_abs_err: float
    rtol: float  # the tolerance: atol + rtol·|C| (`tolerance`)
    atol: float
    passed: bool
    config: TileConfig

    @classmethod
    def from_json(cls, d: JSON) -> KernelCheck:
        return cls(**{**d, "config": TileConfig(**d["config"])})

    def line(self) -> str:
        """'200×130×96 fp32 on cpu (interpreter): max |error| vs torch 9.5e-06 (tolerance ...) ✓'."""
        from perflab.core.readout import num

        return (f"{self.m}×{self.n}×{self.k} {self.dtype} on {self.device}{' (interpreter)' if self.interpreter else ''}: "
                f"max |error| vs torch {num(self.max_abs_err)} (tolerance {num(self.atol)} + {num(self.rtol)}·|C|) "
                + ("✓" if self.passed else "✗"))


def check(m: int, n: int, k: int, dtype: str = "fp32", config: TileConfig | dict | None = None, *, seed: int = 0,
          device: str | None = None) -> KernelCheck:
    """Run the kernel on random N(0, 1) inputs and compare with torch (fp32 reference of the same
    rounded inputs, then rounded to the dtype): max_abs_err, the tolerance, and whether it passed."""
    import torch

    require()
    from perflab.core.validate import positive_int

    if isinstance(config, dict):
        config = TileConfig(**config)
    m, n, k = positive_int("m", m), positive_int("n", n), positive_int("k", k)
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if torch.device(dev).type == "cpu" and m * k + k * n + m * n > 3 * 2048 * 2048:
        raise InputError(f"{m}×{n}×{k} is too large to check here (the interpreter runs every program as numpy): "
                         "keep m·k + k·n + m·n under 12.6 M elements, e.g. 1024×1024×1024")
    name = dtype_name(dtype)
    cfg = config or TileConfig()
    if torch.device(dev).type == "cpu" and import_triton(True) is False:
        return KernelCheck.from_json(run_in_interpreter_process(__name__, "check", {
            "m": m, "n": n, "k": k, "dtype": name, "seed": seed, "config": cfg.as_dict(), "device": "cpu"}))
    g = torch.Generator(device="cpu").manual_seed(seed)
    a = torch.randn(m, k, generator=g).to(torch_dtype(name)).to(dev)
    b = torch.randn(k, n, generator=g).to(torch_dtype(name)).to(dev)
    c = matmul(a, b, cfg)
    ref = (a.float() @ b.float()).to(torch_dtype(name)).float()
    err = (c.float() - ref).abs()
    rtol, atol = tolerance(name, k, torch.device(dev).type)
    bound = atol + rtol * ref.abs()
    return KernelCheck(m, n, k, name, dev, torch.device(dev).type == "cpu", float(err.max()), rtol, atol,
                       bool((err <= bound).all()), cfg)
