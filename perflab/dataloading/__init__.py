"""Lesson 07 (input pipeline): does the accelerator wait for data?

- `dataset`: a map-style dataset whose per-sample cost is IO latency (a wait) plus transform work (real tensor ops)
- `compute`: a training step's device work calibrated to a chosen time (a matmul loop, not a sleep)
- `starvation`: the model of data wait from load time, compute time, workers and prefetch depth; the recommendation
- `loader`: the measured loop (data wait timed around `next()`), worker sweeps, faults reported in one message,
  and the threads a sample's transform runs on (the loop's own or a worker's)
- `waits`: the measured waits typed (one point per worker count, with the machine's quietness), their tables and verdicts
- `pinned`: pin_memory × non_blocking (GPU), the cost of pinning, what pinning means on a CPU
- `shuffle`: the O(1)-memory LCG permutation: random access, resumable, shardable
- `plots`: lesson 07's figures
- `lab07`: the lab's checks
- `verdict`: lesson 07's live-panel verdict, from the measured rows
- `panel`: lesson 07's live panel: each change measures again
- `sizes`: lesson 07's sizes by where it runs (smoke, a CPU, a GPU)
- `published`: the published figures (the DataLoader tables and the LCG story), from `data/published.json` with their sources
"""

from perflab._lazy import lazy_modules

MODULES = ("dataset", "compute", "starvation", "loader", "waits", "pinned", "published", "shuffle", "plots", "lab07",
           "verdict", "panel", "sizes")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
