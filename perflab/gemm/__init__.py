"""Lessons 04 (tiles and waves) and 05 (SwiGLU width): the shapes GEMMs like.

- `shapes`: tile and wave quantization, Tensor Core alignment, the sizing checklist, sweeps
- `mamf`: the maximum achievable matmul FLOP/s search and its per-device cached ceiling
- `swiglu`: SwiGLU widths near 8/3·h, timed (`data/published_shapes.json`: published figures)
- `attention`: how the head size h/a changes attention's speed
- `plots`: lessons 04–05's figures
- `lab04`, `lab05`: the labs' checks
"""

from perflab._lazy import lazy_modules

MODULES = ("shapes", "mamf", "swiglu", "attention", "plots", "lab04", "lab05")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
