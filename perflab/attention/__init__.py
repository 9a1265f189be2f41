"""Lesson 13, FlashAttention in Triton: attention's bytes and FLOPs by formula, the kernel run,
checked, its loads and stores counted, compiled for a GPU; the lesson's panel and the lab's checks.
It uses perflab.gemm's Triton runtime (`triton_matmul`, the kernels in `triton_kernels`), its
compiler reports (`compiled`, `occupancy`) and its wave model (`shapes`); a kernel's fraction of a peak
is divided by perflab.flops's `utilization`, where every MFU is.

- `formulas`: standard and FlashAttention bytes and FLOPs per head, by formula (Dao et al. 2022, 2023)
- `kernel`: the kernel launched (Triton's interpreter on a CPU, natively on a GPU), its inputs and the
  eager path it is held against
- `flash`: the kernel checked against SDPA and timed, and the recompute backward (it re-exports
  `kernel`'s and `counting`'s names)
- `counting`: the kernel's loads and stores counted in the interpreter, and the eager path's bytes
- `compiled`: what the compiler made of the kernel for a GPU: registers, spills, shared memory, occupancy
- `panel`: lesson 13's panel, predicted against counted bytes over s and the compiled kernel's occupancy
- `lab13`: the lab's checks (the online-softmax update of one K/V block)
- `sizes`: lesson 13's sizes by kind of run (smoke, a CPU, a GPU), read once by the lesson
"""

from perflab._lazy import lazy_modules

MODULES = ("formulas", "kernel", "counting", "flash", "compiled", "panel", "lab13", "sizes")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
