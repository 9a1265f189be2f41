"""The `comm` fault's rank: a training step whose gradients are all-reduced one tensor at a time
after backward (nothing overlapped), or with DDP (`--fixed`). Rank 0 profiles and exports the trace.

    python -m perflab.distributed... launch("perflab.profiling.comm_worker", nproc=2, args=[...])
"""

from __future__ import annotations


def body(ctx, a):
    import torch

    from perflab.distributed.workers.runtime import init_group
    from perflab.profiling.faults import make_step, run_profiled
    from perflab.workload.models import preset

    torch.set_num_threads(1)
    ctx.step("init")
    init_group(ctx)
    _, _, loader, step = make_step(preset(a.preset), "comm", fixed=a.fixed, batch=a.batch, seq=a.seq,
                                   device=ctx.device, seed=0, world=ctx.world_size)
    ctx.step("profile")
    if ctx.rank == 0:
        walls = run_profiled(step, loader, steps=a.steps, trace_out=a.trace_out)
    else:
        import tempfile
        from pathlib import Path

        walls = run_profiled(step, loader, steps=a.steps, trace_out=Path(tempfile.mkdtemp()) / "rank1.json",
                             record_shapes=False)
    return {"rank": ctx.rank, "wall_s": walls}


def arguments(p) -> None:
    p.add_argument("--preset", default="tiny-gpt")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--trace-out", required=True)
    p.add_argument("--fixed", action="store_true")


def main(argv: list[str] | None = None) -> None:
    from perflab.distributed.workers import runtime

    runtime.main("perflab.profiling.comm_worker", arguments, body, argv)


if __name__ == "__main__":
    main()
