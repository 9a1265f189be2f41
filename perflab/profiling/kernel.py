"""A custom fused op in the trace: `torch.utils.cpp_extension.load_inline`, timed against eager.

    >>> k = build(allow_compile=True)     # compiles once (tens of seconds on a small CPU), then cached
    >>> k.skip or k.fused_gelu_bias(x, b)

The op is bias + tanh-GELU in one pass over memory (eager PyTorch runs it as several ops, each
reading and writing the whole tensor). C++ with an OpenMP loop on the CPU; on a GPU the same
function would be a CUDA kernel (`cuda_sources=`), which this course does not build or claim.
It is wrapped in `record_function("perflab::fused_gelu_bias")` so it shows by name in a trace.

Building needs a C++ compiler and ninja and takes a while; `build(allow_compile=False)` loads it
only if a build is already in torch's extension cache, and otherwise returns a skip with the reason.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NAME = "perflab_fused_gelu_bias_v2"
CPP = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor fused_gelu_bias(torch::Tensor x, torch::Tensor bias) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat && bias.scalar_type() == torch::kFloat, "fp32 only");
  TORCH_CHECK(x.is_contiguous() && bias.is_contiguous() && x.size(-1) == bias.size(0), "x [..., n], bias [n]");
  auto y = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* bp = bias.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t n = bias.size(0), rows = x.numel() / n;
  const float c = 0.7978845608028654f;  // sqrt(2 / pi)
  #pragma omp parallel for if (rows * n > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xp + r * n;
    float* yr = yp + r * n;
    for (int64_t j = 0; j < n; ++j) {  // one read of x and bias, one write of y: a single pass over memory
      const float v = xr[j] + bp[j];
      yr[j] = 0.5f * v * (1.0f + std::tanh(c * (v + 0.044715f * v * v * v)));
    }
  }
  return y;
}
"""


@dataclass
class Kernel:
    module: Any
    skip: str | None

    def fused_gelu_bias(self, x, bias):
        from torch.profiler import record_function

        with record_function("perflab::fused_gelu_bias"):
            return self.module.fused_gelu_bias(x.contiguous(), bias.contiguous())


def eager_gelu_bias(x, bias):
    import torch.nn.functional as F

    return F.gelu(x + bias, approximate="tanh")


def build_dir() -> Path:
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory(NAME, verbose=False))


def is_built() -> bool:
    try:
        d = build_dir()
    except Exception:
        return False
    return any(d.glob(f"{NAME}*.so"))


def compiler_missing() -> str | None:
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None and shutil.which("g++") is None:
        return "no C++ compiler on PATH (install g++ or clang)"
    if importlib.util.find_spec("ninja") is None and shutil.which("ninja") is None:
        return "ninja is not installed (torch.utils.cpp_extension needs it)"
    return None


def build(allow_compile: bool = True, verbose: bool = False) -> Kernel:
    """The compiled op, or a Kernel whose `skip` says why there is none."""
    reason = compiler_missing()
    if reason:
        return Kernel(None, reason)
    if not allow_compile and not is_built():
        return Kernel(None, "not built yet, and compiling takes tens of seconds on a small CPU: "
                            "run with smoke=False (or build(allow_compile=True)) once; later runs load the cached build")
    if not allow_compile:  # a build is cached: import it without asking ninja to check it (seconds saved)
        try:
            from torch.utils.cpp_extension import _import_module_from_library

            return Kernel(_import_module_from_library(NAME, str(build_dir()), True), None)
        except Exception:  # noqa: BLE001 - fall back to the checked load below
            pass
    from torch.utils.cpp_extension import load_inline

    try:
        mod = load_inline(NAME, cpp_sources=CPP, functions=["fused_gelu_bias"], extra_cflags=["-O3", "-fopenmp"],
                          extra_ldflags=["-fopenmp"], verbose=verbose)
    except Exception as e:  # a broken toolchain is a reason to skip, not a crash of the lesson
        from perflab.core.errors import one_line

        return Kernel(None, f"the build failed: {one_line(e)}")
    return Kernel(mod, None)


@dataclass
class Comparison:
    """Eager against fused bias + GELU on the CPU."""

    eager_s: float  # median seconds per call
    fused_s: float
    speedup: float  # eager_s / fused_s
    max_abs_diff: float  # largest |fused − eager| over the output
    in_trace: bool  # whether the profiler names the fused op (perflab::fused_gelu_bias)


    def text(self) -> str:
        """The comparison in a line, and why the fused op can lose on a CPU when it does."""
        from perflab.core.readout import num, seconds

        line = (f"eager {seconds(self.eager_s)}, fused {seconds(self.fused_s)} ({num(self.speedup)}×), "
                f"max |diff| {num(self.max_abs_diff)}, named in the trace: {self.in_trace}")
        if self.speedup < 1:
            line += ("\nSlower here: fusing saved passes over memory, but eager's GELU is vectorised (SIMD tanh) and "
                     "this loop calls the scalar std::tanh — on a CPU that can cost more than the memory traffic saved.")
        return line


def demo(*, allow_compile: bool, rows: int, cols: int = 1024, rep_ms: float = 50) -> str:
    """Lesson 09's section 6: build (or load) the kernel and compare it with eager, or say why it was skipped."""
    from perflab.profiling.quiet import quiet_profiler

    k = build(allow_compile=allow_compile)
    if k.skip:
        return f"skipped: {k.skip}"
    with quiet_profiler():  # compare profiles the kernel once: keep the profiler's own lines off stderr
        return compare(k, rows=rows, cols=cols, rep_ms=rep_ms).text()


def compare(k: Kernel, rows: int = 4096, cols: int = 1024, rep_ms: float = 50) -> Comparison:
    """Eager vs fused: seconds per call, max difference, and whether the op is named in a trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from perflab.core.timing import bench

    x = torch.randn(rows, cols)
    b = torch.randn(cols)
    eager = bench(lambda: eager_gelu_bias(x, b), device="cpu", warmup_ms=2, rep_ms=rep_ms)
    fused = bench(lambda: k.fused_gelu_bias(x, b), device="cpu", warmup_ms=2, rep_ms=rep_ms)
    diff = (k.fused_gelu_bias(x, b) - eager_gelu_bias(x, b)).abs().max().item()
    with profile(activities=[ProfilerActivity.CPU]) as p:
        k.fused_gelu_bias(x, b)
    names = {e.name for e in p.events() or []}
    return Comparison(eager.median_s, fused.median_s, eager.median_s / fused.median_s, diff,
                      "perflab::fused_gelu_bias" in names)
