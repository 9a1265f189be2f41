"""The measured training loop: how long the loop is blocked in `next()` on the DataLoader, per step.

`measure_loop` builds a DataLoader over a `PipelineDataset`, then for each step times, directly:
- data wait: the time `next(iterator)` takes (never "total minus the sleeps"),
- copy: moving the batch to the device (`non_blocking` when asked),
- compute: the calibrated step work (synchronised on a GPU),
and the step's wall time. The first step of an epoch includes starting the workers; it is kept
apart (`first_wait_s`) so the steady-state median is not hidden by it.

Every measured epoch holds the device's lock (`perflab.core.lock`) and is watched for other programs:
its row carries `quietness` (`perflab.core.quietness`) and `waited_s`, the wait for the lock.

Faults: an exception in a worker comes back as one `LoaderFault` whose message names the worker's
error and carries the worker's traceback; a worker that returns nothing within `timeout` seconds
becomes a `LoaderFault` saying it hung. `sweep_workers` records such a point and goes on.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
import warnings
from dataclasses import dataclass, field

import torch

from perflab.core.errors import InputError, PerflabError
from perflab.dataloading import starvation
from perflab.dataloading.compute import StepCompute
from perflab.dataloading.dataset import PipelineDataset


class LoaderFault(PerflabError):
    """A DataLoader worker failed or hung; the message says which and carries its traceback."""


@dataclass
class LoopResult:
    workers: int
    batch: int
    waits_s: list[float]
    steps_s: list[float]
    compute_s: list[float]
    copy_s: list[float]
    wall_s: float
    setup_s: float
    extra: dict = field(default_factory=dict)

    @property
    def data_wait_s(self) -> float:
        """Median data wait per step, first step excluded when there are others (seconds)."""
        w = self.waits_s[1:] or self.waits_s
        return statistics.median(w)

    @property
    def first_wait_s(self) -> float:
        return self.waits_s[0]

    @property
    def step_s(self) -> float:
        s = self.steps_s[1:] or self.steps_s
        return statistics.median(s)

    @property
    def wait_fraction(self) -> float:
        return self.data_wait_s / self.step_s if self.step_s else 0.0

    @property
    def compute_share(self) -> float:
        """Share of the loop's wall time the step's compute ran (the device's busy share)."""
        return sum(self.compute_s) / self.wall_s if self.wall_s else 0.0

    def as_dict(self) -> dict:
        return {"workers": self.workers, "batch": self.batch, "step_s": self.step_s, "data_wait_s": self.data_wait_s,
                "wait_fraction": self.wait_fraction, "first_wait_s": self.first_wait_s,
                "compute_share": self.compute_share, "copy_s": statistics.median(self.copy_s),
                "setup_s": self.setup_s, **self.extra}


def _fault(exc: BaseException, workers: int, timeout: float, step: int) -> LoaderFault:
    text = str(exc)
    if "timed out" in text.lower():
        return LoaderFault(f"a DataLoader worker hung: no batch within timeout={timeout:g} s at step {step} "
                           f"({workers} worker{'' if workers == 1 else 's'}). Look for a sample that blocks (a stuck read, a lock, a deadlock).")
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    head = lines[0] if lines else type(exc).__name__
    if len(lines) > 1:  # torch's first line names the worker, its last the worker's own error
        head = f"{head} {lines[-1]}"
    return LoaderFault(f"a DataLoader worker raised at step {step}: {head}\n{text}")


def make_loader(dataset: torch.utils.data.Dataset, *, workers: int, batch: int, pin: bool = False, prefetch_factor: int = 2,
                persistent: bool = False, timeout: float = 0.0, shuffle: bool = False) -> torch.utils.data.DataLoader:
    if workers < 0 or batch < 1:
        raise InputError(f"need workers ≥ 0 and batch ≥ 1, got workers={workers}, batch={batch}")
    kw = {}
    if workers > 0:
        kw = {"prefetch_factor": prefetch_factor, "persistent_workers": persistent, "timeout": timeout}
    pin = pin and torch.cuda.is_available()  # pinning without an accelerator only warns
    with warnings.catch_warnings():  # "more workers than cores": the lesson says so itself
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        return torch.utils.data.DataLoader(dataset, batch_size=batch, shuffle=shuffle, num_workers=workers,
                                           pin_memory=pin, **kw)


def run_epoch(loader, step: StepCompute, batches: int, *, non_blocking: bool = False, timeout: float = 0.0,
              workers: int = 0) -> LoopResult:
    """Consume `batches` batches from a fresh iterator of `loader`, timing each part of each step."""
    waits, steps, comps, copies = [], [], [], []
    t_start = time.perf_counter()
    with warnings.catch_warnings():  # "more workers than cores": the lesson says so itself
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        it = iter(loader)
    setup = time.perf_counter() - t_start
    i = 0
    fault: LoaderFault | None = None
    try:
        for i in range(batches):
            t0 = time.perf_counter()
            try:
                x, _ = next(it)
            except StopIteration:
                raise InputError(f"the dataset ran out after {i} batches; make it longer than {batches} batches") from None
            except (RuntimeError, ValueError, OSError) as exc:
                fault = _fault(exc, workers, timeout, i)
                break
            t1 = time.perf_counter()
            x = x.to(step.device, non_blocking=non_blocking)
            t2 = time.perf_counter()
            c = step(x)
            t3 = time.perf_counter()
            waits.append(t1 - t0 + (setup if i == 0 else 0.0))
            copies.append(t2 - t1)
            comps.append(c)
            steps.append(t3 - t0 + (setup if i == 0 else 0.0))
    finally:
        # stop the workers now: an iterator left to the garbage collector can be collected inside
        # the next loader's forked workers, which then print a confusing "can only test a child process"
        # (persistent workers belong to the loader and live on to the next epoch, unless this one failed)
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None and (fault is not None or not getattr(loader, "persistent_workers", False)):
            shutdown()
        del it
    if fault is not None:
        raise fault  # outside the except block: no chained exception keeps the old iterator alive
    wall = time.perf_counter() - t_start
    return LoopResult(workers, loader.batch_size or 1, waits, steps, comps, copies, wall, setup)


def measure_loop(*, workers: int, batch: int, batches: int, io_ms: float, transform_ms: float, step: StepCompute,
                 pin: bool = False, non_blocking: bool = False, prefetch_factor: int = 2, persistent: bool = False,
                 epochs: int = 1, timeout: float = 30.0, rounds: int | None = None, **faults) -> list[LoopResult]:
    """Measure `epochs` epochs of `batches` steps; one LoopResult per epoch.

    `rounds` (transform rounds per sample) comes from `dataset.calibrate_transform(transform_ms)`
    when not given; pass it to keep a sweep's points on one calibration.
    """
    from perflab.core.lock import device_lock
    from perflab.core.quietness import watch
    from perflab.dataloading.dataset import calibrate_transform

    if batches < 1:
        raise InputError(f"batches must be ≥ 1, got {batches}")
    r = calibrate_transform(transform_ms) if rounds is None else rounds
    ds = PipelineDataset(batch * batches, io_s=io_ms / 1e3, rounds=r, **faults)
    loader = make_loader(ds, workers=workers, batch=batch, pin=pin, prefetch_factor=prefetch_factor,
                         persistent=persistent, timeout=timeout if workers else 0.0)
    out = []
    # a measurement: its turn on the device, and what else ran meanwhile (the workers count as its own)
    with device_lock(step.device, label=f"DataLoader loop, {workers} workers") as waited:
        for _ in range(epochs):
            with watch(step.device) as w:
                res = run_epoch(loader, step, batches, non_blocking=non_blocking, timeout=timeout, workers=workers)
            res.extra.update(quietness=w.result.to_json(), waited_s=waited)
            out.append(res)
    kept = getattr(loader, "_iterator", None)  # persistent workers: stop them now
    if kept is not None and hasattr(kept, "_shutdown_workers"):
        kept._shutdown_workers()
    del loader
    return out


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def sweep_workers(workers_list, *, batch: int, batches: int, io_ms: float, transform_ms: float, step: StepCompute,
                  pin: bool = False, prefetch_factor: int = 2, timeout: float = 30.0, path=None,
                  overhead_s: float | None = None, inline_s: float | None = None, **faults):
    """Measure each worker count and put the model's prediction beside it; failures are recorded.

    Returns a `perflab.core.results.SweepResult` (written to `path`, or a temporary file when None,
    so a live re-measurement never reuses an old point). `overhead_s`, the handover cost of one
    batch from a worker to the loop, is measured here when None (`handover_s`) and given to the model;
    so is `inline_s`, the loader's own per-batch cost when the loop loads (W = 0, `inline_overhead_s`),
    right before each 0-worker point.
    """
    import tempfile
    from pathlib import Path

    from perflab.core.lock import device_lock
    from perflab.core.results import run_sweep
    from perflab.dataloading.dataset import calibrate_transform

    rounds = calibrate_transform(transform_ms)
    cores = available_cores()
    if overhead_s is None:
        overhead_s = handover_s(batch, step.device) if any(int(w) > 0 for w in workers_list) else 0.0
    on_cpu = step.device.type == "cpu"

    def one(p):
        # H0 is measured right before its point, under the same load as the point itself
        h0 = 0.0 if p["workers"] else (inline_s if inline_s is not None else
                                        inline_overhead_s(batch, step.device, io_ms / 1e3))
        res = measure_loop(workers=p["workers"], batch=batch, batches=batches, io_ms=io_ms, transform_ms=transform_ms,
                           step=step, pin=pin, prefetch_factor=prefetch_factor, timeout=timeout, rounds=rounds,
                           **faults)[0]
        pred = starvation.predict(batch, io_ms / 1e3, transform_ms / 1e3, statistics.median(res.compute_s),
                                  p["workers"], batches, prefetch_factor=prefetch_factor, cores=cores,
                                  compute_on_cpu=on_cpu, overhead_s=overhead_s, inline_s=h0)
        # the measured median leaves the first step out; so does the predicted one
        pw = statistics.median(starvation.simulate(pred.load_s, pred.compute_s, p["workers"], batches,
                                                   prefetch_factor=prefetch_factor, overhead_s=overhead_s,
                                                   inline_s=h0)[1:] or [pred.first_wait_s])
        return {**res.as_dict(), "predicted_wait_s": pw, "predicted_steady_wait_s": pred.steady_wait_s,
                "load_s": pred.load_s, "handover_s": overhead_s, "inline_s": h0}

    tmp = None
    if path is None:
        tmp = tempfile.mkdtemp(prefix="perflab-loader-")
        path = Path(tmp) / "sweep.jsonl"
    try:
        with device_lock(step.device, label="DataLoader sweep"):  # the whole sweep is one turn on the device
            res = run_sweep("dataloader_workers", [{"workers": int(w)} for w in workers_list], one, path=path,
                            progress=False)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return res


def handover_s(batch: int, device: torch.device, batches: int = 8) -> float:
    """Median time to hand one ready batch from a worker to the loop (queue, unpickling, collate), seconds.

    Measured with one worker, no IO, no transform and a step long enough that the batch is always
    ready: what `next()` still costs then is the handover.
    """
    from perflab.dataloading.compute import calibrate

    st = calibrate(3, device, budget_s=0.03)
    res = measure_loop(workers=1, batch=batch, batches=batches, io_ms=0, transform_ms=0, step=st, rounds=0)[0]
    return res.data_wait_s


def sleep_overshoot_s(io_s: float, n: int = 10) -> float:
    """How much longer than asked `time.sleep(io_s)` really takes here (median of `n`, seconds): the
    timer slack of the OS, paid once per sample."""
    if io_s <= 0:
        return 0.0
    extra = []
    for _ in range(n):
        t0 = time.perf_counter()
        time.sleep(io_s)
        extra.append(time.perf_counter() - t0 - io_s)
    return max(0.0, statistics.median(extra))


def inline_overhead_s(batch: int, device: torch.device, io_s: float = 0.0, batches: int = 6) -> float:
    """H₀, the loader's own cost per batch when the loop loads (0 workers), seconds: the median time
    of `next()` on a real 0-worker DataLoader over the dataset with no IO and no transform (the
    sampler, the dataset's fixed per-sample work, the collate), plus `batch` times the measured
    overshoot of a `time.sleep(io_s)`. `device` is where the batches would go; the handover itself
    happens on the host either way."""
    del device  # the loop's own cost is host work
    ds = PipelineDataset(batch * (batches + 1), io_s=0.0, rounds=0)
    it = iter(make_loader(ds, workers=0, batch=batch))
    next(it)  # the first batch warms the sampler and the allocator up
    times = []
    for _ in range(batches):
        t0 = time.perf_counter()
        next(it)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) + batch * sleep_overshoot_s(io_s, n=8)


class _ThreadProbe(torch.utils.data.Dataset):
    """Each sample is the number of intra-op threads torch computes with where the sample is made."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(torch.get_num_threads())


@dataclass(frozen=True)
class TransformThreads:
    """The intra-op threads a sample's transform runs on: in the loop's own process (num_workers=0),
    where the step's ops run on the same threads, and in a DataLoader worker."""

    main: int
    worker: int

    def text(self) -> str:
        return (f"a sample's transform ran on {self.main} intra-op thread{'s' if self.main != 1 else ''} with "
                f"num_workers=0 (the training loop's own process: the threads the step's ops use too) and on "
                f"{self.worker} in a DataLoader worker")


def transform_threads() -> TransformThreads:
    """Ask a sample where it is made how many threads torch computes with there (no timing involved)."""
    seen = []
    for workers in (0, 1):
        it = iter(make_loader(_ThreadProbe(), workers=workers, batch=1))
        try:
            seen.append(int(next(it)[0]))
        finally:
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            del it
    return TransformThreads(seen[0], seen[1])


def within_tolerance(measured_s: float, predicted_s: float, step_s: float, *, abs_s: float = 0.002,
                     share: float = 0.15) -> bool:
    """The lesson's stated tolerance: |measured − predicted| ≤ 2 ms + 15 % of the step."""
    return abs(measured_s - predicted_s) <= abs_s + share * step_s
