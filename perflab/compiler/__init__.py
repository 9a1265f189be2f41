"""Lesson 10 (torch.compile): speed and its price, graph breaks, recompiles, numeric parity.

- `models`: small Llama-like models for the lesson: one with deliberate graph breaks (a print,
  `.item()`, data-dependent control flow, complex-number RoPE) and the fixed one (real RoPE)
- `breaks`: `torch._dynamo.explain` as a report (count, reasons, where), recompile counting,
  loading a model from `MODULE:FACTORY`
- `speed`: eager vs compiled training step, compile time cold and warm, break-even steps, modes
- `parity`: N steps eager vs compiled from one seed and data, per-step loss differences, tolerance
- `checkpointing`: none / full / selective activation checkpointing, eager and compiled, with
  MFU/HFU from `perflab.flops` and peak memory from `perflab.memory`'s allocation probe
  (`data/published_compile_mfu.json`: published figures)
- `plots`: lesson 10's figures (eager vs compiled loss curves)
- `lab10`: the lab's checks (remove a model's graph breaks, same logits)
- `explain`: lesson 10's explain steps, computed from the measurement (speed, recompiles)
- `panel`: lesson 10's panel (mode, dtype, dynamic shapes → call times and recompiles)
- `fused`: the fused bias + GeLU in Triton, checked in the interpreter, compiled for sm_90, timed on a
  GPU (its kernel is in `perflab.gemm.triton_kernels`, run by perflab.gemm's Triton runtime)
- `sizes`: lesson 10's sizes by kind of run (smoke, a CPU, a GPU), read once by the lesson

The inductor's on-disk cache is `TORCHINDUCTOR_CACHE_DIR` when set, otherwise torch's default
(`/tmp/torchinductor_$USER`); `speed.cache_dir()` says which and `speed.clear_cache()` empties it.
"""

from perflab._lazy import lazy_modules

MODULES = ("models", "breaks", "speed", "parity", "checkpointing", "plots", "lab10", "explain", "panel", "fused", "sizes")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
