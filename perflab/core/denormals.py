"""Denormals (subnormal floats): the silent slowdown of CPU matmuls, counted and measured.

A float below the smallest normal number (`torch.finfo(dtype).tiny`: 1.18e-38 in fp32) loses
precision gradually instead of flushing to zero. Many x86 cores handle such operands in microcode,
tens of times slower per operation, unless the thread's FTZ/DAZ bits tell the core to treat them as
zero; others handle them at full speed in some or all units. Which kind a CPU is can only be
measured, so `denormal_matmul_slowdown` measures it and `penalty_verdict` says what it found.
`torch.set_flush_denormal(True)` sets those bits, but only on the thread that calls it: torch's
intra-op worker threads keep their own. GPUs process denormals at full speed (or flush them), so
this is a CPU story, and the course's own: a tied embedding left at N(0, 1) once saturated the
softmax of perflab's untrained model, and its gradients came out denormal. `reference()` holds the
figures measured then on a CPU that pays (data/denormal_reference.json).

    >>> count_denormals(model.parameters(), grads=True)   # how many gradient entries are denormal
    >>> rows = denormal_matmul_slowdown(n=256)           # timed, per thread setting and flush mode
    >>> penalty_verdict(rows)["line"]                    # does this CPU pay for them?
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from perflab.core.errors import InputError


@dataclass
class DenormalCount:
    denormal: int  # entries with 0 < |x| < smallest normal
    total: int

    @property
    def fraction(self) -> float:
        return self.denormal / self.total if self.total else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fraction": self.fraction}


def count_denormals(tensors: Iterable, *, grads: bool = False) -> DenormalCount:
    """Count denormal entries of floating-point `tensors` (their `.grad` with grads=True; missing
    gradients are skipped)."""
    import torch

    den = tot = 0
    for t in tensors:
        t = t.grad if grads else t
        if t is None or not t.is_floating_point():
            continue
        tiny = torch.finfo(t.dtype).tiny
        a = t.detach().abs()
        den += int(((a > 0) & (a < tiny)).sum())
        tot += t.numel()
    return DenormalCount(den, tot)


@contextlib.contextmanager
def set_threads_and_flush(threads: int, flush: bool) -> Iterator[None]:
    """Run the block with `threads` intra-op threads and `torch.set_flush_denormal(flush)` on the
    calling thread; both are restored afterwards. (Changes process state while active, hence
    `set_`.) The flush setting is the calling thread's alone: see the module docstring."""
    import torch

    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    torch.set_flush_denormal(flush)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)
        torch.set_num_threads(old_threads)


def denormal_operands(n: int, share: float = 1 / 3, seed: int = 0):
    """Two fp32 n×n operands for `a @ b`: `a` normal N(0, 1) except a `share` of its rows scaled
    into the denormal range (×1e-39); `b` normal. Also returns the all-normal `a` for comparison."""
    import torch

    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=g)
    b = torch.randn(n, n, generator=g)
    a_den = a.clone()
    rows = max(1, int(n * share))
    a_den[:rows] *= 1e-39
    return a, a_den, b


def denormal_matmul_slowdown(n: int = 512, *, threads: Iterable[int] | None = None, share: float = 1 / 3,
                             rep_ms: float = 40, warmup_ms: float = 10) -> list[dict[str, Any]]:
    """Time an fp32 n×n matmul with normal inputs and with `share` of A's rows denormal, for each
    thread count (default: 1 and all of torch's) with flush off and on. One row per setting:
    threads, flush, normal_s, denormal_s, slowdown (denormal / normal), denormal_inputs (count).
    Runs on the CPU (GPUs handle denormals at full speed: nothing to show there)."""
    import torch

    from perflab.core.timing import bench
    from perflab.core.validate import positive_int

    n = positive_int("n", n)
    if threads is None:
        threads = sorted({1, torch.get_num_threads()})
    a, a_den, b = denormal_operands(n, share)
    out = torch.empty(n, n)
    counted = count_denormals([a_den]).denormal
    rows = []
    for t in threads:
        t = positive_int("threads", t)
        for flush in (False, True):
            with set_threads_and_flush(t, flush):
                normal = bench(lambda: torch.mm(a, b, out=out), device="cpu", rep_ms=rep_ms, warmup_ms=warmup_ms,
                               label=f"normal, {t} thread(s)").median_s
                den = bench(lambda: torch.mm(a_den, b, out=out), device="cpu", rep_ms=rep_ms, warmup_ms=warmup_ms,
                            label=f"denormal, {t} thread(s)").median_s
            rows.append({"threads": t, "flush_denormal": flush, "normal_ms": normal * 1e3, "denormal_ms": den * 1e3,
                         "slowdown": den / normal, "denormal_inputs": counted})
    return rows


def penalty_verdict(rows: Iterable[dict[str, Any]], *, threshold: float = 3.0) -> dict[str, Any]:
    """What `denormal_matmul_slowdown`'s rows say about this CPU, as data and one line.

    The CPU *pays* for denormals when the 1-thread matmul without flushing is at least `threshold`
    times slower with denormal inputs (timing noise on a busy machine stays well under 2x);
    flushing *fixes* it on the calling thread when the flushed 1-thread slowdown is under half the
    unflushed one. Returns pays, slowdown (1 thread, no flush), flushed (1 thread, flush), and
    line."""
    by = {(int(r["threads"]), bool(r["flush_denormal"])): float(r["slowdown"]) for r in rows}
    if (1, False) not in by or (1, True) not in by:
        raise InputError("penalty_verdict needs the 1-thread rows with flush off and on "
                         "(measure with threads including 1)")
    slow, flushed = by[(1, False)], by[(1, True)]
    pays = slow >= threshold
    fixes = pays and flushed < slow / 2
    if pays:
        line = (f"this CPU pays for denormals: {slow:.0f}x slower on 1 thread; with flushing "
                + (f"{flushed:.1f}x (fixed on the calling thread)" if fixes else f"still {flushed:.1f}x"))
    else:
        line = (f"this CPU ran the denormal matmul at full speed ({slow:.1f}x on 1 thread): its multiply-add "
                "units handle denormal operands in hardware, as GPUs do; not every CPU does")
    return {"pays": pays, "flush_fixes": fixes, "slowdown": slow, "flushed": flushed, "threshold": threshold,
            "line": line}


def flush_is_per_thread(n: int = 256, *, rep_ms: float = 40, warmup_ms: float = 10) -> dict[str, Any]:
    """Show that `torch.set_flush_denormal(True)` covers only the thread that called it.

    A second Python thread starts first and waits; the main thread then turns flushing on and
    times the normal and the denormal matmul with one intra-op thread (so the matmul runs on the
    calling thread); then the waiting thread, which started before the switch, times the same
    two. Each thread's slowdown (denormal / normal) is its own ratio, so a thread that is merely
    slower at everything does not count. (A thread created after the switch inherits the setting
    on Linux: so do torch's worker threads, if the pool starts after it.)

    Returns milliseconds per thread and input ('caller_normal_ms', 'caller_ms' (denormal),
    'other_normal_ms', 'other_thread_ms' (denormal)), each thread's slowdown, and 'ratio' = the
    other thread's slowdown / the caller's. On a CPU that does not pay for denormals both
    slowdowns are about 1 and the per-thread setting has nothing to show."""
    import threading

    import torch

    from perflab.core.timing import bench

    a, a_den, b = denormal_operands(n)
    out = torch.empty(n, n)
    res: dict[str, Any] = {}
    go = threading.Event()

    def timed(x):
        return bench(lambda: torch.mm(x, b, out=out), device="cpu", rep_ms=rep_ms, warmup_ms=warmup_ms).median_s * 1e3

    def other():
        go.wait()
        res["other_normal_ms"] = timed(a)
        res["other_thread_ms"] = timed(a_den)

    worker = threading.Thread(target=other)
    worker.start()
    try:
        with set_threads_and_flush(1, True):
            res["caller_normal_ms"] = timed(a)
            res["caller_ms"] = timed(a_den)
            go.set()
            worker.join()
    finally:
        go.set()
        worker.join()
    res["caller_slowdown"] = res["caller_ms"] / res["caller_normal_ms"]
    res["other_slowdown"] = res["other_thread_ms"] / res["other_normal_ms"]
    res["ratio"] = res["other_slowdown"] / res["caller_slowdown"]
    return res


def reference() -> dict[str, Any]:
    """The figures recorded on a CPU that pays for denormals (data/denormal_reference.json), with
    their source, and each row's slowdown computed from its times."""
    import json
    from importlib import resources

    ref = json.loads(resources.files("perflab.core").joinpath("data/denormal_reference.json").read_text())
    for r in ref["rows"]:
        r["slowdown"] = r["denormal_ms"] / r["normal_ms"]
    return ref


def beside_reference(rows: Iterable[dict[str, Any]], ref: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The recorded CPU's rows (`reference()`) with this machine's slowdown for the same setting
    beside each: one dict per recorded row. A setting not measured here (torch has fewer threads
    than the recorded row) says so instead of a number."""
    import torch

    ref = ref if ref is not None else reference()
    here = {(int(r["threads"]), bool(r["flush_denormal"])): float(r["slowdown"]) for r in rows}
    out = []
    for r in ref["rows"]:
        key = (int(r["threads"]), bool(r["flush_denormal"]))
        out.append({"threads": key[0], "flush_denormal": key[1], "recorded normal (ms)": round(r["normal_ms"], 2),
                    "recorded denormal (ms)": round(r["denormal_ms"], 2), "recorded slowdown": round(r["slowdown"], 1),
                    "slowdown here": f"{here[key]:.1f}" if key in here
                    else f"not measured (torch uses {torch.get_num_threads()} thread(s) here)"})
    return out


def per_thread_rows(per: dict[str, Any]) -> list[dict[str, Any]]:
    """`flush_is_per_thread`'s result as one row per thread (milliseconds and slowdown)."""
    return [{"thread": "the one that called set_flush_denormal(True)", "normal (ms)": per["caller_normal_ms"],
             "denormal (ms)": per["caller_ms"], "slowdown": per["caller_slowdown"]},
            {"thread": "a thread that started before the call", "normal (ms)": per["other_normal_ms"],
             "denormal (ms)": per["other_thread_ms"], "slowdown": per["other_slowdown"]}]


def per_thread_line(per: dict[str, Any], verdict: dict[str, Any]) -> str:
    """What the per-thread measurement shows, given `penalty_verdict` of the same CPU."""
    if verdict["pays"]:
        return f"the thread that did not set the flag is {per['ratio']:.1f}x as slowed down as the one that did"
    return ("this CPU does not pay for denormals, so both threads run them at full speed: the per-thread flag has "
            "nothing to show here (the recorded 2-thread rows above show it)")
