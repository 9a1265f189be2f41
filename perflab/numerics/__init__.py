"""Lesson 16, the numbers you train in: fp32, TF32, bf16, fp16 and fp8 by their bit layouts, one real
training step's tensors cast through each, scaled fp8 (tensorwise, rowwise, blocks, MX), fp8's speed
measured and predicted, loss parity with an fp8 emulation, and MFU when GEMMs run in two formats.
It uses perflab.flops's `mfu` (`Basis`, `utilization`: the course's one division by a peak).

- `formats`: each format's largest value, smallest normal and subnormal, spacing near 1, from its layout
- `cast`: a tensor cast into a format and back: error, overflow, flush to zero, subnormals
- `step`: one training step's weights, activations and gradients; what a loss scale does in fp16
- `scaling`: fp8 with one scale per tensor, row or block (1×128, 128×128, MX 1×32), outliers, E4M3 vs E5M2
- `speed`: bf16 against fp8 `torch._scaled_mm` measured here, and the roofline prediction for a GPU
- `published`: published fp8 training speedups and recipes, with their sources (`data/published_fp8.json`)
- `parity`: fp32, bf16 autocast and emulated fp8 training runs, against the distance between two fp32 runs from different random seeds
- `utilization`: MFU of a step with fp8 and bf16 GEMMs, against the bf16 peak or each dtype's own
- `sizes`: the lesson's sizes for smoke runs, a CPU and a GPU
- `plots`: the lesson's figures
- `panel`: the lesson's panel (granularity and outlier size)
- `lab16`: the lab's checks (a rowwise fp8 quantizer, its inverse and an fp8 linear layer)
"""

from perflab._lazy import lazy_modules

MODULES = ("formats", "cast", "step", "scaling", "speed", "published", "parity", "utilization", "sizes", "plots",
           "panel", "lab16")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
