"""Lesson 13, FlashAttention in Triton: attention's bytes and FLOPs by formula, the kernel run,
checked, its loads and stores counted, compiled for a GPU; the lesson's panel and the lab's checks.
It uses perflab.gemm's Triton runtime (`triton_matmul`, the kernels in `triton_kernels`), its
compiler reports (`compiled`, `occupancy`) and its wave model (`shapes`); a kernel's fraction of a peak
is divided by perflab.flops's `utilization`, where every MFU is.

- `formulas`: standard and FlashAttention bytes and FLOPs per head, by formula (Dao et al. 2022, 2023)
- `flash`: the Triton kernel run, checked against SDPA, counted in the interpreter and timed
- `compiled`: what the compiler made of the kernel for a GPU: registers, spills, shared memory, occupancy
- `panel`: lesson 13's panel, predicted against counted bytes over s and the compiled kernel's occupancy
- `lab13`: the lab's checks (the online-softmax update of one K/V block)
"""

from perflab._lazy import lazy_modules

MODULES = ("formulas", "flash", "compiled", "panel", "lab13")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
