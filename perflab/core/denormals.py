"""Denormals (subnormal floats): the silent slowdown of CPU matmuls, counted and measured.

A float below the smallest normal number (`torch.finfo(dtype).tiny`: 1.18e-38 in fp32) loses
precision gradually instead of flushing to zero. Many x86 cores handle such operands in microcode,
tens of times slower per operation, unless the thread's FTZ/DAZ bits tell the core to treat them as
zero; others handle them at full speed in some or all units. Which kind a CPU is can only be
measured, so `denormal_matmul_slowdown` measures it (a `DenormalSweep`) and its `verdict()` says what
it found (a `PenaltyVerdict`). `torch.set_flush_denormal(True)` sets those bits, but only on the thread
that calls it: torch's intra-op worker threads keep their own (`flush_is_per_thread`, a `PerThread`).
GPUs process denormals at full speed (or flush them), so this is a CPU story, and the course's own: a
tied embedding left at N(0, 1) once saturated the softmax of perflab's untrained model, and its
gradients came out denormal. `reference()` holds the figures measured then on a CPU that pays
(data/denormal_reference.json, a `RecordedReference`); `init_story` measures the three versions of
that model's first step (an `InitStory`).

Every measured figure carries the machine's quietness (`perflab.core.quietness`). A row measured on
a busy machine is marked so in its table, and a verdict that would read it is *inconclusive: the
machine was busy (…)* instead: a neighbour's load moves a timing by 2× and more, which is not what
denormals cost.

    >>> count_denormals(model.parameters(), grads=True)   # how many gradient entries are denormal
    >>> sweep = denormal_matmul_slowdown(n=256)          # timed, per thread setting and flush mode
    >>> sweep.verdict().line                            # does this CPU pay for them?
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, package_json
from perflab.core.quietness import UNKNOWN, Quietness
from perflab.core.readout import MACHINE, machine, num
from perflab.core.verdicts import busy_text

THRESHOLD = 3.0  # a 1-thread slowdown at least this large means the CPU pays (a quiet machine's noise stays well under 2×)


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


# ---------------------------------------------------------------- the matmul, by thread setting and flush mode

@dataclass(frozen=True)
class DenormalRow:
    """One setting of the matmul: its normal and denormal median times and the machine while both ran."""

    threads: int
    flush: bool  # torch.set_flush_denormal(True) on the calling thread
    normal_s: float
    denormal_s: float
    quietness: Quietness = UNKNOWN

    JSON_EXTRA = ("slowdown",)

    @property
    def slowdown(self) -> float:
        """Denormal time ÷ normal time: 1 where denormals cost nothing."""
        return self.denormal_s / self.normal_s

    @property
    def disturbed(self) -> bool:
        return self.quietness.disturbed

    @property
    def setting(self) -> str:
        return f"{self.threads}-thread, flushing-{'on' if self.flush else 'off'}"


@dataclass(frozen=True)
class PenaltyVerdict:
    """What the 1-thread rows say about this CPU: it pays for denormals, or runs them at full speed, or
    nothing (a row it reads was measured on a busy machine: `busy` holds the cause)."""

    slowdown: float  # 1 thread, flushing off
    flushed: float  # 1 thread, flushing on
    threshold: float = THRESHOLD
    busy: str | None = None  # the cause, when a row the verdict reads was disturbed
    busy_rows: tuple[str, ...] = ()  # the other settings measured on a busy machine (shown, not read)

    JSON_EXTRA = ("kind", "pays", "flush_fixes", "line")

    @property
    def kind(self) -> str:
        """'inconclusive', 'pays' or 'full speed'."""
        if self.busy is not None:
            return "inconclusive"
        return "pays" if self.slowdown >= self.threshold else "full speed"

    @property
    def pays(self) -> bool:
        """True only when the CPU was seen to pay (never on a busy machine)."""
        return self.kind == "pays"

    @property
    def flush_fixes(self) -> bool:
        """Flushing fixes it on the calling thread: the flushed slowdown is under half the unflushed one."""
        return self.pays and self.flushed < self.slowdown / 2

    @property
    def line(self) -> str:
        """The verdict in one sentence, computed from the rows it reads."""
        one = f"{num(self.slowdown, 2)}× with flushing off, {num(self.flushed, 2)}× with it on"
        if self.busy is not None:
            return (f"{busy_text(self.busy)}: the 1-thread rows ({one}) say nothing about this CPU's denormals; "
                    "run the cell again when the machine is quiet")
        if self.pays:
            line = (f"this CPU pays for denormals: {num(self.slowdown, 2)}× slower on 1 thread; with flushing "
                    + (f"{num(self.flushed, 2)}× (fixed on the calling thread)" if self.flush_fixes
                       else f"still {num(self.flushed, 2)}×"))
        else:
            line = (f"this CPU ran the denormal matmul at full speed on 1 thread ({one}; paying would be "
                    f"{self.threshold:g}× or more): its multiply-add units handle denormal operands in hardware, "
                    "as GPUs do; not every CPU does")
        if self.busy_rows:
            rows = " and ".join(self.busy_rows)
            line += (f"; the {rows} row{'s were' if len(self.busy_rows) > 1 else ' was'} measured on a busy machine, "
                     "so the verdict does not read them")
        return line


def penalty_verdict(rows: Iterable[Any], *, threshold: float = THRESHOLD) -> PenaltyVerdict:
    """The verdict of a sweep's rows (`DenormalRow`s, a `DenormalSweep` or a `RecordedReference`'s rows).

    The CPU *pays* for denormals when the 1-thread matmul without flushing is at least `threshold`
    times slower with denormal inputs; flushing *fixes* it on the calling thread when the flushed
    1-thread slowdown is under half the unflushed one. A disturbed 1-thread row makes it inconclusive."""
    rows = list(getattr(rows, "rows", rows))
    by = {(int(r.threads), bool(r.flush)): r for r in rows}
    if (1, False) not in by or (1, True) not in by:
        raise InputError("penalty_verdict needs the 1-thread rows with flush off and on "
                         "(measure with threads including 1)")
    read = (by[(1, False)], by[(1, True)])

    def quiet(r: Any) -> Quietness:
        return getattr(r, "quietness", UNKNOWN)

    busy = next((quiet(r).cause or "quietness not measured" for r in read if quiet(r).disturbed), None)
    others = tuple(r.setting for r in rows if r not in read and quiet(r).disturbed)
    return PenaltyVerdict(read[0].slowdown, read[1].slowdown, threshold, busy, others)


@dataclass(frozen=True)
class DenormalSweep:
    """The fp32 n×n matmul timed with normal and denormal inputs for each thread count and flush mode."""

    n: int
    denormal_inputs: int  # denormal entries of A
    rows: tuple[DenormalRow, ...]

    JSON_EXTRA = ("quietness",)

    def row(self, threads: int, flush: bool) -> DenormalRow | None:
        return next((r for r in self.rows if r.threads == threads and r.flush == flush), None)

    @property
    def one_thread(self) -> DenormalRow:
        """The row a prediction of "1 thread, flushing off" is revealed against."""
        r = self.row(1, False)
        if r is None:
            raise InputError("this sweep has no 1-thread row with flushing off")
        return r

    @property
    def quietness(self) -> Quietness:
        return Quietness.combine(r.quietness for r in self.rows)

    def verdict(self, threshold: float = THRESHOLD) -> PenaltyVerdict:
        return penalty_verdict(self.rows, threshold=threshold)

    def table(self):
        """One row per setting: times in ms, the slowdown, and the machine while it was measured."""
        import pandas as pd

        return pd.DataFrame([{"threads": r.threads, "flushing": "on" if r.flush else "off",
                              "normal (ms)": num(r.normal_s * 1e3), "denormal (ms)": num(r.denormal_s * 1e3),
                              "slowdown (×)": num(r.slowdown, 2), MACHINE: machine(r.quietness)} for r in self.rows])

    def sentence(self) -> str:
        """The verdict's line, with the count of denormal entries it measured."""
        return (f"A ({self.n}×{self.n} fp32) holds {num(self.denormal_inputs)} denormal entries. "
                f"{_capital(self.verdict().line)}.")


def denormal_matmul_slowdown(n: int = 512, *, threads: Iterable[int] | None = None, share: float = 1 / 3,
                             rep_ms: float = 40, warmup_ms: float = 10) -> DenormalSweep:
    """Time an fp32 n×n matmul with normal inputs and with `share` of A's rows denormal, for each
    thread count (default: 1 and all of torch's) with flush off and on. Each row carries the machine's
    quietness over both of its timings. Runs on the CPU (GPUs handle denormals at full speed: nothing
    to show there)."""
    import torch

    from perflab.core.quietness import watch
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
            with set_threads_and_flush(t, flush), watch("cpu") as w:  # watches the `t` cores the matmul uses
                normal = bench(lambda: torch.mm(a, b, out=out), device="cpu", rep_ms=rep_ms, warmup_ms=warmup_ms,
                               label=f"normal, {t} thread(s)")
                den = bench(lambda: torch.mm(a_den, b, out=out), device="cpu", rep_ms=rep_ms, warmup_ms=warmup_ms,
                            label=f"denormal, {t} thread(s)")
            # the window around both timings; where it was too short to judge, what the timings themselves saw
            q = w.result if w.result.verdict != "unknown" else Quietness.combine([normal.quietness, den.quietness])
            rows.append(DenormalRow(t, flush, normal.median_s, den.median_s, q))
    return DenormalSweep(n, counted, tuple(rows))


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


# ---------------------------------------------------------------- the flag is per thread

@dataclass(frozen=True)
class ThreadTimes:
    """One thread's normal and denormal matmul, milliseconds apart."""

    thread: str
    normal_s: float
    denormal_s: float

    @property
    def slowdown(self) -> float:
        return self.denormal_s / self.normal_s


@dataclass(frozen=True)
class PerThread:
    """The thread that set the flag and one that started before it, each timing the same two matmuls."""

    caller: ThreadTimes
    other: ThreadTimes
    quietness: Quietness = UNKNOWN

    JSON_EXTRA = ("ratio",)

    @property
    def ratio(self) -> float:
        """The other thread's slowdown ÷ the caller's: how much more the flag-less thread pays."""
        return self.other.slowdown / self.caller.slowdown

    def table(self):
        import pandas as pd

        return pd.DataFrame([{"thread": t.thread, "normal (ms)": num(t.normal_s * 1e3),
                              "denormal (ms)": num(t.denormal_s * 1e3), "slowdown (×)": num(t.slowdown, 2),
                              MACHINE: machine(self.quietness)} for t in (self.caller, self.other)])

    def line(self, verdict: PenaltyVerdict) -> str:
        """What it shows, given the verdict of the same CPU (`DenormalSweep.verdict`)."""
        if self.quietness.disturbed:
            return (f"{busy_text(self.quietness.cause)}: the two threads' slowdowns ({num(self.caller.slowdown, 2)}× "
                    f"and {num(self.other.slowdown, 2)}×) say nothing about the flag; run the cell again when it is quiet")
        if verdict.kind == "inconclusive":
            return ("the matmul above was measured on a busy machine, so whether this CPU pays for denormals is not "
                    f"known; here the two threads ran {num(self.caller.slowdown, 2)}× and {num(self.other.slowdown, 2)}× "
                    "slower with denormal inputs")
        if verdict.pays:
            return (f"the thread that did not set the flag is {num(self.ratio, 2)}× as slowed down as the one that did "
                    f"({num(self.other.slowdown, 2)}× against {num(self.caller.slowdown, 2)}×)")
        return ("this CPU does not pay for denormals, so both threads run them at full speed: the per-thread flag has "
                "nothing to show here (the recorded 2-thread rows above show it)")


def flush_is_per_thread(n: int = 256, *, rep_ms: float = 40, warmup_ms: float = 10) -> PerThread:
    """Show that `torch.set_flush_denormal(True)` covers only the thread that called it.

    A second Python thread starts first and waits; the main thread then turns flushing on and
    times the normal and the denormal matmul with one intra-op thread (so the matmul runs on the
    calling thread); then the waiting thread, which started before the switch, times the same
    two. Each thread's slowdown (denormal / normal) is its own ratio, so a thread that is merely
    slower at everything does not count. (A thread created after the switch inherits the setting
    on Linux: so do torch's worker threads, if the pool starts after it.) One thread computes at a
    time, so the machine's quietness is watched on one core."""
    import threading

    import torch

    from perflab.core.quietness import watch
    from perflab.core.timing import bench

    a, a_den, b = denormal_operands(n)
    out = torch.empty(n, n)
    res: dict[str, float] = {}
    go = threading.Event()

    def timed(x) -> float:
        return bench(lambda: torch.mm(x, b, out=out), device="cpu", rep_ms=rep_ms, warmup_ms=warmup_ms).median_s

    def other():
        go.wait()
        res["other_normal"] = timed(a)
        res["other_denormal"] = timed(a_den)

    worker = threading.Thread(target=other)
    worker.start()
    try:
        with set_threads_and_flush(1, True), watch("cpu", cores=1) as w:
            res["caller_normal"] = timed(a)
            res["caller_denormal"] = timed(a_den)
            go.set()
            worker.join()
    finally:
        go.set()
        worker.join()
    return PerThread(ThreadTimes("the one that called set_flush_denormal(True)", res["caller_normal"],
                                 res["caller_denormal"]),
                     ThreadTimes("a thread that started before the call", res["other_normal"], res["other_denormal"]),
                     w.result)


# ---------------------------------------------------------------- the CPU that paid, as recorded

NOT_RECORDED = Quietness("unknown", None, 0.0, 1, None, None, "not recorded with these figures")


@dataclass(frozen=True)
class RecordedReference:
    """The figures recorded on a CPU that pays for denormals, with their source. Their machine's
    quietness was not recorded with them (`NOT_RECORDED`)."""

    source: str
    cpu: str
    rows: tuple[DenormalRow, ...]
    step: dict[str, Any] = field(default_factory=dict)  # the degenerate training step's figures
    notes: tuple[str, ...] = ()

    def verdict(self) -> PenaltyVerdict:
        return penalty_verdict(self.rows)

    def beside(self, sweep: DenormalSweep):
        """The recorded rows with this machine's slowdown for the same setting beside each; a setting not
        measured here says so, and one measured on a busy machine says that."""
        import pandas as pd
        import torch

        out = []
        for r in self.rows:
            here = sweep.row(r.threads, r.flush)
            if here is None:
                mine = f"not measured (torch uses {torch.get_num_threads()} thread(s) here)"
            else:
                mine = num(here.slowdown, 2) + (" (busy: says nothing)" if here.disturbed else "")
            out.append({"threads": r.threads, "flushing": "on" if r.flush else "off",
                        "recorded normal (ms)": num(r.normal_s * 1e3), "recorded denormal (ms)": num(r.denormal_s * 1e3),
                        "recorded slowdown (×)": num(r.slowdown, 2), "slowdown here (×)": mine})
        return pd.DataFrame(out)

    def to_json(self) -> JSON:
        from perflab.core.jsonable import fields_json

        return fields_json(self)


def reference() -> RecordedReference:
    """The figures recorded on a CPU that pays for denormals (data/denormal_reference.json), with
    their source."""
    raw = package_json("perflab.core", "denormal_reference.json")
    rows = tuple(DenormalRow(int(r["threads"]), bool(r["flush_denormal"]), r["normal_ms"] / 1e3, r["denormal_ms"] / 1e3,
                             NOT_RECORDED) for r in raw["rows"])
    return RecordedReference(raw["source"], raw.get("cpu", ""), rows, dict(raw.get("step", {})),
                             tuple(raw.get("notes", ())))


# ---------------------------------------------------------------- the course's own story, measured

@dataclass(frozen=True)
class InitVersion:
    """One version of an untrained model's first step: how it was built and scored, what it gave, and the
    machine while its forward + backward was timed."""

    init: str  # 'torch' (PyTorch's defaults) or 'gpt2' (N(0, 0.02), residual projections scaled)
    targets: str  # 'inputs' (each position scored against its own token: the old bug) or 'next'
    loss: float
    ln_V: float  # an untrained model's loss when it guesses every token equally
    denormal_grads: int
    denormal_grad_fraction: float
    fwd_bwd_s: float  # the fastest of a few forward + backward passes
    quietness: Quietness = UNKNOWN


@dataclass(frozen=True)
class InitStory:
    """The three versions of lesson 00's story: the degenerate one (PyTorch's init, own-token targets),
    PyTorch's init with next-token targets, and the course's init (GPT-2's) with next-token targets."""

    model: str
    versions: tuple[InitVersion, ...]
    threshold: float = THRESHOLD

    def table(self):
        import pandas as pd

        return pd.DataFrame([{"version": i, "init": v.init, "targets": v.targets, "loss": num(v.loss),
                              "ln V (a uniform guess)": num(v.ln_V), "denormal gradients": num(v.denormal_grads),
                              "denormal share (%)": num(100 * v.denormal_grad_fraction, 2),
                              "forward + backward (ms)": num(v.fwd_bwd_s * 1e3), MACHINE: machine(v.quietness)}
                             for i, v in enumerate(self.versions, start=1)])

    def finding(self, verdict: PenaltyVerdict | None = None) -> str:
        """What the table shows, computed from it: the losses and counts always; the times only when no
        version was timed on a busy machine, read against this CPU's `verdict` when it is given."""
        bad, healthy = self.versions[0], self.versions[-1]
        lines = [f"version 1 scores each token against itself: loss {num(bad.loss, 2)} (ln V = {num(bad.ln_V, 3)}), "
                 f"{num(bad.denormal_grads)} denormal gradient entries ({num(100 * bad.denormal_grad_fraction, 2)} %); "
                 f"version {len(self.versions)} starts where an untrained model should, loss {num(healthy.loss, 3)}, with "
                 f"{num(healthy.denormal_grads)} denormal entries."]
        busy = [i for i, v in enumerate(self.versions, start=1) if v.quietness.disturbed]
        if busy:
            cause = self.versions[busy[0] - 1].quietness.cause
            lines.append(f"The times say nothing: {busy_text(cause)} while version{'s' if len(busy) > 1 else ''} "
                         f"{', '.join(map(str, busy))} {'were' if len(busy) > 1 else 'was'} timed; run the cell again "
                         "when it is quiet.")
            return " ".join(lines)
        r = bad.fwd_bwd_s / healthy.fwd_bwd_s
        times = f"version 1 took {num(r, 2)}× version {len(self.versions)}'s time for the same FLOPs"
        odd = self._unexplained()
        if odd is not None:
            (i, a), (j, b) = odd
            lines.append(f"{times}; but version {i} ({num(100 * a.denormal_grad_fraction, 2)} % denormal) took "
                         f"{num(a.fwd_bwd_s / b.fwd_bwd_s, 2)}× version {j}'s time ({num(100 * b.denormal_grad_fraction, 2)} "
                         "%), which denormals cannot explain: something else changed between them (the machine's load "
                         "or clock); run the cell again.")
        elif r >= self.threshold:
            why = ("its denormal gradients cost this CPU that time" if verdict is None or verdict.pays else
                   "more than the matmul above suggests this CPU pays for denormals: run the cell again")
            lines.append(f"{times}: {why}.")
        elif verdict is not None and verdict.kind == "full speed":
            lines.append(f"{times}: this CPU runs denormals at full speed (the matmul above), so here only the loss "
                         "and the count show the bug.")
        else:
            lines.append(f"{times}: under the {self.threshold:g}× that would show a cost, so here only the loss "
                         "and the count show the bug.")
        return " ".join(lines)

    def _unexplained(self):
        """Two versions where the one with no more denormal gradients took `threshold`× the other's time or
        more (numbered from 1), or None."""
        vs = list(enumerate(self.versions, start=1))
        return next((((i, a), (j, b)) for i, a in vs for j, b in vs
                     if a.denormal_grad_fraction <= b.denormal_grad_fraction and a.fwd_bwd_s >= self.threshold * b.fwd_bwd_s),
                    None)


VERSIONS = (("torch", "inputs"), ("torch", "next"), ("gpt2", "next"))


def init_story(cfg: Any, health: Any, *, seq: int, reps: int, device: Any = None, batch: int = 1) -> InitStory:
    """The course's own story, measured: each version of `VERSIONS` run by `health(cfg, init=, targets=,
    batch=, seq=, reps=, device=)` (`perflab.workload.train.untrained_health`, passed in: the core does not
    import the workload), in the device's turn (`perflab.core.lock`) and watched for the machine's
    quietness. It says which version it measures as it goes (each takes seconds on a CPU)."""
    import torch

    from perflab.core.device import pick_device
    from perflab.core.lock import device_lock
    from perflab.core.quietness import watch

    dev = torch.device(device) if device is not None else pick_device()
    out = []
    for k, (init, targets) in enumerate(VERSIONS, start=1):
        print(f"measuring version {k} of {len(VERSIONS)}: init {init}, targets {targets} …", flush=True)
        with device_lock(dev, label="an untrained model's first step"), watch(dev) as w:
            h = health(cfg, init=init, targets=targets, batch=batch, seq=seq, reps=reps, device=dev)
        out.append(InitVersion(init, targets, float(h.loss), float(h.ln_V), int(h.denormal_grads),
                               float(h.denormal_grad_fraction), float(h.fwd_bwd_s), w.result))
    return InitStory(getattr(cfg, "name", str(cfg)), tuple(out))
