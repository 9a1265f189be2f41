"""Every collective primitive, what each rank must hold after it, and the ring all-reduce.

The functions that move data (`run_primitive`, `ring_all_reduce`, `barrier_with_slow_ranks`) run
inside a rank, in a process group (see perflab/distributed/workers/collectives.py); the rest is plain
arithmetic that a test or a notebook can call anywhere.

Inputs are chosen so a table of numbers tells the story: rank r holds `10·r + [1, 2, ...]`, so the
tens digit says which rank a value came from. For each primitive `expected()` gives, in closed
form, what every rank must hold afterwards; a primitive is verified when every rank's buffer equals
it exactly (small integers are exact in float32, and the large checks run in float64).

Where a backend lacks a primitive, `run_primitive(..., how="equivalent")` builds it from others
(e.g. reduce-scatter = all-reduce, then keep your own chunk) and the report says so.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
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


def _native(primitive: str, x, rank: int, n: int, k: int, root: int, group=None):
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


def _equivalent(primitive: str, x, rank: int, n: int, k: int, root: int, group=None):
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


def run_primitive(primitive: str, rank: int, n: int, k: int, *, device="cpu", dtype=None, root: int = 0,
                  how: str = "native", group=None) -> dict[str, Any]:
    """Run one primitive in this rank and check it: {before, after, expected, ok, seconds}."""
    import torch

    dtype = dtype or torch.float32
    x = rank_input(primitive, rank, n, k, root=root, dtype=dtype, device=device)
    before = x.detach().cpu().tolist()
    fn = _native if how == "native" else _equivalent
    t0 = time.perf_counter()
    out = fn(primitive, x, rank, n, k, root, group)
    if getattr(out, "is_cuda", False):
        torch.cuda.synchronize(out.device)
    seconds = time.perf_counter() - t0
    want = expected(primitive, rank, n, k, root=root, dtype=dtype, device=device)
    ok = True if want is None else bool(out.shape == want.shape and torch.equal(out, want))
    return {"before": before, "after": out.detach().cpu().tolist(),
            "expected": None if want is None else want.cpu().tolist(), "ok": ok, "seconds": seconds}


def check_all(rank: int, n: int, *, device="cpu", demo_k: int = 2, check_k: int = 4096, root: int = 0,
              primitives: tuple[str, ...] = PRIMITIVES, group=None) -> dict[str, dict[str, Any]]:
    """Every primitive in this rank: a small demo (float32) and a large check (float64), native and equivalent."""
    import torch

    out: dict[str, dict[str, Any]] = {}
    for p in primitives:
        entry: dict[str, Any] = {"equivalent": EQUIVALENTS[p]}
        try:
            demo = run_primitive(p, rank, n, demo_k, device=device, root=root, group=group)
            big = run_primitive(p, rank, n, check_k, device=device, dtype=torch.float64, root=root, group=group)
            entry.update(native=True, native_error=None, demo=demo, ok=demo["ok"] and big["ok"],
                         seconds=big["seconds"], check_elements=check_k)
        except Exception as e:  # a missing primitive is reported, and its equivalent stands in
            if not is_unsupported(e):
                raise
            entry.update(native=False, native_error=str(e).strip().splitlines()[0][:200])
            demo = run_primitive(p, rank, n, demo_k, device=device, root=root, how="equivalent", group=group)
            entry.update(demo=demo, ok=None, seconds=None, check_elements=check_k)
        eq = run_primitive(p, rank, n, check_k, device=device, dtype=torch.float64, root=root, how="equivalent",
                           group=group)
        entry["equivalent_ok"] = eq["ok"]
        if not entry["native"]:
            entry["ok"] = entry["demo"]["ok"] and eq["ok"]
        out[p] = entry
    return out


def barrier_with_slow_ranks(rank: int, n: int, delay_s: float = 0.2, group=None) -> dict[str, Any]:
    """Rank r works r·delay seconds, then waits at a barrier: what did the barrier cost each rank?

    Times are seconds since this rank left an initial barrier: `arrive` ≈ r·delay, `leave` ≈
    (n−1)·delay for everyone (nobody leaves before the slowest arrives), `waited` = leave − arrive.
    `arrive_clock_s` and `leave_clock_s` are the same instants on the host's monotonic clock, with
    `host`, so `barrier_ok` can compare ranks of one host on one clock.
    """
    import socket

    import torch.distributed as dist

    dist.barrier(group=group)
    t0 = time.monotonic()  # one clock for every process on this host (CLOCK_MONOTONIC)
    time.sleep(rank * delay_s)  # the "work": rank r is r·delay late
    arrive_clock = time.monotonic()
    dist.barrier(group=group)
    leave_clock = time.monotonic()
    return {"rank": rank, "work_s": rank * delay_s, "arrive_s": arrive_clock - t0, "leave_s": leave_clock - t0,
            "waited_s": leave_clock - arrive_clock, "host": socket.gethostname(), "arrive_clock_s": arrive_clock,
            "leave_clock_s": leave_clock}


def barrier_ok(rows: list[dict[str, Any]], delay_s: float, slack_s: float = 0.05) -> bool:
    """Nobody left before the slowest rank arrived, and the slowest rank did arrive (n−1)·delay late.

    Ranks on one host also read one system-wide clock (`arrive_clock_s`, `leave_clock_s`:
    `time.monotonic`), so "left after the last arrival" is checked exactly there, however late the
    operating system scheduled a rank on a busy machine. Across hosts each rank's times count from
    its own exit of the initial barrier, and `slack_s` allows for that barrier's skew."""
    if not rows:
        return False
    n = len(rows)
    slowest = max(r["arrive_s"] for r in rows)
    if all("arrive_clock_s" in r and "leave_clock_s" in r for r in rows) and len({r.get("host") for r in rows}) == 1:
        last = max(r["arrive_clock_s"] for r in rows)
        left_after = all(r["leave_clock_s"] >= last for r in rows)
    else:
        left_after = all(r["leave_s"] >= slowest - slack_s for r in rows)
    return left_after and slowest >= (n - 1) * delay_s * 0.95


# ----------------------------------------------------------------------------- the ring all-reduce
@dataclass(frozen=True)
class RingStep:
    phase: str  # 'reduce-scatter' or 'all-gather'
    step: int  # 0 .. n-2 within the phase
    sender: int
    receiver: int
    chunk: int  # which of the n chunks travels


def ring_schedule(n: int) -> Iterator[RingStep]:
    """Every send of a ring all-reduce on n ranks (rank r sends to r+1 and receives from r−1).

    Reduce-scatter, step s: rank r sends chunk (r−s) mod n and adds what arrives (chunk r−s−1) to
    its own copy; after n−1 steps rank r holds the complete sum of chunk (r+1) mod n.
    All-gather, step s: rank r sends chunk (r+1−s) mod n, which it holds complete, and the
    receiver overwrites its copy; after n−1 more steps every rank holds every complete chunk.
    """
    for phase, offset in (("reduce-scatter", 0), ("all-gather", 1)):
        for s in range(n - 1):
            for r in range(n):
                yield RingStep(phase, s, r, (r + 1) % n, (r + offset - s) % n)


def chunk_sizes(numel: int, n: int) -> list[int]:
    """How `tensor_split(n)` cuts numel elements: the first numel mod n chunks get one more."""
    base, extra = divmod(numel, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def ring_bytes_sent(numel: int, n: int, itemsize: int = 4) -> list[int]:
    """Bytes each rank sends in a ring all-reduce of `numel` elements (and receives: the ring is symmetric)."""
    sizes = chunk_sizes(numel, n)
    sent = [0] * n
    for st in ring_schedule(n):
        sent[st.sender] += sizes[st.chunk] * itemsize
    return sent


def ring_bytes_formula(numel: int, n: int, itemsize: int = 4) -> float:
    """2·(N−1)·K/N elements per rank, in bytes (K = numel): the ring's traffic, exact when N divides K."""
    return 2 * (n - 1) * numel / n * itemsize


def naive_root_bytes(numel: int, n: int, itemsize: int = 4) -> int:
    """Bytes through the root's link when everybody sends to it and it sends the sum back: 2·(N−1)·K."""
    return 2 * (n - 1) * numel * itemsize


def simulate_ring(buffers: list[list[float]]) -> tuple[list[list[float]], list[dict[str, Any]]]:
    """Run the ring schedule on plain lists in one process: (every rank's result, one row per send)."""
    n = len(buffers)
    numel = len(buffers[0])
    sizes = chunk_sizes(numel, n)
    starts = [sum(sizes[:i]) for i in range(n)]
    data = [list(map(float, b)) for b in buffers]
    log = []
    steps = list(ring_schedule(n))
    for phase in ("reduce-scatter", "all-gather"):
        for s in range(n - 1):
            moves = [st for st in steps if st.phase == phase and st.step == s]
            # every rank sends at the same time: read all messages before anyone writes
            msgs = [(st, data[st.sender][starts[st.chunk]: starts[st.chunk] + sizes[st.chunk]]) for st in moves]
            for st, payload in msgs:
                a = starts[st.chunk]
                for i, v in enumerate(payload):
                    if phase == "reduce-scatter":
                        data[st.receiver][a + i] += v
                    else:
                        data[st.receiver][a + i] = v
                log.append({"phase": phase, "step": s, "sender": st.sender, "receiver": st.receiver,
                            "chunk": st.chunk, "elements": sizes[st.chunk], "values": list(payload)})
    return data, log


def ring_all_reduce(x, rank: int, world_size: int, group=None, stats: dict | None = None):
    """Sum `x` over all ranks with a ring: reduce-scatter then all-gather, point-to-point only.

    Each rank only talks to its neighbours (sends to rank+1, receives from rank−1), in 2·(N−1)
    steps of one chunk (K/N elements) each, so it sends 2·(N−1)·K/N elements in all, whatever N.
    `stats`, if given, receives 'bytes_sent' and 'sends'. Returns a new tensor; `x` is unchanged.
    """
    import torch
    import torch.distributed as dist

    n = world_size
    out = x.detach().clone().contiguous()
    if stats is not None:
        stats.setdefault("bytes_sent", 0)
        stats.setdefault("sends", 0)
    if n == 1:
        return out
    chunks = list(out.view(-1).tensor_split(n))
    right, left = (rank + 1) % n, (rank - 1) % n

    def exchange(send_buf, recv_buf):
        ops = [dist.P2POp(dist.isend, send_buf, right, group), dist.P2POp(dist.irecv, recv_buf, left, group)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        if stats is not None:
            stats["bytes_sent"] += send_buf.numel() * send_buf.element_size()
            stats["sends"] += 1

    for s in range(n - 1):  # reduce-scatter
        send_i, recv_i = (rank - s) % n, (rank - s - 1) % n
        incoming = torch.empty_like(chunks[recv_i])
        exchange(chunks[send_i], incoming)
        chunks[recv_i] += incoming
    for s in range(n - 1):  # all-gather: receive straight into place
        send_i, recv_i = (rank + 1 - s) % n, (rank - s) % n
        exchange(chunks[send_i], chunks[recv_i])
    return out


def check_ring(rank: int, n: int, numel: int, *, device="cpu", seed: int = 0, group=None) -> dict[str, Any]:
    """ring_all_reduce against dist.all_reduce on a random float32 tensor: error and bytes sent."""
    import torch
    import torch.distributed as dist

    g = torch.Generator().manual_seed(seed + rank)
    x = torch.randn(numel, generator=g).to(device)
    stats: dict[str, int] = {}
    t0 = time.perf_counter()
    mine = ring_all_reduce(x, rank, n, group=group, stats=stats)
    if mine.is_cuda:
        torch.cuda.synchronize(mine.device)
    t_ring = time.perf_counter() - t0
    ref = x.clone()
    dist.all_reduce(ref, group=group)
    err = float((mine - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    return {"numel": numel, "max_rel_error": err, "ok": err < 1e-5, "bytes_sent": stats["bytes_sent"],
            "sends": stats["sends"], "bytes_formula": ring_bytes_formula(numel, n, x.element_size()),
            "bytes_exact": ring_bytes_sent(numel, n, x.element_size())[rank], "seconds": t_ring}


# ----------------------------------------------------------------------------- summaries (launcher side)
def summarize(results: list[dict[str, Any]]):
    """One row per primitive over all ranks: ok on every rank, native or via its equivalent."""
    import pandas as pd

    rows = []
    n = len(results)
    for p in PRIMITIVES:
        entries = [r["primitives"][p] for r in results if r and p in r.get("primitives", {})]
        if not entries:
            continue
        native = all(e["native"] for e in entries)
        rows.append({"primitive": p, "ok": len(entries) == n and all(bool(e["ok"]) for e in entries),
                     "native": native, "equivalent_ok": all(bool(e["equivalent_ok"]) for e in entries),
                     "what it does": DESCRIPTIONS[p],
                     "equivalent": EQUIVALENTS[p],
                     "note": "" if native else f"not in this backend ({entries[0]['native_error']}): ran the equivalent"})
    return pd.DataFrame(rows)


def demo_table(results: list[dict[str, Any]], primitive: str):
    """Per rank: its buffer before, after, and what it must be, for one primitive's demo."""
    import pandas as pd

    rows = []
    for rank, r in enumerate(results):
        e = r["primitives"][primitive]
        d = e["demo"]
        rows.append({"rank": rank, "before": _fmt(d["before"]), "after": _fmt(d["after"]),
                     "expected": "(unspecified)" if d["expected"] is None else _fmt(d["expected"]),
                     "ok": d["ok"]})
    return pd.DataFrame(rows).set_index("rank")


def _fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"


# ----------------------------------------------------------------------------- one call: launch and verify
@dataclass
class CollectivesRun:
    """Every primitive verified on n ranks: the launch, each rank's report, and the summaries."""

    launch: Any  # perflab.distributed.torchrun.LaunchResult
    slow_s: float

    @property
    def results(self) -> list[dict[str, Any]]:
        return self.launch.results

    @property
    def summary(self):
        df = summarize(self.results)
        timing = self.barrier_rows()
        if len(df) and timing:
            ok = barrier_ok(timing, self.slow_s)
            df.loc[df["primitive"] == "barrier", "ok"] = bool(df.loc[df["primitive"] == "barrier", "ok"].all() and ok)
        return df

    def barrier_rows(self) -> list[dict[str, Any]]:
        return [r["barrier_timing"] for r in self.results if r and "barrier_timing" in r]

    def ring_rows(self) -> list[dict[str, Any]]:
        return [{"rank": i, **r["ring"]} for i, r in enumerate(self.results) if r and "ring" in r]

    @property
    def ring_ok(self) -> bool | None:
        rows = self.ring_rows()
        if not rows:
            return None
        return all(r["ok"] and r["bytes_sent"] == r["bytes_exact"] for r in rows) and len(rows) == self.launch.world_size

    @property
    def ok(self) -> bool:
        s = self.summary
        return bool(self.launch.ok and len(s) == len(PRIMITIVES) and s["ok"].all() and self.ring_ok is not False)

    def as_dict(self) -> dict[str, Any]:
        s = self.summary
        out = {"ok": self.ok, "nproc": self.launch.world_size, "backend": self.launch.backend.name,
               "device": self.launch.backend.device, "backend_reason": self.launch.backend.reason,
               "seconds": round(self.launch.seconds, 3), "message": self.launch.message,
               "primitives": [{"primitive": r["primitive"], "ok": bool(r["ok"]), "native": bool(r["native"]),
                               "equivalent": r["equivalent"], "equivalent_ok": bool(r["equivalent_ok"]),
                               "note": r["note"]} for r in s.to_dict("records")] if len(s) else []}
        timing = self.barrier_rows()
        if timing:
            out["barrier_with_slow_ranks"] = {"delay_s": self.slow_s, "ok": barrier_ok(timing, self.slow_s), "ranks": timing}
        ring = self.ring_rows()
        if ring:
            out["ring_all_reduce"] = {"ok": self.ring_ok, "ranks": ring}
        if not self.launch.ok:
            out["ranks"] = [r.as_dict() for r in self.launch.ranks]
        return out


def run_all(nproc: int = 4, *, backend: str | None = None, timeout: float = 120.0, check_k: int = 4096,
            slow_s: float = 0.2, ring_numel: int = 4096, nnodes: int = 1) -> CollectivesRun:
    """Launch perflab.distributed.workers.collectives on nproc ranks and gather the verdicts."""
    from perflab.core.validate import positive_int
    from perflab.distributed.torchrun import launch

    check_k = positive_int("check_k", check_k, maximum=2**24)
    ring_numel = positive_int("ring_numel", ring_numel, maximum=2**26)
    if not 0 <= slow_s <= 10:
        from perflab.core.errors import InputError

        raise InputError(f"slow_s must be between 0 and 10 seconds (got {slow_s})")
    res = launch("perflab.distributed.workers.collectives", nproc,
                 ["--check-k", check_k, "--slow-s", slow_s, "--ring-numel", ring_numel],
                 nnodes=nnodes, timeout=timeout, backend=backend)
    return CollectivesRun(res, slow_s)


# ----------------------------------------------------------------------------- tables and figures for the lesson
def predictions(n: int, k: int = 2, root: int = 0):
    """What every rank must hold after each primitive (closed forms), before anything runs."""
    import pandas as pd

    rows = []
    for p in PRIMITIVES[:-1]:
        for r in range(n):
            want = expected(p, r, n, k, root=root)
            rows.append({"primitive": p, "rank": r, "holds before": _fmt(rank_input(p, r, n, k, root=root).tolist()),
                         "must hold after": "(unspecified)" if want is None else _fmt(want.tolist())})
    return pd.DataFrame(rows).set_index(["primitive", "rank"])


def demo_frame(results: list[dict[str, Any]]):
    """Every primitive's demo on every rank: before, after, expected, ok (rows: primitive × rank)."""
    import pandas as pd

    frames = []
    for p in PRIMITIVES[:-1]:
        t = demo_table(results, p).reset_index()
        t.insert(0, "primitive", p)
        frames.append(t)
    return pd.concat(frames).set_index(["primitive", "rank"])


def plot_barrier(rows: list[dict[str, float]], *, title: str = ""):
    """Per rank: its work, then its wait at the barrier (s); everyone leaves with the slowest."""
    import matplotlib.pyplot as plt

    rows = sorted(rows, key=lambda r: r["rank"])
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * len(rows) + 1.2))
    ranks = [f"rank {r['rank']}" for r in rows]
    ax.barh(ranks, [r["arrive_s"] for r in rows], color="tab:blue", label="working")
    ax.barh(ranks, [r["waited_s"] for r in rows], left=[r["arrive_s"] for r in rows], color="tab:gray",
            label="waiting in dist.barrier()")
    ax.axvline(max(r["arrive_s"] for r in rows), color="tab:red", linestyle=":", label="the slowest rank arrives")
    ax.invert_yaxis()
    ax.set_xlabel("time since the start (s)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig


def ring_steps(log: list[dict[str, Any]]):
    """simulate_ring's log as a table: who sends which chunk to whom, and its values."""
    import pandas as pd

    return pd.DataFrame([{"phase": e["phase"], "step": e["step"], "send": f"{e['sender']} → {e['receiver']}",
                          "chunk": e["chunk"], "values": _fmt(e["values"])} for e in log])


def plot_traffic(numel: int, ns=(2, 4, 8, 16, 32, 64, 128), itemsize: int = 4, *, measured: dict[int, float] | None = None):
    """Bytes through one rank's link for an all-reduce of `numel` elements: ring vs everything through a root."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ns = list(ns)
    ax.plot(ns, [ring_bytes_formula(numel, n, itemsize) / 2**20 for n in ns], "o-", label="ring: 2(N−1)K/N per rank")
    ax.plot(ns, [naive_root_bytes(numel, n, itemsize) / 2**20 for n in ns], "s--",
            label="through a root: 2(N−1)K on the root's link")
    ax.axhline(2 * numel * itemsize / 2**20, color="gray", linestyle=":", label="2K (the ring's limit)")
    for n, b in (measured or {}).items():
        ax.plot([n], [b / 2**20], "*", markersize=14, color="tab:red", label=f"measured here, N={n}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("ranks N")
    ax.set_ylabel("bytes sent per rank (MiB)")
    ax.set_title(f"all-reduce of K = {numel:,} elements × {itemsize} B")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
