"""Lesson 03 (memory anatomy): predict a training step's memory, then measure it phase by phase.

- `estimate`: model states (ZeRO 0–3, optimizers), activations, a step's phases predicted
- `batch`: the MBS/GBS/DP/TP/PP/GAS arithmetic (`estimate` re-exports it)
- `published`: the ZeRO paper's Figure 1 and Korthikanti et al.'s Table 2 beside perflab's estimate
  (`data/memory_references.json`)
- `probe`: the allocation probe: what a function allocates, and a step's memory measured per phase
  (build → forward → backward → step), to the byte, against the phase model
- `saved`: what the forward keeps for the backward, storage by storage, against the estimate
- `usage`: what the process (RSS, its peak) and the device (NVML, the driver) say is in use
- `recompute`: gradient checkpointing measured: activation memory and time with and without recomputation
- `cells`: ipyexperiments' per-cell memory report in a notebook, set up to behave
- `gpu`: what no formula predicts on a GPU: kernels, CUDA context, NCCL, fragmentation
- `plots`: lesson 03's figures and widget view
- `lab03`: the lab's checks
- `sizes`: lesson 03's sizes by kind of run (smoke, a CPU, a GPU)

Uses `perflab.flops` (its step-time prediction, `flops.step`) to keep the widget's measurement
within a slider's budget.
"""

from perflab._lazy import lazy_modules

MODULES = ("estimate", "batch", "published", "probe", "saved", "usage", "recompute", "cells", "gpu", "plots", "lab03",
           "sizes")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
