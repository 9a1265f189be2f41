"""A fused bias + GeLU in Triton (lesson 10): checked in the interpreter, compiled for sm_90, timed on a GPU.

Why bias + GeLU: it is the elementwise tail of the first matmul of a GPT-2-style MLP. What is
checked and timed here is the stand-alone function `eager(x, bias)` = gelu(x + bias): eager
PyTorch runs it as two kernels (`x + bias`, then `gelu`) with the intermediate written to memory
and read back, and torch.compile's inductor fuses it into one kernel (`inductor_code` shows it).
Fused, each element of x is read once and y written once: eager moves 4 tensors' worth of bytes
(read x, write v, read v, write y; the bias is small), the fused kernel 2, so a memory-bound op
should take about half the time. That holds for the stand-alone function only: in a real
`nn.Linear` eager adds the bias inside `addmm` (on CUDA, cuBLASLt's bias epilogue; PyTorch's
aten/src/ATen/native/cuda/Blas.cpp, `addmm_out_cuda_impl`), so the eager tail of a real MLP is the
GeLU alone, one read and one write. Lesson 09's C++ extension fuses the same op
(perflab.profiling.kernel), so the two can be compared.

The kernel computes in fp32 and rounds once to the output dtype; eager in fp16/bf16 rounds the
intermediate x + bias too, so the two differ by about one unit in the last place of the dtype:
`tolerance(dtype)` allows two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perflab.core.errors import InputError
from perflab.gemm import triton_matmul as tm

BLOCK = 1024


def eager(x, bias):
    import torch.nn.functional as F

    return F.gelu(x + bias, approximate="tanh")


def tolerance(dtype: str) -> tuple[float, float]:
    """(rtol, atol): two units in the last place of the dtype, and an absolute floor for values near 0."""
    name = tm.dtype_name(dtype)
    eps = {"fp32": 2.0 ** -23, "fp16": 2.0 ** -10, "bf16": 2.0 ** -7}[name]
    # fp32: the tanh-through-exp form loses ~1e-7 near 0 (1 - 2/(e^2u + 1) cancels), hence the 1e-5 floor
    return 2 * eps + (1e-6 if name == "fp32" else 0.0), (1e-5 if name == "fp32" else 2 * eps)


def bias_gelu(x, bias, *, interpret: bool | None = None, block: int = BLOCK):
    """gelu_tanh(x + bias) with the Triton kernel; x is [rows, cols] (row-major), bias [cols]."""
    import torch

    if x.ndim != 2 or bias.ndim != 1 or bias.shape[0] != x.shape[1]:
        raise InputError(f"x must be [rows, cols] and bias [cols] (got {tuple(x.shape)} and {tuple(bias.shape)})")
    if interpret is None:
        interpret = x.device.type == "cpu"
    tm.import_triton(bool(interpret))  # before the kernels' module imports triton.language in whatever mode
    from perflab.gemm.triton_kernels import bias_gelu_kernel

    x = x.contiguous()
    y = torch.empty_like(x)
    rows, cols = x.shape
    kern = tm.jitted(bias_gelu_kernel, bool(interpret))
    kern[(rows, tm.triton_cdiv(cols, block))](x, bias, y, rows, cols, x.stride(0), y.stride(0), BLOCK=block)
    return y


def check(rows: int = 64, cols: int = 1000, dtype: str = "fp32", seed: int = 0) -> dict[str, Any]:
    """Run the fused kernel on N(0, 2²) inputs and compare with eager PyTorch: max_abs_err and whether
    every element is within `tolerance(dtype)`. On a CPU through the interpreter (in a child process
    when this one has Triton in native mode, as after torch.compile)."""
    import torch

    tm.require()
    from perflab.core.validate import positive_int

    rows, cols = positive_int("rows", rows), positive_int("cols", cols)
    if rows * cols > 4_000_000:
        raise InputError(f"{rows}×{cols} is too large to check in the interpreter: keep rows·cols ≤ 4 M")
    name = tm.dtype_name(dtype)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cpu" and tm.import_triton(True) is False:
        return tm.run_in_interpreter_process(__name__, "check", {"rows": rows, "cols": cols, "dtype": name, "seed": seed})
    g = torch.Generator().manual_seed(seed)
    dt = tm.torch_dtype(name)
    x = (2 * torch.randn(rows, cols, generator=g)).to(dt).to(dev)
    b = torch.randn(cols, generator=g).to(dt).to(dev)
    y = bias_gelu(x, b)
    ref = eager(x, b)
    err = (y.float() - ref.float()).abs()
    rtol, atol = tolerance(name)
    ok = bool((err <= atol + rtol * ref.float().abs()).all())
    return {"rows": rows, "cols": cols, "dtype": name, "device": dev, "interpreter": dev == "cpu",
            "max_abs_err": float(err.max()), "rtol": rtol, "atol": atol, "passed": ok}


def check_all(rows: int = 64, cols: int = 1000, dtypes: tuple[str, ...] | list[str] = ("fp32", "fp16", "bf16"),
              seed: int = 0) -> list[dict[str, Any]]:
    """`check` for several dtypes; one child process for all of them when one is needed."""
    import torch

    tm.require()
    dtypes = [tm.dtype_name(d) for d in dtypes]
    if not torch.cuda.is_available() and tm.import_triton(True) is False:
        return tm.run_in_interpreter_process(__name__, "check_all", {"rows": rows, "cols": cols, "dtypes": dtypes,
                                                                     "seed": seed})
    return [check(rows, cols, d, seed) for d in dtypes]


def compile_for(target: str = "sm_90", dtype: str = "bf16", cols: int = 4096, num_warps: int = 4) -> dict[str, Any]:
    """Compile the fused kernel for a GPU (no GPU needed): registers, spills, shared memory, occupancy,
    and `limited_by`, every per-SM limit that allows no more blocks (joined by ' and ' on a tie: with
    few registers and 4 warps, registers and warps often allow the same number)."""
    from perflab.gemm import compiled
    from perflab.gemm.occupancy import TARGET_GPU, occupancy, sm_limits

    tm.require()
    name = tm.dtype_name(dtype)
    cc = compiled.parse_target(target)
    ty = "*" + compiled.TRITON_DTYPE[name]
    sig = {"x_ptr": ty, "bias_ptr": ty, "y_ptr": ty, "n_rows": "i32", "n_cols": "i32", "stride_x": "i32",
           "stride_y": "i32", "BLOCK": "constexpr"}
    divisible = [0, 1, 2] + ([4, 5, 6] if cols % 16 == 0 else [])
    job = {"kernel": "bias_gelu_kernel", "signature": sig, "constexprs": {"BLOCK": BLOCK}, "divisible": divisible,
           "cc": cc, "num_warps": num_warps, "num_stages": 1}
    summaries, todo = compiled.build([job])
    s = summaries[0]
    if "error" in s:
        raise InputError(f"Triton could not compile the fused kernel for sm_{cc}: {s['error']}")
    figs, md = s["cuobjdump"], s["metadata"]
    out = {"target": f"sm_{cc}", "dtype": name, "registers": int(figs["REG"]), "spill_bytes": int(figs.get("STACK", 0)),
           "shared_bytes": int(md["shared"]) + int(figs.get("SHARED", 0)), "num_warps": int(md["num_warps"]),
           "cached": not todo, "cubin": s["cache_dir"] + "/kernel.cubin"}
    if f"sm_{cc}" in TARGET_GPU:
        lim = sm_limits(f"sm_{cc}")
        o = occupancy(out["registers"], out["shared_bytes"], out["num_warps"], lim)
        out.update(gpu=lim.name, blocks_per_sm=o.blocks_per_sm, occupancy=o.occupancy, limited_by=o.limited_by)
    return out


def time_on_gpu(rows: int = 8192, cols: int = 8192, dtype: str = "bf16") -> dict[str, Any] | str:
    """On a CUDA GPU: the stand-alone gelu(x + bias) eager (two kernels), under torch.compile, and
    the Triton kernel, in ms and GB/s of the fused traffic (read x, write y). Otherwise one line
    saying why not. (Not a real nn.Linear's tail, whose bias eager already adds inside addmm.)"""
    import torch

    if not torch.cuda.is_available():
        return ("No GPU here: the fused kernel is checked (interpreter) and compiled, not timed — the "
                "interpreter's timings mean nothing.")
    from perflab.core.timing import bench

    dt = tm.torch_dtype(dtype)
    x = torch.randn(rows, cols, device="cuda", dtype=dt)
    b = torch.randn(cols, device="cuda", dtype=dt)
    compiled_fn = torch.compile(eager)
    compiled_fn(x, b)
    nbytes = 2 * x.numel() * x.element_size()
    out = {}
    for label, fn in (("eager", lambda: eager(x, b)), ("torch.compile", lambda: compiled_fn(x, b)),
                      ("Triton (ours)", lambda: bias_gelu(x, b))):
        t = bench(fn, device="cuda", rep_ms=50).median_s
        out[label] = {"ms": t * 1e3, "GB/s (x read + y written)": nbytes / t / 1e9}
    return out


def inductor_code(rows: int = 64, cols: int = 256, dtype: str = "fp32", device: str | None = None) -> str:
    """The code torch.compile's inductor generates for eager bias + GeLU on `device`: a Triton kernel
    on a GPU, C++ on a CPU. Only the generated kernel's lines (from the first kernel definition)."""
    import torch
    from torch._inductor.utils import run_and_get_code

    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dt = tm.torch_dtype(dtype)
    x = torch.randn(rows, cols, device=dev, dtype=dt)
    b = torch.randn(cols, device=dev, dtype=dt)
    fn = torch.compile(eager)
    _, codes = run_and_get_code(fn, x, b)
    text = "\n".join(codes)
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if "@triton.jit" in ln or "extern \"C\"" in ln or "cpp_fused" in ln), 0)
    return "\n".join(lines[start:start + 40])


@dataclass
class FusedChecks:
    """`check_all`'s results (one dict per dtype), as the lesson shows them."""

    rows: list[dict[str, Any]]

    def table(self):
        """One row per dtype: the shape, where it ran, the largest error against eager, what is allowed."""
        import pandas as pd

        from perflab.core.readout import num

        return pd.DataFrame([{"dtype": c["dtype"], "shape": f"{c['rows']}×{c['cols']}",
                              "ran on": "interpreter (CPU)" if c["interpreter"] else c["device"],
                              "max |error| vs eager": num(c["max_abs_err"]),
                              "allowed": f"{num(c['atol'])} + {num(c['rtol'])}·|y|",
                              "within": "✓" if c["passed"] else "✗"} for c in self.rows])

    @property
    def passed(self) -> bool:
        return all(c["passed"] for c in self.rows)


def checks(rows: int = 64, cols: int = 1000, dtypes: tuple[str, ...] = ("fp32", "fp16", "bf16"), seed: int = 0) -> FusedChecks:
    """`check_all`, typed for the lesson's table."""
    return FusedChecks(check_all(rows, cols, dtypes, seed))


def compiled_text(fc: dict[str, Any]) -> str:
    """One line for `compile_for`'s result: registers, spills, shared memory, warps, blocks per SM and
    the occupancy with the limit that decides it."""
    from perflab.core.readout import percent

    line = (f"bias+GeLU {fc['dtype']} for {fc['target']}" + (f" ({fc['gpu']})" if "gpu" in fc else "")
            + f": {fc['registers']} registers/thread, {fc['spill_bytes']} B spilled, {fc['shared_bytes']} B shared "
            f"memory per block, {fc['num_warps']} warps")
    if "blocks_per_sm" in fc:
        line += (f"; {fc['blocks_per_sm']} blocks/SM, occupancy {percent(fc['occupancy'])} "
                 f"(limited by {fc['limited_by']})")
    return line


@dataclass
class FusedTiming:
    """`time_on_gpu` for a reader: each path's ms and GB/s, or (no GPU) why there is nothing timed."""

    paths: dict[str, dict[str, float]]
    why: str | None = None

    def text(self) -> str:
        return self.why or "the stand-alone gelu(x + bias), timed on this GPU (median of the repeats):"

    def table(self):
        import pandas as pd

        from perflab.core.readout import num

        return pd.DataFrame([{"path": k, "time (ms)": num(v["ms"], 3),
                              "GB/s (x read + y written)": num(v["GB/s (x read + y written)"], 3)}
                             for k, v in self.paths.items()]).set_index("path")


def timing(rows: int = 8192, cols: int = 8192, dtype: str = "bf16") -> FusedTiming:
    """`time_on_gpu`, typed: the paths' timings on a GPU, or why there are none."""
    got = time_on_gpu(rows, cols, dtype)
    return FusedTiming({}, got) if isinstance(got, str) else FusedTiming(got)
