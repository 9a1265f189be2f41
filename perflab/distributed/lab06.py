"""Checks for labs/06_ring_allreduce.ipynb: ring traffic, bus bandwidth, and a ring all-reduce on 4 ranks.

`check_ring_all_reduce(fn)` calls the learner's function once in this process with a world of one
rank: a stub that still raises NotImplementedError gets the kind "not done yet" note and no rank
is started. Otherwise the function's source goes to a file that `torchrun` ranks import
(perflab.distributed.workers.lab06_ring); on every rank its result is compared with `dist.all_reduce`, the
bytes it sent point-to-point are counted, and any collective it called is noted.
"""

from __future__ import annotations

import inspect
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perflab.grading.checks import LabCheckError, Verdict, record
from perflab.grading.guard import grade_known

HEADER = '''"""Written by perflab.distributed.lab06 from the learner's notebook cell."""
import math

import torch
import torch.distributed as dist

'''


RING_MISTAKES = [
    ("the large-N limit 2·K·itemsize", lambda numel, world_size, itemsize: 2 * numel * itemsize,
     "that is what a rank sends only as N grows; the exact count has the factor (N−1)/N"),
    ("one phase only (reduce-scatter without the all-gather)",
     lambda numel, world_size, itemsize: (world_size - 1) * numel / world_size * itemsize,
     "a missing term: the all-gather sends as many chunks again, 2·(N−1) steps in all"),
    ("elements, not bytes", lambda numel, world_size, itemsize: 2 * (world_size - 1) * numel / world_size,
     "the answer ignores itemsize: multiply by the bytes per element"),
    ("an off-by-one in the step count (2N−1 steps)",
     lambda numel, world_size, itemsize: (2 * world_size - 1) * numel / world_size * itemsize,
     "each of the two phases has N−1 steps: 2·(N−1) in all"),
    ("integer division of the chunk", lambda numel, world_size, itemsize: 2 * (world_size - 1) * (numel // world_size)
     * itemsize, "K/N is a real number here: when N does not divide K the chunks differ by one element; use K/N"),
    ("the naive root's traffic 2·(N−1)·K·itemsize",
     lambda numel, world_size, itemsize: 2 * (world_size - 1) * numel * itemsize,
     "that is what the root sends and receives when everybody sends to it; a ring sends one chunk per step"),
]

BUSBW_FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
                 "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}


def _inverted(factor):
    return lambda n: 1 / factor(n)


def _busbw_with(factors: dict[str, Any], unit: float = 1e9):
    return lambda op, nbytes, seconds, ranks: nbytes / seconds / unit * factors[op](ranks)


BUSBW_MISTAKES = [
    ("the algorithm bandwidth (algbw)", lambda op, nbytes, seconds, ranks: nbytes / seconds / 1e9,
     "busbw is algbw times the op's factor: all-reduce 2(n−1)/n, all-gather and reduce-scatter (n−1)/n, broadcast 1"),
    ("GiB/s instead of GB/s", _busbw_with(BUSBW_FACTORS, 2**30), "a wrong convention: nccl-tests divide by 1e9"),
    ("all-reduce's factor for every op", _busbw_with({k: BUSBW_FACTORS["all_reduce"] for k in BUSBW_FACTORS}),
     "all-gather and reduce-scatter move half of an all-reduce's data: (n−1)/n; broadcast × 1"),
    ("an inverted factor n/(2(n−1))", _busbw_with({k: _inverted(f) for k, f in BUSBW_FACTORS.items()}),
     "multiply algbw by the factor; do not divide"),
    ("broadcast with (n−1)/n", _busbw_with(BUSBW_FACTORS | {"broadcast": lambda n: (n - 1) / n}),
     "in a broadcast every byte crosses each link once: factor 1"),
    ("all-reduce with (n−1)/n", _busbw_with(BUSBW_FACTORS | {"all_reduce": lambda n: (n - 1) / n}),
     "a missing term: an all-reduce is a reduce-scatter plus an all-gather, 2(n−1)/n"),
]


def check_ring_bytes(student: Callable[..., Any]) -> Verdict:
    """ring_bytes_per_rank(numel, world_size, itemsize) → 2·(N−1)·K/N·itemsize.

    The cases include N = 1 (nothing moves), N that does not divide K (1000 elements on 3 ranks) and
    a 2-byte dtype, so the named mistakes in RING_MISTAKES each give a different wrong number."""
    from perflab.distributed.ring import naive_root_bytes, ring_bytes_formula

    cases = [({"numel": k, "world_size": n, "itemsize": s}, ring_bytes_formula(k, n, s))
             for k, n, s in ((1024, 4, 4), (4096, 2, 2), (8000, 8, 4), (10**6, 16, 2), (12, 1, 4), (1000, 3, 4),
                             (7, 5, 8))]
    return grade_known("ring bytes per rank", student, cases, rtol=1e-9, mistakes=RING_MISTAKES,
                       forbidden=[ring_bytes_formula, naive_root_bytes],
                       hint="each of the 2·(N−1) steps sends one chunk of K/N elements; with N = 1 nothing moves")


def check_busbw(student: Callable[..., Any]) -> Verdict:
    """busbw_gbps(op, nbytes, seconds, ranks) for all_reduce, all_gather, reduce_scatter, broadcast."""
    from perflab.distributed import busbw

    cases = [({"op": op, "nbytes": b, "seconds": t, "ranks": n}, busbw.busbw_gbps(op, b, t, n))
             for op, b, t, n in (("all_reduce", 2**30, 0.01, 8), ("all_reduce", 2**20, 1e-4, 2),
                                 ("all_gather", 2**28, 0.005, 4), ("reduce_scatter", 2**28, 0.004, 16),
                                 ("broadcast", 2**26, 0.002, 8), ("all_reduce", 3 * 10**8, 0.02, 3))]
    return grade_known("bus bandwidth", student, cases, rtol=1e-6, mistakes=BUSBW_MISTAKES,
                       forbidden=[busbw.busbw_gbps, busbw.bus_factor, busbw.convert, busbw.algbw_gbps],
                       hint="algbw = bytes / seconds / 1e9 (GB/s); all-reduce × 2(n−1)/n, all-gather and "
                            "reduce-scatter × (n−1)/n, broadcast × 1")


def _source(fn: Callable[..., Any]) -> str:
    given = getattr(fn, "__perflab_source__", None)  # the grader's copy, taken from the notebook's source
    if given is not None:
        return HEADER + textwrap.dedent(given)
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        raise LabCheckError(f"{getattr(fn, '__name__', fn)!r}: could not read its source; define it with `def` in a "
                            "notebook cell and run that cell") from None
    return HEADER + textwrap.dedent(src)


def check_ring_all_reduce(student: Callable[..., Any], *, nproc: int = 4, numels: tuple[int, ...] | None = None,
                          timeout: float = 240.0, name: str | None = None) -> Verdict:
    """Run `student(x, rank, world_size)` on `nproc` gloo/NCCL ranks; compare with dist.all_reduce.

    The sizes are multiples of nproc (1024·nproc and 250·nproc elements by default), so every chunk
    has K/N elements however the learner cuts the tensor.
    """
    import torch

    from perflab.core.validate import positive_int
    from perflab.distributed.ring import ring_bytes_sent
    from perflab.distributed.torchrun import launch

    nproc = positive_int("nproc", nproc, maximum=64)
    numels = tuple(numels) if numels else (1024 * nproc, 250 * nproc)
    name = name or f"ring_all_reduce on {nproc} ranks"

    # 1. A stub raises NotImplementedError even for one rank: say so kindly, start nothing.
    try:
        student(torch.arange(4.0), 0, 1)
    except NotImplementedError:
        print(f"… {name}: not done yet — fill in the function and run this cell again.")
        return record(name, False)
    except Exception:  # noqa: BLE001 - a real attempt may need a process group even for one rank; the ranks will tell
        pass
    fn_name = getattr(student, "__name__", "ring_all_reduce")
    # 2. Its source becomes a module the ranks import.
    with tempfile.TemporaryDirectory(prefix="perflab-lab06-") as tmp:
        path = Path(tmp) / "student_ring.py"
        path.write_text(_source(student))
        res = launch("perflab.distributed.workers.lab06_ring", nproc,
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
    sizes = " and ".join(str(k) for k in numels)
    print(f"✓ {name}: equals dist.all_reduce on every rank ({sizes} elements), point-to-point only, "
          f"{ring_bytes_sent(numels[0], nproc, 4)[0]} B sent per rank for {numels[0]} elements = 2(N−1)K/N × 4 B")
    return record(name, True)


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
def reference_ring_bytes(numel: int, world_size: int, itemsize: int) -> float:
    from perflab.distributed.ring import ring_bytes_formula

    return ring_bytes_formula(numel, world_size, itemsize)


def reference_busbw(op: str, nbytes: float, seconds: float, ranks: int) -> float:
    from perflab.distributed import busbw

    return busbw.busbw_gbps(op, nbytes, seconds, ranks)


LEARNER_ANSWERS = ("ring_bytes_per_rank", "busbw_gbps", "ring_all_reduce")
REFERENCES = {"ring_bytes_per_rank": reference_ring_bytes, "busbw_gbps": reference_busbw}


def _forbidden() -> tuple:
    from perflab.distributed import busbw, ring
    from perflab.distributed.workers import lab06_ring

    answers = tuple(getattr(ring, n) for n in lab06_ring.RING_ANSWERS)  # perflab's own ring and its traffic
    return (ring.ring_bytes_formula, ring.naive_root_bytes, ring.ring_bytes_sent, *answers,
            busbw.busbw_gbps, busbw.bus_factor, busbw.convert, busbw.algbw_gbps)


FORBIDDEN = _forbidden()


def grading_inputs(rng) -> dict[str, list[dict]]:
    from perflab.grading.checks import draw_int

    ring = [dict(numel=draw_int(rng, 1, 10**8), world_size=draw_int(rng, 1, 512), itemsize=rng.choice([1, 2, 4, 8]))
            for _ in range(8)]
    bw = [dict(op=op, nbytes=float(draw_int(rng, 2**10, 2**34)), seconds=rng.uniform(1e-5, 1.0),
               ranks=draw_int(rng, 2, 1024)) for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast")]
    return {"ring_bytes_per_rank": ring, "busbw_gbps": bw}


def judge(answers, rng, *, nproc: int = 2, timeout: float = 120.0) -> None:
    """The two formulas on the lab's cases and the grading inputs; the ring itself run on `nproc`
    ranks from its source (read from the notebook, not from the learner's kernel), on sizes and
    inputs drawn per learner.

    Under `perflab grade` (`answers.ranks`), the ranks talk only through the judge's process, which
    counts the bytes each one sends and compares what each returns with the sum of the inputs it
    drew (`judge_ring`): nothing a rank reports about itself is read. Elsewhere (a plain mapping of
    functions, in a test) the ring runs under torchrun as the notebook's check runs it."""
    from perflab.grading.checks import hidden

    drawn = grading_inputs(rng)
    for name, check in (("ring_bytes_per_rank", check_ring_bytes), ("busbw_gbps", check_busbw)):
        if check(answers[name]):
            hidden(f"{name} on the grading inputs", answers[name], REFERENCES[name], drawn[name], rtol=1e-6)
    numels = (nproc * rng.randint(100, 700), nproc * rng.randint(1, 50))
    name = f"ring_all_reduce on {nproc} ranks"
    if getattr(answers, "ranks", None) is None:
        ring = answers["ring_all_reduce"]
        source = getattr(answers, "source", lambda name: None)("ring_all_reduce")
        if source is not None:
            ring.__perflab_source__ = source
        check_ring_all_reduce(ring, nproc=nproc, numels=numels, name=name)
        return
    import torch

    g = torch.Generator().manual_seed(rng.getrandbits(63))
    inputs = [[torch.randn(k, generator=g) for k in numels] for _ in range(nproc)]
    try:
        run = answers.ranks("ring_all_reduce", inputs, timeout=timeout)
    except NotImplementedError:
        print(f"… {name}: not done yet — fill in the function and run this cell again.")
        record(name, False)
        return
    judge_ring(run, inputs, name)


def judge_ring(run, inputs: list[list[Any]], name: str) -> Verdict:
    """Grade a ring run by `perflab grade` (classroom/ranks.py: a `RankRun`) against the inputs the
    judge drew: every rank's every result equal to the sum over the ranks (compared here), no
    collective, and each rank's bytes, as the judge counted them, 2·(N−1)·K/N × 4 exactly."""
    import torch

    from perflab.distributed.ring import ring_bytes_sent

    nproc = len(inputs)
    if any(r.not_done for r in run.ranks):
        print(f"… {name}: not done yet — fill in the function and run this cell again.")
        return record(name, False)
    called = sorted({c for r in run.ranks for c in r.collectives})
    if called:
        raise LabCheckError(f"{name}: rank {next(r.rank for r in run.ranks if r.collectives)} called "
                            f"{', '.join(called)}: build the ring from point-to-point sends (dist.isend / dist.irecv) only")
    failed = next((r for r in run.ranks if r.error), None)
    if run.message or failed is not None:
        why = run.message or (f"rank {failed.rank} {failed.error}" if failed is not None else "")
        raise LabCheckError(f"{name}: your function did not finish on {nproc} ranks: {why}")
    for rep in run.ranks:
        for i, x in enumerate(inputs[rep.rank]):
            k = x.numel()
            want = torch.stack([inp[i] for inp in inputs]).sum(0)
            got = rep.outputs[i] if i < len(rep.outputs) else None
            if got is None or tuple(got.shape) != tuple(want.shape):
                shown = list(got.shape) if got is not None else None
                raise LabCheckError(f"{name}: rank {rep.rank} returned {rep.returned[i] if i < len(rep.returned) else 'nothing'}"
                                    f" {shown} for an input of {k} elements; return a tensor shaped like x")
            err = float((got.to(want.dtype) - want).abs().max() / want.abs().max().clamp_min(1e-30))
            if not err <= 1e-5:
                raise LabCheckError(f"{name}: rank {rep.rank}'s result differs from the sum over the ranks by "
                                    f"{err:.2e} (relative) for {k} elements. Hint: in the reduce-scatter phase add "
                                    "what you receive; in the all-gather phase overwrite.")
            want_bytes = ring_bytes_sent(k, nproc, 4)[rep.rank]
            if rep.bytes_sent[i] != want_bytes:
                raise LabCheckError(f"{name}: rank {rep.rank} sent {rep.bytes_sent[i]} B for {k} float32 elements; a "
                                    f"ring sends 2·(N−1)·K/N·4 = {want_bytes} B per rank. Send one chunk per step, not "
                                    "the whole tensor.")
    sizes = " and ".join(str(x.numel()) for x in inputs[0])
    print(f"✓ {name}: the sum of every rank's input on every rank ({sizes} elements), point-to-point only, the bytes "
          "each rank sent counted by the grader")
    return record(name, True)
