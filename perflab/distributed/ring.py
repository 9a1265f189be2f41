"""The ring all-reduce: its schedule, its traffic, a simulation on plain lists and the real thing.

A ring all-reduce on N ranks is a reduce-scatter then an all-gather, each N−1 steps of one chunk
(K/N elements) sent to the right-hand neighbour: every rank sends 2·(N−1)·K/N elements in all,
whatever N, where everything through a root puts 2·(N−1)·K on the root's link.
`ring_all_reduce` and `check_ring` run inside a rank (perflab/distributed/workers/collectives.py);
the rest is arithmetic, tables and figures that run anywhere.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


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



@dataclass(frozen=True)
class RingSend:
    """One send of `simulate_ring`: which chunk went from whom to whom, and its values."""

    phase: str  # 'reduce-scatter' or 'all-gather'
    step: int
    sender: int
    receiver: int
    chunk: int
    elements: int
    values: list[float]


def simulate_ring(buffers: list[list[float]]) -> tuple[list[list[float]], list[RingSend]]:
    """Run the ring schedule on plain lists in one process: (every rank's result, one row per send)."""
    n = len(buffers)
    numel = len(buffers[0])
    sizes = chunk_sizes(numel, n)
    starts = [sum(sizes[:i]) for i in range(n)]
    data = [list(map(float, b)) for b in buffers]
    log: list[RingSend] = []
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
                log.append(RingSend(phase, s, st.sender, st.receiver, st.chunk, sizes[st.chunk], list(payload)))
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



@dataclass
class RingCheck:
    """`ring_all_reduce` against `dist.all_reduce` in one rank: the largest relative error, the bytes
    this rank sent (counted, by the formula 2·(N−1)·K/N·itemsize, and exactly as scheduled), seconds."""

    numel: int
    max_rel_error: float
    ok: bool
    bytes_sent: int
    sends: int
    bytes_formula: float
    bytes_exact: int
    seconds: float

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RingCheck:
        return cls(int(d["numel"]), float(d["max_rel_error"]), bool(d["ok"]), int(d["bytes_sent"]), int(d["sends"]),
                   float(d["bytes_formula"]), int(d["bytes_exact"]), float(d["seconds"]))


def check_ring(rank: int, n: int, numel: int, *, device="cpu", seed: int = 0, group=None) -> RingCheck:
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
    return RingCheck(numel, err, err < 1e-5, stats["bytes_sent"], stats["sends"],
                     ring_bytes_formula(numel, n, x.element_size()), ring_bytes_sent(numel, n, x.element_size())[rank],
                     t_ring)



def ring_steps(log: list[RingSend]):
    """simulate_ring's log as a table: who sends which chunk to whom, and its values."""
    import pandas as pd

    return pd.DataFrame([{"phase": e.phase, "step": e.step, "send": f"{e.sender} → {e.receiver}",
                          "chunk": e.chunk, "values": fmt_values(e.values)} for e in log])


def fmt_values(values: list[float]) -> str:
    """A buffer as the lesson's tables print it: '[1, 2, 11, 12]'."""
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"


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
