"""DDP in practice: the memory of joining, main vs local-main, no_sync, communication hooks.

    torchrun --nproc-per-node 2 -m perflab.distributed.workers.ddp [--experiments init_memory,roles,accumulation,hooks]

Runs the experiments of perflab/distributed/ddp.py in this order; the memory measurement comes first because
it has to look at the process before the group exists.
"""

from __future__ import annotations

# DDP's constructor imports torch._dynamo (1.5-3 s on 2 cores). Imported here, a forked launch
# (perflab.distributed.agent imports the worker before it forks) pays for it once per node, not per rank.
import torch._dynamo  # noqa: F401

from perflab.core.jsonable import JSON


def body(ctx, a) -> JSON:
    """This rank's report, as its result file holds it: each experiment under its name (perflab.distributed.ddp)."""
    import time

    from perflab.distributed import ddp
    from perflab.distributed.workers.runtime import init_group

    want = set(a.experiments.split(","))
    out = {"rank": ctx.rank, "backend": ctx.backend, "device": str(ctx.device), "seconds": {}}

    def timed(name, fn):
        ctx.step(name)
        t0 = time.perf_counter()
        value = fn()
        out["seconds"][name] = time.perf_counter() - t0
        return value

    if "init_memory" in want:
        out["init_memory"] = timed("init_memory", lambda: ddp.init_memory(ctx))
    else:
        timed("init", lambda: init_group(ctx))
    if "roles" in want:
        out["roles"] = timed("roles", lambda: ddp.roles(ctx))
    if "accumulation" in want:
        out["grad_accumulation"] = timed("gradient accumulation", lambda: ddp.grad_accumulation(
            ctx, gas=a.gas, steps=a.steps, width=a.width))
    if "hooks" in want:
        out["comm_hooks"] = timed("communication hooks", lambda: ddp.comm_hooks(ctx, steps=a.hook_steps, width=a.width))
    return out


def arguments(p) -> None:
    p.add_argument("--experiments", default="init_memory,roles,accumulation,hooks")
    p.add_argument("--gas", type=int, default=4, help="micro-batches per optimizer step")
    p.add_argument("--steps", type=int, default=3, help="optimizer steps per accumulation variant")
    p.add_argument("--hook-steps", type=int, default=6, help="steps per communication hook (≥ 4)")
    p.add_argument("--width", type=int, default=512, help="width of the toy MLP")


def main(argv: list[str] | None = None) -> None:
    from perflab.distributed.workers import runtime

    runtime.main("perflab.distributed.workers.ddp", arguments, body, argv, init=False)


if __name__ == "__main__":
    main()
