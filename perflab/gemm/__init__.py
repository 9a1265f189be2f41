"""Lessons 04 (tiles and waves), 04b (a Triton tile) and 05 (SwiGLU width): the shapes GEMMs like, and
the course's Triton runtime that lessons 10 and 13 use too.

- `shapes`: the names lessons 04–05 call, re-exported from the four below; the roofline per dtype,
  sweeps along one dimension, the GPU a lesson's model describes
- `waves`: tile and wave quantization, the predicted time and its staircase
- `alignment`: Tensor Core alignment per dtype and architecture
- `sizing`: the model-sizing checklist
- `tilefit`: which tile explains a measured staircase
- `mamf`: the maximum achievable matmul FLOP/s search; its best is offered to the device's one ceiling
  store (`perflab.core.ceiling`)
- `swiglu`: SwiGLU widths near 8/3·h, timed (`data/published_shapes.json`: published figures)
- `swiglu_model`: SwiGLU widths before measuring: released models', ⌊8/3·h⌋'s alignment, the candidates'
  model-only figures, a published search (lesson 05's tables)
- `heads`: how the head size h/a changes attention's speed (lesson 04)
- `plots`: lessons 04–05's figures
- `lab04`, `lab05`, `lab04b`: the labs' checks
- `triton_kernels`, `triton_matmul`: the course's Triton kernels (a tiled matmul; lesson 10's fused bias +
  GeLU and lesson 13's FlashAttention, wrapped in `perflab.compiler.fused` and `perflab.attention.flash`)
  and how they run: natively on CUDA, in Triton's interpreter on a CPU
- `compiled`, `occupancy`: what the compiler made of a kernel for sm_80/sm_90 (registers, spills,
  shared memory, Tensor Core instructions), blocks per SM, occupancy, waves
- `panel`: lesson 04's panel (a compiled tile)
- `sizes`: the lessons' sizes by kind of run (smoke, a CPU, a GPU): lesson 04's `TILES`, lesson 05's `SWIGLU`
"""

from perflab._lazy import lazy_modules

MODULES = ("shapes", "waves", "alignment", "sizing", "tilefit", "mamf", "swiglu", "swiglu_model", "heads", "plots", "lab04", "lab05", "lab04b", "triton_kernels",
           "triton_matmul", "compiled", "occupancy", "panel", "sizes")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
