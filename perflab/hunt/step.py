"""The hunt's training step, with any set of planted regressions switched on, and its instruments.

    >>> s = HuntStep(frozenset({"gc", "loader"}))        # a step with two regressions on
    >>> s.run(4)                                          # 4 optimizer steps: per-step phase seconds
    >>> s.counters()                                      # Counters: gc collections, threads, data waits
    >>> s.profile()                                       # Profiled: one step under torch.profiler, its ops, diagnosis
    >>> s.close()
    >>> costs = measure_costs()                           # each regression's cost here, interleaved

The step is perflab's: the capstone's GPT-shaped CPU model (`perflab.tune.ladder.CPU_CFG`, at the
sizes of `perflab.hunt.sizes`), sequences read through a DataLoader from a data set whose reads wait on
"storage" (a sleep stands for the read, as in lesson 07), next-token cross-entropy, backward,
gradient clipping to a global norm, AdamW. Two worker processes read ahead; they stay up across
epochs. Every configuration starts from the same weights (random seed 0) and reads the same sequences in
the same order, so the loss after N steps is the same with or without any regression: a fix that
moves it beyond fp32's tolerance (`perflab.compiler.parity`) changed the model.

Phases (`PHASES`) are timed on the host with `time.perf_counter` (the step runs on a CPU): data
(waiting for `next()`), forward, backward, clip, optimizer, other (what runs after the optimizer,
such as a collection).
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, fields_json
from perflab.core.quietness import UNKNOWN, Quietness, watch
from perflab.hunt.pool import KEEP_SHARE, MODEL_FIXES, NAMES, regression
from perflab.hunt.sizes import LESSON, HuntSizes
from perflab.workload.models import build_model
from perflab.workload.train import next_token_loss

PHASES = ("data", "forward", "backward", "clip", "optimizer", "other")
LOADER_TIMEOUT_S = 120.0


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


class _Reads(torch.utils.data.Dataset):
    """Sequence i of a fixed random corpus (inputs, next-token targets), each read waiting `io_s`."""

    def __init__(self, n: int, seq: int, vocab: int, io_s: float):
        self.n, self.seq, self.vocab, self.io_s = n, seq, vocab, io_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.io_s:
            time.sleep(self.io_s)
        g = torch.Generator().manual_seed(1_000_003 + i)
        ids = torch.randint(0, self.vocab, (self.seq + 1,), generator=g)
        return ids[:-1], ids[1:]


class _OpenDataset:
    """A worker's start: it opens the data set (index files, a connection), which takes `start_s`."""

    def __init__(self, start_s: float):
        self.start_s = start_s

    def __call__(self, _worker_id: int) -> None:
        torch.set_num_threads(1)
        time.sleep(self.start_s)


def _host_stats_hook(module, inputs, out):
    """The logging hook: each layer's output checked for NaN (a value read back: `.item()`), copied
    to the host and summarised there (lesson 09's `sync` fault, as a logging line writes it)."""
    import numpy as np

    if not bool(torch.isfinite(out).all().item()):
        raise FloatingPointError("non-finite activations")
    np.percentile(out.detach().to("cpu", copy=True).numpy(), [1, 50, 99])


def _clip_per_tensor(params: Sequence[torch.nn.Parameter], max_norm: float) -> None:
    """Global-norm clipping written one tensor at a time, each norm read back to the host."""
    total = 0.0
    for p in params:
        if p.grad is not None:
            total += p.grad.norm().item() ** 2
    coef = max_norm / (math.sqrt(total) + 1e-6)
    if coef < 1.0:
        for p in params:
            if p.grad is not None:
                p.grad.mul_(coef)


@contextlib.contextmanager
def _threads(n: int):
    old = torch.get_num_threads()
    if n != old:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != old:
            torch.set_num_threads(old)


class HuntStep:
    """One training step with the regressions `planted` on, minus those `fixes` turn back.

    fixes: names from `perflab.hunt.pool.ALL_FIXES`; a model-changing one (`MODEL_FIXES`) changes
    the step as it says. A fix that turns back nothing planted changes nothing."""

    def __init__(self, planted: Iterable[str] = (), fixes: Iterable[str] = (), sizes: HuntSizes | None = None,
                 threads: int | None = None):
        planted = frozenset(planted)
        fixes = frozenset(fixes)
        for p in planted:
            regression(p)
        from perflab.hunt.pool import ALL_FIXES

        unknown = sorted(f for f in fixes if f not in ALL_FIXES)
        if unknown:
            raise InputError(f"unknown fix {unknown[0]!r}: choose from {', '.join(ALL_FIXES)}")
        self._on = frozenset(p for p in planted if regression(p).fix not in fixes)
        self._model_fixes = frozenset(f for f in fixes if f in MODEL_FIXES)
        sz = sizes or LESSON
        if "half_batch" in self._model_fixes:
            sz = replace(sz, batch=max(1, sz.batch // 2))
        self.sizes = sz
        self.clean_threads = threads or sz.threads
        on = self._on
        if "threads_over" in on:
            self.threads = 4 * usable_cores()
        else:
            self.threads = self.clean_threads
        cfg = sz.cfg
        with _threads(self.threads):
            self.model = build_model(cfg, seed=0)
        if "fewer_layers" in self._model_fixes and len(self.model.blocks) > 1:
            self.model.blocks = self.model.blocks[:-1]
        if "attention" in on:
            from perflab.tune.runner import WrittenOutAttention

            for blk in self.model.blocks:
                attn: Any = blk.attn
                attn.__class__ = WrittenOutAttention
        self._hooks = []
        if "host_stats" in on:
            lins = [m for m in self.model.modules() if isinstance(m, torch.nn.Linear)]
            if sz.stats_layers:
                lins = lins[: sz.stats_layers]
            self._hooks = [m.register_forward_hook(_host_stats_hook) for m in lins]
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=sz.lr, foreach="adamw_loop" not in on)
        self.seq = sz.seq // 2 if "shorter_seq" in self._model_fixes else sz.seq
        n = sz.epoch_steps * sz.batch
        ds = _Reads(n, sz.seq, cfg.vocab, sz.io_ms / 1e3)
        workers = 0 if "loader" in on else sz.workers
        kw: dict[str, Any] = {}
        if workers:
            kw = {"prefetch_factor": 4, "persistent_workers": "respawn" not in on,
                  "worker_init_fn": _OpenDataset(sz.worker_start_s),
                  "timeout": LOADER_TIMEOUT_S}  # a worker that hangs raises instead of stalling the lesson
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*worker processes in total.*")
            self.loader: Any = torch.utils.data.DataLoader(ds, batch_size=sz.batch, shuffle=False, num_workers=workers, **kw)
        self._pids: set[int] = set()
        self._epochs = 0
        self._restarts = 0
        self._it: Any = self._batches()
        self.losses: list[float] = []
        self.steps_done = 0
        self._gen2 = 0
        self.history: list[dict[str, float]] = []

    # ---------------------------------------------------------------- running

    def _batches(self):
        while True:
            it = iter(self.loader)
            pids = {w.pid for w in getattr(it, "_workers", [])}
            if self._epochs:
                self._restarts += len(pids - self._pids)
            self._pids |= pids
            self._epochs += 1
            yield from it

    def _count_gc(self, phase, info):
        if phase == "start" and info.get("generation") == 2:
            self._gen2 += 1

    def step(self) -> dict[str, float]:
        """One optimizer step; seconds per phase, `step` their sum, and the step's gen-2 collections."""
        on = self._on
        pc = time.perf_counter
        gc.callbacks.append(self._count_gc)
        self._gen2 = 0
        try:
            with _threads(self.threads):
                t0 = pc()
                x, y = next(self._it)
                if self.seq != x.shape[1]:
                    x, y = x[:, : self.seq], y[:, : self.seq]
                t1 = pc()
                loss = next_token_loss(self.model(x), y)
                t2 = pc()
                loss.backward()
                t3 = pc()
                if "no_clipping" not in self._model_fixes:
                    if "clip_loop" in on:
                        _clip_per_tensor(self.params, self.sizes.clip)
                    else:
                        torch.nn.utils.clip_grad_norm_(self.params, self.sizes.clip, foreach=True)
                t4 = pc()
                self.opt.step()
                self.opt.zero_grad(set_to_none=True)
                t5 = pc()
                if "gc" in on:
                    gc.collect()
                t6 = pc()
        finally:
            gc.callbacks.remove(self._count_gc)
        self.losses.append(float(loss.detach()))
        self.steps_done += 1
        rec = {"data": t1 - t0, "forward": t2 - t1, "backward": t3 - t2, "clip": t4 - t3, "optimizer": t5 - t4,
               "other": t6 - t5, "step": t6 - t0, "gen2": float(self._gen2),
               "epoch_first": float((self.steps_done - 1) % self.sizes.epoch_steps == 0)}
        self.history.append(rec)
        return rec

    def run(self, steps: int) -> list[dict[str, float]]:
        return [self.step() for _ in range(steps)]

    @property
    def loss(self) -> float:
        return self.losses[-1]

    def close(self) -> None:
        """Stop the DataLoader's workers and drop the hooks."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        it = getattr(self, "_it", None)
        if it is not None:
            it.close()
        self._it = None
        self.loader = None

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()

    # ---------------------------------------------------------------- instruments

    def counters(self) -> Counters:
        """What the counters saw over the steps run so far (after the first, a warm-up). Worker starts
        per epoch count the DataLoader worker processes (by process id) that are new after the first
        epoch."""
        h = self.history[1:] or self.history
        firsts = [r["data"] for r in h if r["epoch_first"]]
        others = [r["data"] for r in h if not r["epoch_first"]]
        return Counters(threads=self.threads, usable_cores=usable_cores(),
                        gen2_per_step=statistics.mean(r["gen2"] for r in h) if h else 0.0,
                        data_wait_epoch_first_s=statistics.median(firsts) if firsts else None,
                        data_wait_other_s=statistics.median(others) if others else None,
                        loader_workers=getattr(self.loader, "num_workers", None),
                        worker_starts_per_epoch=self._restarts / (self._epochs - 1) if self._epochs > 1 else 0.0)

    def profile(self, top: int = 12) -> Profiled:
        """One more step under torch.profiler: the op table (name, calls, self ms) of the top ops by
        self time, and lesson 09's diagnosis of the trace (its top cause and its share)."""
        import json
        import tempfile

        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as tprofile

        from perflab.profiling.diagnose import diagnose
        from perflab.profiling.quiet import quiet_profiler

        fd, path = tempfile.mkstemp(suffix=".json", prefix="perflab-hunt-")
        os.close(fd)
        try:
            with quiet_profiler(), tprofile(activities=[ProfilerActivity.CPU]) as prof:
                with torch.profiler.record_function("data"):
                    pass
                self.step()
                prof.step()
            prof.export_chrome_trace(path)
            with open(path) as f:
                raw = json.load(f)
        finally:
            os.unlink(path)
        calls: dict[str, list[float]] = {}
        for e in raw.get("traceEvents", []):
            if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") == "cpu_op":
                calls.setdefault(str(e["name"]), []).append(float(e.get("dur", 0.0)))
        table = sorted((OpTime(k, len(v), sum(v) / 1e3) for k, v in calls.items()), key=lambda r: -r.total_ms)[:top]
        try:
            d = diagnose(raw)
            diag = TopCause(d.top.cause if d.top else "none", {c.cause: c.seconds for c in d.causes})
        except Exception as e:  # a trace the diagnosis cannot read: say so, keep the table
            diag = TopCause("unreadable", {}, str(e).splitlines()[0])
        return Profiled(table, {k: len(v) for k, v in calls.items()}, diag)


# ---------------------------------------------------------------- what the instruments read


@dataclass
class Counters:
    """What the counters saw over the steps run so far (after the first, a warm-up)."""

    threads: int  # intra-op threads the step runs with
    usable_cores: int
    gen2_per_step: float  # full (generation-2) collections per step
    data_wait_epoch_first_s: float | None  # median wait for next() on an epoch's first step
    data_wait_other_s: float | None  # ... on the other steps
    loader_workers: int | None  # the DataLoader's worker processes
    worker_starts_per_epoch: float  # worker processes started anew per epoch, after the first


@dataclass
class OpTime:
    """One op of the profiled step: its calls and their total time."""

    op: str
    calls: int
    total_ms: float


@dataclass
class TopCause:
    """Lesson 09's diagnosis of the profiled step: the top cause ('none', or 'unreadable' with the
    error) and each cause's seconds."""

    top: str
    causes: dict[str, float]
    error: str | None = None

    def to_json(self) -> JSON:
        out = fields_json(self)
        if self.error is None:
            del out["error"]
        return out


@dataclass
class Profiled:
    """One step under torch.profiler: the top ops by time, every op's calls, the diagnosis."""

    ops: list[OpTime]
    op_calls: dict[str, int]
    diagnosis: TopCause


# ---------------------------------------------------------------- measuring


@dataclass
class Timed:
    label: str
    step_s: float  # median of the timed steps
    phases: dict[str, float]  # median seconds per phase
    steps_s: list[float]
    loss: float
    counters: Counters | None = None
    quietness: Quietness = UNKNOWN  # the machine's while the rounds ran (one window for every configuration)


def interleaved(configs: dict[str, Callable[[], HuntStep]], *, steps: int | None = None, reps: int = 3,
                warmup: int | None = None, progress: Callable[[str], None] | None = None,
                stop_when: Callable[[dict[str, list[dict[str, float]]]], bool] | None = None) -> dict[str, Timed]:
    """Build each configuration, warm each up (one epoch by default), then time `steps` steps of each
    in turn (one epoch by default, so what happens once an epoch is counted once), `reps` rounds, so
    a burst of load on a shared machine falls on every configuration alike. A configuration's step
    time is the median over rounds of the round's mean step. Every configuration runs the same
    number of steps, so their final losses are comparable (parity). `stop_when(rounds)` may end the
    rounds early once the answer is clear (it sees each configuration's round means). Each `Timed`
    carries the machine's quietness over the rounds (`perflab.core.quietness`)."""
    built: dict[str, HuntStep] = {}
    recs: dict[str, list[dict[str, float]]] = {k: [] for k in configs}
    try:
        for k, make in configs.items():
            built[k] = make()
        rounds: dict[str, list[dict[str, float]]] = {k: [] for k in configs}
        for s in built.values():
            s.run(s.sizes.epoch_steps if warmup is None else warmup)
        with watch("cpu") as w:  # the rounds, every configuration's: its DataLoader workers count as its own
            for r in range(reps):
                if r >= 1 and stop_when is not None and stop_when(rounds):
                    break
                for k, s in built.items():
                    got = s.run(s.sizes.epoch_steps if steps is None else steps)
                    recs[k].extend(got)
                    rounds[k].append({p: statistics.mean(x[p] for x in got) for p in (*PHASES, "step")})
                if progress:
                    progress(f"round {r + 1}/{reps}")
        out = {}
        for k, s in built.items():
            rr = rounds[k]
            out[k] = Timed(k, statistics.median(x["step"] for x in rr),
                           {p: statistics.median(x[p] for x in rr) for p in PHASES}, [x["step"] for x in recs[k]],
                           s.loss, s.counters(), w.result)
        return out
    finally:
        for s in built.values():
            s.close()


def parity(loss: float, reference: float) -> tuple[bool, float]:
    """(within fp32's tolerance, the relative difference) of a loss against the clean step's."""
    from perflab.compiler.parity import tolerance

    rel = abs(loss - reference) / max(abs(reference), 1e-12)
    return rel <= tolerance(torch.float32), rel


@dataclass
class Cost:
    name: str
    clean_s: float
    with_s: float
    parity_ok: bool

    @property
    def share(self) -> float:
        """Extra time with the regression on, as a share of the clean step."""
        return self.with_s / self.clean_s - 1.0

    @property
    def kept(self) -> bool:
        return self.share >= KEEP_SHARE and self.parity_ok

    def as_dict(self) -> JSON:
        return {"name": self.name, "clean_s": self.clean_s, "with_s": self.with_s, "share": self.share,
                "kept": self.kept, "parity_ok": self.parity_ok}


def measure_costs(names: Sequence[str] | None = None, sizes: HuntSizes | None = None, *, reps: int = 3, progress: Callable[[str], None] | None = None) -> dict[str, Cost]:
    """Each regression's cost on this machine: the clean step and the step with that one regression
    on, timed in turns (`interleaved`), one pair at a time (so at most two steps' DataLoader workers
    are alive). A regression whose loss leaves parity is reported and never kept."""
    names = tuple(names) if names is not None else NAMES
    sz = sizes or LESSON
    out = {}
    for i, n in enumerate(names):
        regression(n)
        if progress:
            progress(f"[{i + 1}/{len(names)}] {n}")
        out[n] = measure_cost(n, sz, reps=reps)
    return out


def _clearly_kept(name: str):
    """After a round: every round of the regressed step is slower than twice the slowest clean
    round with the keep margin: more rounds would not change the verdict."""
    def stop(rounds) -> bool:
        clean = max(r["step"] for r in rounds["clean"])
        return min(r["step"] for r in rounds[name]) > 2 * (1 + KEEP_SHARE) * clean
    return stop


def measure_cost(name: str, sizes: HuntSizes | None = None, *, reps: int = 3) -> Cost:
    """One regression's cost here: the clean step and the step with it on, in turns (`interleaved`);
    a cost far above the keep margin ends the rounds early."""
    regression(name)
    sz = sizes or LESSON
    t = interleaved({"clean": lambda: HuntStep((), sizes=sz), name: lambda: HuntStep((name,), sizes=sz)},
                    reps=reps, stop_when=_clearly_kept(name))
    ok, _ = parity(t[name].loss, t["clean"].loss)
    return Cost(name, t["clean"].step_s, t[name].step_s, ok)
