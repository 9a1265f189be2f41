"""Every collective primitive on every rank, checked against what it must give; then the ring.

    torchrun --nproc-per-node 4 -m perflab.distributed.workers.collectives [--check-k 4096] [--slow-s 0.2]

Each rank reports, per primitive: whether the backend has it (else its equivalent stood in), its
small demo (before/after/expected), and whether a large float64 check matched exactly; then the
barrier with slow ranks and the ring all-reduce (point-to-point sends) against `all_reduce`.
"""

from __future__ import annotations

from perflab.core.jsonable import JSON, to_json


def body(ctx, a) -> JSON:
    """This rank's report, as its result file holds it (read back by `collectives.RankReport.from_json`)."""
    from perflab.distributed import primitives as C
    from perflab.distributed.ring import check_ring

    out: JSON = {"rank": ctx.rank, "world_size": ctx.world_size, "local_rank": ctx.local_rank, "node": ctx.node,
                 "backend": ctx.backend, "device": str(ctx.device)}
    prims = tuple(p for p in C.PRIMITIVES if p in a.only.split(",")) if a.only else C.PRIMITIVES
    results: JSON = {}
    for p in prims:
        ctx.step(p)
        checked = C.check_all(ctx.rank, ctx.world_size, device=ctx.device, demo_k=a.demo_k, check_k=a.check_k,
                              root=a.root, primitives=(p,))
        results.update(to_json(checked))
    out["primitives"] = results
    if a.slow_s > 0:
        ctx.step("barrier with slow ranks")
        out["barrier_timing"] = to_json(C.barrier_with_slow_ranks(ctx.rank, ctx.world_size, a.slow_s))
    if a.ring_numel > 0:
        ctx.step("ring all-reduce")
        out["ring"] = to_json(check_ring(ctx.rank, ctx.world_size, a.ring_numel, device=ctx.device))
    out["listening"] = listening_addresses()
    return out


def listening_addresses() -> list[str]:
    """TCP addresses this rank and its torchrun agent listen on (all should be loopback)."""
    import os

    try:
        import psutil
    except ImportError:  # pragma: no cover
        return []
    found = set()
    for pid in (os.getpid(), os.getppid()):
        try:
            conns = psutil.Process(pid).net_connections(kind="tcp")
        except (psutil.Error, OSError):
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN and c.laddr:
                found.add(f"{c.laddr.ip}:{c.laddr.port}")
    return sorted(found)


def arguments(p) -> None:
    p.add_argument("--demo-k", type=int, default=2, help="elements per rank in the demo buffers (default 2)")
    p.add_argument("--check-k", type=int, default=4096, help="elements per rank in the float64 check (default 4096)")
    p.add_argument("--root", type=int, default=0, help="root rank of broadcast/reduce/gather/scatter")
    p.add_argument("--slow-s", type=float, default=0.2, help="rank r works r×this before a barrier (0: skip)")
    p.add_argument("--ring-numel", type=int, default=4096, help="elements in the ring all-reduce check (0: skip)")
    p.add_argument("--only", default="", help="comma-separated primitives (default: all)")


def main(argv: list[str] | None = None) -> None:
    from perflab.distributed.workers import runtime

    runtime.main("perflab.distributed.workers.collectives", arguments, body, argv)


if __name__ == "__main__":
    main()
