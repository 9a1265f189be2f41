"""A worker that goes wrong on purpose: one rank raises, or one rank hangs, while the others wait.

    torchrun --nproc-per-node 4 -m perflab.distributed.workers.faulty --raise-on 2
    torchrun --nproc-per-node 4 -m perflab.distributed.workers.faulty --hang-on 1

Every rank meets the others at a barrier, then does its "compute"; the chosen rank raises (or
sleeps for ever) there, and the others wait for it in an all-reduce. This is what a crashed or
stuck rank looks like from the launcher (`perflab.distributed.torchrun.launch` reports it; the notebook shows it).
"""

from __future__ import annotations

import time


def body(ctx, raise_on: int | None, hang_on: int | None, work_s: float):
    import torch
    import torch.distributed as dist

    ctx.step("barrier")
    dist.barrier()
    ctx.step("compute")
    print(f"rank {ctx.rank}: computing for {work_s:g} s", flush=True)
    time.sleep(work_s)
    if ctx.rank == raise_on:
        raise ValueError(f"simulated failure in rank {ctx.rank}'s compute step")
    if ctx.rank == hang_on:
        print(f"rank {ctx.rank}: stuck (sleeping until stopped)", flush=True)
        while True:
            time.sleep(1.0)
    ctx.step("all_reduce")
    x = torch.ones(4, device=ctx.device) * (ctx.rank + 1)
    dist.all_reduce(x)
    print(f"rank {ctx.rank}: all_reduce gave {x.tolist()}", flush=True)
    return {"sum": x.tolist()}


def arguments(p) -> None:
    p.add_argument("--raise-on", type=int, default=None, help="the rank that raises ValueError in its compute step")
    p.add_argument("--hang-on", type=int, default=None, help="the rank that never finishes its compute step")
    p.add_argument("--work-s", type=float, default=0.2, help="seconds of pretend compute on every rank")


def main(argv: list[str] | None = None) -> None:
    from perflab.distributed.workers import runtime

    runtime.main("perflab.distributed.workers.faulty", arguments, lambda ctx, a: body(ctx, a.raise_on, a.hang_on, a.work_s), argv)


if __name__ == "__main__":
    main()
