"""Lesson 06 (collectives with torchrun): launching ranks, every collective, bandwidth, overlap.

- `torchrun`: run a worker under torchrun (loopback, timeout, every rank's story back)
- `outcome`: what a job did: each rank's outcome, the one-line message, the report
- `ranklogs`: what the ranks left in the run folder, read back as outcomes
- `processes`: every process a job started, tracked, asked for its stack, stopped
- `agent`: torchrun's agent with forked ranks, itself forked from a warm server (torch imported once)
- `primitives`: what each primitive must give, run and checked inside a rank
- `ring`: the ring all-reduce: its schedule, its traffic, a simulation and the real thing
- `collectives`: every primitive verified on N ranks, the lesson's tables and figures
- `busbw`: algbw/busbw as nccl-tests reports them
- `overlap`: can communication hide behind computation (`data/interconnects.json`: link figures)
- `ddp`: DDP in practice, measured inside the ranks, and read back for the lesson
- `summary`: lesson 06's closing table of what was measured
- `sizes`: lesson 06's sizes, by the backend its ranks get (smoke, gloo on CPUs, NCCL on GPUs)
- `workers`: the programs that run inside each rank
- `lab06`: the lab's checks
"""

from perflab._lazy import lazy_modules

MODULES = ("torchrun", "outcome", "ranklogs", "processes", "agent", "primitives", "ring", "collectives", "busbw",
           "overlap", "ddp", "summary", "sizes", "workers", "lab06")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
