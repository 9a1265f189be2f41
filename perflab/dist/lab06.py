"""Checks for labs/06_ring_allreduce.ipynb: ring traffic, bus bandwidth, and a ring all-reduce on 4 ranks.

`check_ring_all_reduce(fn)` calls the learner's function once in this process with a world of one
rank: a stub that still raises NotImplementedError gets the kind "not done yet" note and no rank
is started. Otherwise the function's source goes to a file that `torchrun` ranks import
(perflab.dist.workers.lab06_ring); on every rank its result is compared with `dist.all_reduce`, the
bytes it sent point-to-point are counted, and any collective it called is noted.
"""

from __future__ import annotations

import inspect
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perflab.core.grading import LabCheckError, grade, record

HEADER = '''"""Written by perflab.dist.lab06 from the learner's notebook cell."""
import math

import torch
import torch.distributed as dist

'''


def check_ring_bytes(student: Callable[..., Any]) -> bool:
    """ring_bytes_per_rank(numel, world_size, itemsize) → 2·(N−1)·K/N·itemsize."""
    from perflab.dist.collectives import ring_bytes_formula

    cases = [({"numel": k, "world_size": n, "itemsize": s}, ring_bytes_formula(k, n, s))
             for k, n, s in ((1024, 4, 4), (4096, 2, 2), (8000, 8, 4), (10**6, 16, 2), (12, 1, 4))]
    return grade("ring bytes per rank", student, cases, rtol=1e-9,
                 hint="each of the 2·(N−1) steps sends one chunk of K/N elements; with N = 1 nothing moves")


def check_busbw(student: Callable[..., Any]) -> bool:
    """busbw_gbps(op, nbytes, seconds, ranks) for all_reduce, all_gather, reduce_scatter, broadcast."""
    from perflab.dist.busbw import busbw_gbps

    cases = [({"op": op, "nbytes": b, "seconds": t, "ranks": n}, busbw_gbps(op, b, t, n))
             for op, b, t, n in (("all_reduce", 2**30, 0.01, 8), ("all_reduce", 2**20, 1e-4, 2),
                                 ("all_gather", 2**28, 0.005, 4), ("reduce_scatter", 2**28, 0.004, 16),
                                 ("broadcast", 2**26, 0.002, 8))]
    return grade("bus bandwidth", student, cases, rtol=1e-6,
                 hint="algbw = bytes / seconds / 1e9 (GB/s); all-reduce × 2(n−1)/n, all-gather and "
                      "reduce-scatter × (n−1)/n, broadcast × 1")


def _source(fn: Callable[..., Any]) -> str:
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        raise LabCheckError(f"{getattr(fn, '__name__', fn)!r}: could not read its source; define it with `def` in a "
                            "notebook cell and run that cell") from None
    return HEADER + textwrap.dedent(src)


def check_ring_all_reduce(student: Callable[..., Any], *, nproc: int = 4, numels: tuple[int, ...] | None = None,
                          timeout: float = 240.0, name: str | None = None) -> bool:
    """Run `student(x, rank, world_size)` on `nproc` gloo/NCCL ranks; compare with dist.all_reduce.

    The sizes are multiples of nproc (1024·nproc and 250·nproc elements by default), so every chunk
    has K/N elements however the learner cuts the tensor.
    """
    import torch

    from perflab.dist.collectives import ring_bytes_sent
    from perflab.dist.torchrun import launch
    from perflab.core.validate import positive_int

    nproc = positive_int("nproc", nproc, maximum=64)
    numels = tuple(numels) if numels else (1024 * nproc, 250 * nproc)
    name = name or f"ring_all_reduce on {nproc} ranks"

    # 1. A stub raises NotImplementedError even for one rank: say so kindly, start nothing.
    try:
        student(torch.arange(4.0), 0, 1)
    except NotImplementedError:
        record(name, False)
        print(f"… {name}: not done yet — fill in the function and run this cell again.")
        return False
    except Exception:  # noqa: BLE001 - a real attempt may need a process group even for one rank; the ranks will tell
        pass
    fn_name = getattr(student, "__name__", "ring_all_reduce")
    # 2. Its source becomes a module the ranks import.
    with tempfile.TemporaryDirectory(prefix="perflab-lab06-") as tmp:
        path = Path(tmp) / "student_ring.py"
        path.write_text(_source(student))
        res = launch("perflab.dist.workers.lab06_ring", nproc,
                     ["--file", str(path), "--name", fn_name, "--numels", ",".join(map(str, numels))], timeout=timeout)
    if not res.ok:
        bad = next((r for r in res.ranks if r.status != "ok"), None)
        tail = f"\n{bad.tail(12)}" if bad is not None else ""
        raise LabCheckError(f"{name}: your function did not finish on {nproc} ranks: {res.message}{tail}")
    # 3. Every rank, every size: the right sum, no collectives, the ring's traffic.
    for rep in res.results:
        rank = rep["rank"]
        for row in rep["rows"]:
            k = row["numel"]
            if row["collectives"]:
                raise LabCheckError(f"{name}: rank {rank} called {', '.join(sorted(set(row['collectives'])))}: "
                                    "build the ring from point-to-point sends (dist.isend / dist.irecv) only")
            if not row["shape_ok"]:
                raise LabCheckError(f"{name}: rank {rank} returned {row['returned']} {row.get('shape')} for an input of "
                                    f"{k} elements; return a tensor shaped like x")
            if row["max_rel_error"] > 1e-5:
                raise LabCheckError(f"{name}: rank {rank}'s result differs from dist.all_reduce by "
                                    f"{row['max_rel_error']:.2e} (relative) for {k} elements. Hint: in the "
                                    "reduce-scatter phase add what you receive; in the all-gather phase overwrite.")
            want = ring_bytes_sent(k, nproc, 4)[rank]
            if row["bytes_sent"] != want:
                raise LabCheckError(f"{name}: rank {rank} sent {row['bytes_sent']} B for {k} float32 elements; a ring "
                                    f"sends 2·(N−1)·K/N·4 = {want} B per rank. Send one chunk per step, not the whole tensor.")
    record(name, True)
    sizes = " and ".join(str(k) for k in numels)
    print(f"✓ {name}: equals dist.all_reduce on every rank ({sizes} elements), point-to-point only, "
          f"{ring_bytes_sent(numels[0], nproc, 4)[0]} B sent per rank for {numels[0]} elements = 2(N−1)K/N × 4 B")
    return True
