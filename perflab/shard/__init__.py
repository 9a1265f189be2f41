"""Lesson 12 (sharding): FSDP2 (ZeRO-3), DTensor tensor parallelism and pipelining, measured on
torch.distributed and held against their predictions.

- `formulas`: what each strategy should cost per rank (FSDP's memory from lesson 03's ZeRO-3
  estimate in perflab.memory, FSDP's peak, collective calls and bytes, the bubble in both conventions
  ((p−1)/(m+p−1) of the step, Megatron-LM's (p−1)/m of the ideal time) and interleaved, a pipeline
  timeline replayed with instant hand-offs); no ranks needed
- `worker`: the program each rank runs (ranks are started by perflab.distributed's torchrun launcher and
  report through its worker runtime)
- `run`: `shard(strategy, nproc)` / `shard_many`: launch, then one row per rank with the prediction
  beside each measurement, and the checks with their tolerances
- `report`: what a run found, typed: the rows, the checks, each strategy's details, the tables
- `netns`: two nodes on one machine, each its own network namespace, joined by
  `torchrun --nnodes 2 --rdzv-backend c10d`
- `costmodel`: what the collectives cost in time (bytes ÷ lesson 06's busbw), ZeRO-3's 3Ψ against
  DDP's 2Ψ of traffic per step, and whether prefetch hides a unit's all-gather
- `published`: torchtitan's FSDP, pipeline and async-TP tables with their source
- `plots`: the lesson's figures
- `lab12`: the lab's checks
- `sizes`: lesson 12's sizes by kind of run (smoke, and the rest), read once by the lesson
"""

from perflab._lazy import lazy_modules

MODULES = ("formulas", "costmodel", "worker", "run", "report", "netns", "published", "plots", "lab12", "sizes")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
