"""Lesson 15 (your job at scale): a cluster's per-GPU memory and step time, predicted on a laptop.

- `step`: the model built on `meta`, sharded (FSDP2, tensor parallel) on a fake process group, one
  training step under torch's `FSDPMemTracker` / `MemTracker` and `RuntimeEstimator` in `FakeTensorMode`
- `cost`: the cluster (the GPU's peaks and bandwidth, its links), each operator's roofline time, each
  collective's time from lesson 06's bus-bandwidth model, and the two-stream replay (hidden and exposed)
- `recompute`: activation checkpointing: the whole block, or the operators torch's `SACEstimator` says
  free the most memory per second of recompute, chosen to fit a budget
- `run`: `plan(...)`: the per-GPU peak by part, whether it fits and what to change, step time,
  tokens/s and MFU; its JSON and table
- `published`: torchtitan's published Llama 3.1 8B run (lesson 12's data) and MosaicML llm-foundry's
  MPT throughput table beside the plan
- `plots`: the lesson's figure (memory by part against the GPU's) and its panel
- `lab15`: the lab's checks

Uses other topics' formulas, never their figures, widgets or lab checks: perflab.audit (the target:
a factory or a Hugging Face config), perflab.distributed (lesson 06's bus factors and link table),
perflab.flops (the FLOP count of an operator), perflab.shard (lesson 12's tensor-parallel plan of
perflab's Transformer and its checks), perflab.memory (the memory lesson's bytes per parameter, named
among lab 15's forbidden answers).
"""

from perflab._lazy import lazy_modules

MODULES = ("step", "cost", "recompute", "run", "published", "plots", "lab15")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
