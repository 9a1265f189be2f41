"""Lesson 15 (your job at scale): a cluster's per-GPU memory and step time, predicted on a laptop.

- `target`: what the plan builds (a factory on `meta`, or a Hugging Face config with its overrides
  checked), set up as a GPU's training step runs it (no KV cache, causal attention in the kernel)
- `kernels`: the GPU's kernels on this machine's fake tensors (FlashAttention's outputs, not the CPU's)
- `tp`: tensor parallelism with or without sequence and loss parallelism, as torchtitan applies it
- `step`: the model built on `meta`, sharded (FSDP2, tensor parallel) on a fake process group, one
  training step under torch's `FSDPMemTracker` / `MemTracker` and `RuntimeEstimator` in `FakeTensorMode`
- `scale`: a deep model planned from two and three of its blocks, extrapolated to all of them
- `cluster`: the GPU, its nodes and NICs, and a collective's bus bandwidth and latency across them
- `cost`: each operator's roofline time, each collective's time, and the two-stream replay (hidden and
  exposed)
- `recompute`: activation checkpointing: the whole block, or the operators torch's `SACEstimator` says
  free the most memory per second of recompute, chosen to fit a budget
- `run`: `plan(...)`: the per-GPU peak by part, whether it fits and what to change, step time,
  tokens/s and MFU; its JSON and table
- `published`: torchtitan's published Llama 3.1 8B run (lesson 12's data) and MosaicML llm-foundry's
  MPT throughput table beside the plan
- `compare`: the plan beside published runs nobody here chose (torchtitan's tables, llm-foundry's MPT
  rows, ZeRO's Figure 1, Korthikanti et al.'s activations), row by row
- `traces`: the job traces lesson 15 reads, shipped in perflab/plan/data/traces/ with their sources
- `sizes`: lesson 15's sizes by where it runs
- `plots`: the lesson's figure (memory by part against the GPU's) and its panel
- `lab15`: the lab's checks

Uses other topics' formulas, never their figures, widgets or lab checks: perflab.audit (the target:
a factory, loaded and called as `perflab audit` does it but on `meta`, or a Hugging Face config),
perflab.distributed (lesson 06's bus factors and link table), perflab.flops (the FLOP count of an
operator, and `mfu.utilization`), perflab.shard (lesson 12's tensor-parallel plan of perflab's
Transformer and its checks), perflab.memory (the memory lesson's bytes per parameter, named among lab
15's forbidden answers).
"""

from perflab._lazy import lazy_modules

MODULES = ("target", "kernels", "tp", "step", "scale", "cluster", "cost", "recompute", "run", "published",
           "compare", "traces", "sizes", "plots", "lab15")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
