"""Every collective primitive, what each rank must hold after it, run and checked inside a rank.

The functions that move data (`run_primitive`, `check_all`, `barrier_with_slow_ranks`) run inside a
rank, in a process group (see perflab/distributed/workers/collectives.py); `rank_input`, `expected`
and `barrier_ok` are plain arithmetic that a test or a notebook can call anywhere.

Inputs are chosen so a table of numbers tells the story: rank r holds `10·r + [1, 2, ...]`, so the
tens digit says which rank a value came from. For each primitive `expected()` gives, in closed
form, what every rank must hold afterwards; a primitive is verified when every rank's buffer equals
it exactly (small integers are exact in float32, and the large checks run in float64).

Where a backend lacks a primitive, `run_primitive(..., how="equivalent")` builds it from others
(e.g. reduce-scatter = all-reduce, then keep your own chunk) and the report says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

PRIMITIVES = ("broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter", "reduce_scatter",
              "all_to_all", "barrier")

DESCRIPTIONS = {
    "broadcast": "the root's buffer is copied to every rank",
    "reduce": "the sum of every rank's buffer lands on the root only",
    "all_reduce": "the sum of every rank's buffer lands on every rank",
    "gather": "every rank's buffer is concatenated, in rank order, on the root",
    "all_gather": "every rank's buffer is concatenated, in rank order, on every rank",
    "scatter": "the root's buffer is cut into N chunks; rank j receives chunk j",
    "reduce_scatter": "the N buffers are summed and cut into N chunks; rank j receives chunk j of the sum",
    "all_to_all": "chunk j of rank r goes to rank j (a transpose: every rank sends N chunks, receives N)",
    "barrier": "nobody leaves until everybody has arrived",
}

EQUIVALENTS = {
    "broadcast": "point-to-point: the root sends its buffer to every other rank",
    "reduce": "all_reduce (every rank gets the sum; only the root's copy is used)",
    "all_reduce": "reduce to the root, then broadcast from it",
    "gather": "all_gather (the root keeps it, the others drop it)",
    "all_gather": "N broadcasts, one from each rank",
    "scatter": "broadcast the whole buffer, each rank keeps its own chunk",
    "reduce_scatter": "all_reduce, each rank keeps its own chunk",
    "all_to_all": "N scatters, one from each rank",
    "barrier": "all_reduce of a one-element tensor",
}

_UNSUPPORTED = ("not support", "unsupported", "not implemented", "does not support", "no support",
                "not yet supported", "unimplemented")


# ----------------------------------------------------------------------------- what each rank holds
def _vals(start, count: int, dtype, device):
    import torch

    return torch.arange(1, count + 1, dtype=dtype, device=device) + start


def rank_input(primitive: str, rank: int, n: int, k: int, *, root: int = 0, dtype=None, device="cpu"):
    """What `rank` holds before `primitive` (a tensor; for the root of scatter, the whole buffer)."""
    import torch

    dtype = dtype or torch.float32
    if primitive in ("broadcast", "reduce", "all_reduce", "gather", "all_gather"):
        return _vals(10 * rank, k, dtype, device)
    if primitive == "scatter":
        return _vals(0, n * k, dtype, device) if rank == root else torch.zeros(k, dtype=dtype, device=device)
    if primitive == "reduce_scatter":
        return (rank + 1) * _vals(0, n * k, dtype, device)
    if primitive == "all_to_all":
        return torch.tensor([10 * rank + j for j in range(n) for _ in range(k)], dtype=dtype, device=device)
    if primitive == "barrier":
        return torch.zeros(0, dtype=dtype, device=device)
    raise KeyError(f"unknown primitive {primitive!r}: one of {', '.join(PRIMITIVES)}")


def expected(primitive: str, rank: int, n: int, k: int, *, root: int = 0, dtype=None, device="cpu"):
    """What `rank` must hold after `primitive`, in closed form (None: unspecified, e.g. reduce off the root)."""
    import torch

    dtype = dtype or torch.float32
    if primitive == "broadcast":
        return _vals(10 * root, k, dtype, device)
    if primitive in ("reduce", "all_reduce"):
        if primitive == "reduce" and rank != root:
            return None
        # sum over r of (10 r + i) = 10·n(n−1)/2 + n·i
        return 10 * n * (n - 1) // 2 + n * _vals(0, k, dtype, device)
    if primitive in ("gather", "all_gather"):
        if primitive == "gather" and rank != root:
            return None
        return torch.cat([_vals(10 * r, k, dtype, device) for r in range(n)])
    if primitive == "scatter":
        return _vals(rank * k, k, dtype, device)
    if primitive == "reduce_scatter":
        # sum over r of (r+1)·chunk_j = n(n+1)/2 · [j·k+1 ... (j+1)·k]
        return (n * (n + 1) // 2) * _vals(rank * k, k, dtype, device)
    if primitive == "all_to_all":
        return torch.tensor([10 * r + rank for r in range(n) for _ in range(k)], dtype=dtype, device=device)
    if primitive == "barrier":
        return torch.zeros(0, dtype=dtype, device=device)
    raise KeyError(f"unknown primitive {primitive!r}: one of {', '.join(PRIMITIVES)}")


# ----------------------------------------------------------------------------- running them in a rank
def is_unsupported(exc: BaseException) -> bool:
    """Does this exception say the backend lacks the operation (rather than that something broke)?"""
    text = str(exc).lower()
    return isinstance(exc, (RuntimeError, NotImplementedError, ValueError)) and any(s in text for s in _UNSUPPORTED)



def call_native(primitive: str, x, rank: int, n: int, k: int, root: int, group=None):
    """Run `primitive` on `x` with torch.distributed's own call for it; returns what this rank holds."""
    import torch
    import torch.distributed as dist

    if primitive == "broadcast":
        dist.broadcast(x, src=root, group=group)
        return x
    if primitive == "reduce":
        dist.reduce(x, dst=root, op=dist.ReduceOp.SUM, group=group)
        return x
    if primitive == "all_reduce":
        dist.all_reduce(x, op=dist.ReduceOp.SUM, group=group)
        return x
    if primitive == "gather":
        out = [torch.empty_like(x) for _ in range(n)] if rank == root else None
        dist.gather(x, out, dst=root, group=group)
        return torch.cat(out) if out is not None else x
    if primitive == "all_gather":
        out = [torch.empty_like(x) for _ in range(n)]
        dist.all_gather(out, x, group=group)
        return torch.cat(out)
    if primitive == "scatter":
        out = torch.empty(k, dtype=x.dtype, device=x.device)
        chunks = list(x.chunk(n)) if rank == root else None
        dist.scatter(out, chunks, src=root, group=group)
        return out
    if primitive == "reduce_scatter":
        out = torch.empty(k, dtype=x.dtype, device=x.device)
        dist.reduce_scatter(out, list(x.chunk(n)), op=dist.ReduceOp.SUM, group=group)
        return out
    if primitive == "all_to_all":
        out = [torch.empty(k, dtype=x.dtype, device=x.device) for _ in range(n)]
        dist.all_to_all(out, list(x.chunk(n)), group=group)
        return torch.cat(out)
    if primitive == "barrier":
        dist.barrier(group=group)
        return x
    raise KeyError(primitive)



def call_equivalent(primitive: str, x, rank: int, n: int, k: int, root: int, group=None):
    """Run `primitive` built from other calls (`EQUIVALENTS`); returns what this rank holds."""
    import torch
    import torch.distributed as dist

    if primitive == "broadcast":
        if rank == root:
            for r in range(n):
                if r != root:
                    dist.send(x, dst=r, group=group)
        else:
            dist.recv(x, src=root, group=group)
        return x
    if primitive == "reduce":
        dist.all_reduce(x, group=group)
        return x if rank == root else x  # every rank has the sum; only the root's copy counts
    if primitive == "all_reduce":
        dist.reduce(x, dst=root, group=group)
        dist.broadcast(x, src=root, group=group)
        return x
    if primitive == "gather":
        out = [torch.empty_like(x) for _ in range(n)]
        dist.all_gather(out, x, group=group)
        return torch.cat(out) if rank == root else x
    if primitive == "all_gather":
        out = []
        for r in range(n):
            buf = x.clone() if r == rank else torch.empty_like(x)
            dist.broadcast(buf, src=r, group=group)
            out.append(buf)
        return torch.cat(out)
    if primitive == "scatter":
        buf = x.clone() if rank == root else torch.empty(n * k, dtype=x.dtype, device=x.device)
        dist.broadcast(buf, src=root, group=group)
        return buf.chunk(n)[rank].clone()
    if primitive == "reduce_scatter":
        buf = x.clone()
        dist.all_reduce(buf, group=group)
        return buf.chunk(n)[rank].clone()
    if primitive == "all_to_all":
        out = []
        for r in range(n):
            piece = torch.empty(k, dtype=x.dtype, device=x.device)
            dist.scatter(piece, list(x.chunk(n)) if r == rank else None, src=r, group=group)
            out.append(piece)
        return torch.cat(out)
    if primitive == "barrier":
        t = torch.ones(1, device=x.device)
        dist.all_reduce(t, group=group)
        return x
    raise KeyError(primitive)




@dataclass
class PrimitiveRun:
    """One primitive run in one rank: its buffer before and after, what it must hold (None:
    unspecified, e.g. reduce off the root), whether it does, and the seconds the call took."""

    before: list[float]
    after: list[float]
    expected: list[float] | None
    ok: bool
    seconds: float

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PrimitiveRun:
        return cls(list(d["before"]), list(d["after"]), None if d.get("expected") is None else list(d["expected"]),
                   bool(d["ok"]), float(d.get("seconds") or 0.0))


@dataclass
class PrimitiveCheck:
    """One primitive checked in one rank: natively where the backend has it (a small float32 demo and a
    large float64 check), else through its equivalent, which is checked either way.

    `ok` is None when the backend lacks the primitive and the demo was not native; then `ok` is the
    equivalent's verdict."""

    equivalent: str  # how it is built from other calls (EQUIVALENTS)
    native: bool  # the backend has it
    native_error: str | None  # what the backend said when it lacked it
    demo: PrimitiveRun
    ok: bool | None
    seconds: float | None  # the large check's time, native only
    check_elements: int
    equivalent_ok: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PrimitiveCheck:
        return cls(str(d.get("equivalent", "")), bool(d["native"]), d.get("native_error"),
                   PrimitiveRun.from_json(d["demo"]), None if d.get("ok") is None else bool(d["ok"]), d.get("seconds"),
                   int(d.get("check_elements", 0)), bool(d.get("equivalent_ok")))


def run_primitive(primitive: str, rank: int, n: int, k: int, *, device="cpu", dtype=None, root: int = 0,
                  how: str = "native", group=None, native: Callable[..., Any] = call_native) -> PrimitiveRun:
    """Run one primitive in this rank (`how`: "native" or "equivalent") and check it against `expected`.

    `native`: the function that runs a primitive natively (`call_native`; a test passes one that
    lacks a primitive, as some backends do)."""
    import torch

    dtype = dtype or torch.float32
    x = rank_input(primitive, rank, n, k, root=root, dtype=dtype, device=device)
    before = x.detach().cpu().tolist()
    fn = native if how == "native" else call_equivalent
    t0 = time.perf_counter()
    out = fn(primitive, x, rank, n, k, root, group)
    if getattr(out, "is_cuda", False):
        torch.cuda.synchronize(out.device)
    seconds = time.perf_counter() - t0
    want = expected(primitive, rank, n, k, root=root, dtype=dtype, device=device)
    ok = True if want is None else bool(out.shape == want.shape and torch.equal(out, want))
    return PrimitiveRun(before, out.detach().cpu().tolist(), None if want is None else want.cpu().tolist(), ok, seconds)


def check_all(rank: int, n: int, *, device="cpu", demo_k: int = 2, check_k: int = 4096, root: int = 0,
              primitives: tuple[str, ...] = PRIMITIVES, group=None,
              native: Callable[..., Any] = call_native) -> dict[str, PrimitiveCheck]:
    """Every primitive in this rank: a small demo (float32) and a large check (float64), native and
    equivalent. A primitive the backend lacks (`native` raises what `is_unsupported` recognises) is
    reported, and its equivalent stands in; any other error goes through."""
    import torch

    out: dict[str, PrimitiveCheck] = {}
    for p in primitives:
        try:
            demo = run_primitive(p, rank, n, demo_k, device=device, root=root, group=group, native=native)
            big = run_primitive(p, rank, n, check_k, device=device, dtype=torch.float64, root=root, group=group,
                                native=native)
            entry = PrimitiveCheck(EQUIVALENTS[p], True, None, demo, demo.ok and big.ok, big.seconds, check_k)
        except Exception as e:  # a missing primitive is reported, and its equivalent stands in
            if not is_unsupported(e):
                raise
            demo = run_primitive(p, rank, n, demo_k, device=device, root=root, how="equivalent", group=group)
            entry = PrimitiveCheck(EQUIVALENTS[p], False, str(e).strip().splitlines()[0][:200], demo, None, None, check_k)
        eq = run_primitive(p, rank, n, check_k, device=device, dtype=torch.float64, root=root, how="equivalent",
                           group=group)
        entry.equivalent_ok = eq.ok
        if not entry.native:
            entry.ok = entry.demo.ok and eq.ok
        out[p] = entry
    return out


# ----------------------------------------------------------------------------- a barrier with slow ranks
@dataclass
class BarrierTiming:
    """One rank at a barrier after r·delay seconds of work. Times are seconds since this rank left an
    initial barrier: `arrive_s` ≈ r·delay, `leave_s` ≈ (n−1)·delay for everyone (nobody leaves
    before the slowest arrives), `waited_s` = leave − arrive. `arrive_clock_s` and `leave_clock_s`
    are the same instants on the host's monotonic clock, with `host`, so `barrier_ok` can compare
    ranks of one host on one clock."""

    rank: int
    work_s: float
    arrive_s: float
    leave_s: float
    waited_s: float
    host: str | None = None
    arrive_clock_s: float | None = None
    leave_clock_s: float | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BarrierTiming:
        return cls(int(d["rank"]), float(d["work_s"]), float(d["arrive_s"]), float(d["leave_s"]), float(d["waited_s"]),
                   d.get("host"), d.get("arrive_clock_s"), d.get("leave_clock_s"))


def barrier_with_slow_ranks(rank: int, n: int, delay_s: float = 0.2, group=None) -> BarrierTiming:
    """Rank r works r·delay seconds, then waits at a barrier: what did the barrier cost each rank?"""
    import socket

    import torch.distributed as dist

    dist.barrier(group=group)
    t0 = time.monotonic()  # one clock for every process on this host (CLOCK_MONOTONIC)
    time.sleep(rank * delay_s)  # the "work": rank r is r·delay late
    arrive_clock = time.monotonic()
    dist.barrier(group=group)
    leave_clock = time.monotonic()
    return BarrierTiming(rank, rank * delay_s, arrive_clock - t0, leave_clock - t0, leave_clock - arrive_clock,
                         socket.gethostname(), arrive_clock, leave_clock)


def barrier_ok(rows: list[BarrierTiming], delay_s: float, slack_s: float = 0.05) -> bool:
    """Nobody left before the slowest rank arrived, and the slowest rank did arrive (n−1)·delay late.

    Ranks on one host also read one system-wide clock (`arrive_clock_s`, `leave_clock_s`:
    `time.monotonic`), so "left after the last arrival" is checked exactly there, however late the
    operating system scheduled a rank on a busy machine. Across hosts each rank's times count from
    its own exit of the initial barrier, and `slack_s` allows for that barrier's skew."""
    if not rows:
        return False
    n = len(rows)
    slowest = max(r.arrive_s for r in rows)
    clocks = [(r.arrive_clock_s, r.leave_clock_s) for r in rows]
    if all(a is not None and b is not None for a, b in clocks) and len({r.host for r in rows}) == 1:
        last = max(a for a, _ in clocks if a is not None)
        left_after = all(b is not None and b >= last for _, b in clocks)
    else:
        left_after = all(r.leave_s >= slowest - slack_s for r in rows)
    return left_after and slowest >= (n - 1) * delay_s * 0.95
