"""Lesson 06 (collectives with torchrun): launching ranks, every collective, bandwidth, overlap.

- `torchrun`: run a worker under torchrun (loopback, timeout, every rank's story back)
- `agent`: torchrun's agent with forked ranks, itself forked from a warm server (torch imported once)
- `collectives`: what each primitive must give, and a ring all-reduce
- `busbw`: algbw/busbw as nccl-tests reports them
- `overlap`: can communication hide behind computation (`data/interconnects.json`: link figures)
- `ddp`: DDP in practice, measured inside the ranks
- `workers`: the programs that run inside each rank
- `lab06`: the lab's checks
"""

from perflab._lazy import lazy_modules

MODULES = ("torchrun", "agent", "collectives", "busbw", "overlap", "ddp", "workers", "lab06")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
