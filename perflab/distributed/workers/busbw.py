"""Time one collective over a range of message sizes, nccl-tests style (algbw and busbw).

    torchrun --nproc-per-node 2 -m perflab.distributed.workers.busbw --op all_reduce --sizes 1024,1048576 [--out rows.jsonl]

For every size: check the collective gives the right answer on known data, time it (all ranks
start together; the slowest rank's mean per call counts), and convert to algbw/busbw. Rank 0
appends one JSON line per size to --out as soon as it is measured, so a job that dies part-way
still leaves what it measured.
"""

from __future__ import annotations

import json

from perflab.core.jsonable import JSON


def body(ctx, a) -> JSON:
    """Rank 0's rows, one per size, as its result file holds them (each also appended to --out)."""
    import torch

    from perflab.distributed import busbw as B

    op = B.normalize_op(a.op)
    rows = []
    for s in [int(x) for x in a.sizes.split(",") if x]:
        ctx.step(f"{op} {s} B")
        run, check = B.make_op(op, s, ctx.world_size, ctx.rank, ctx.device)
        correct = torch.tensor([1.0 if check() else 0.0], device=ctx.device)
        torch.distributed.all_reduce(correct, op=torch.distributed.ReduceOp.MIN)
        seconds, iters = B.time_op(run, ctx.device, budget_s=a.budget_s)
        row = {"bytes": s, "seconds": seconds, "iters": iters, "correct": bool(correct.item() == 1.0),
               "algbw_gbps": B.algbw_gbps(s, seconds), "busbw_gbps": B.busbw_gbps(op, s, seconds, ctx.world_size),
               "backend": ctx.backend, "device": str(ctx.device)}
        rows.append(row)
        if ctx.rank == 0 and a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")
        del run, check
    return {"op": op, "rows": rows} if ctx.rank == 0 else {"op": op}


def arguments(p) -> None:
    p.add_argument("--op", default="all_reduce")
    p.add_argument("--sizes", required=True, help="comma-separated sizes S in bytes (nccl-tests' convention)")
    p.add_argument("--budget-s", type=float, default=0.2, help="time to spend timing each size (seconds)")
    p.add_argument("--out", default="", help="append one JSON line per size here (rank 0)")


def main(argv: list[str] | None = None) -> None:
    from perflab.distributed.workers import runtime

    runtime.main("perflab.distributed.workers.busbw", arguments, body, argv)


if __name__ == "__main__":
    main()
