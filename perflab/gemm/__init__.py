"""Lessons 04 (tiles and waves) and 05 (SwiGLU width): the shapes GEMMs like.

- `shapes`: tile and wave quantization, Tensor Core alignment, the sizing checklist, sweeps
- `mamf`: the maximum achievable matmul FLOP/s search and its per-device cached ceiling
- `swiglu`: SwiGLU widths near 8/3·h, timed (`data/published_shapes.json`: published figures)
- `attention`: how the head size h/a changes attention's speed
- `plots`: lessons 04–05's figures
- `lab04`, `lab05`, `lab04b`: the labs' checks
- `triton_kernels`, `triton_matmul`: the course's Triton kernels (a tiled matmul, a fused bias + GeLU)
  and how they run: natively on CUDA, in Triton's interpreter on a CPU
- `compiled`, `occupancy`: what the compiler made of a kernel for sm_80/sm_90 (registers, spills,
  shared memory, Tensor Core instructions), blocks per SM, occupancy, waves
- `triton_fused`: the fused bias + GeLU of lesson 10, checked, compiled and timed
- `panel`: the panels of lessons 04 (a compiled tile) and 13 (attention's bytes and the compiled kernel)
- `attention_io`, `flash`, `lab13`: lesson 13, FlashAttention in Triton: its bytes and FLOPs by formula,
  the kernel run, checked, its loads and stores counted, compiled; the lab's checks
"""

from perflab._lazy import lazy_modules

MODULES = ("shapes", "mamf", "swiglu", "attention", "plots", "lab04", "lab05", "lab04b", "triton_kernels",
           "triton_matmul", "compiled", "occupancy", "triton_fused", "panel", "attention_io", "flash", "lab13")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
