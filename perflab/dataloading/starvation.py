"""When does the training loop wait for data? A model from load time, compute time, workers, prefetch.

Terms (seconds):
- L, the time one worker needs to produce one batch: batch × (IO latency + transform time per sample);
- C, the step's compute time; S, the time to start the worker processes (fork, import, first batch
  request), paid at the start of every epoch unless `persistent_workers=True`;
- W workers, each holding up to `prefetch_factor` batches ahead (W × prefetch_factor in flight).

Steady state. With W = 0 the main process loads every batch itself: the wait is L + H₀ per step
and the step is L + H₀ + C, where H₀ is the loader's own per-batch cost in the loop's process (the
dataset's fixed per-sample work, the collate, the sleep's overshoot of the asked IO latency),
measured from a real 0-worker handover by `loader.inline_overhead_s` — without it, 0-worker
predictions come out a few milliseconds short of every measurement. With W ≥ 1 the workers
together deliver W batches every L seconds, so the loop waits max(0, L/W − C) per step: enough
workers hide loading entirely once L/W ≤ C. (Stas Bekman, *Machine Learning Engineering*, chapter
"Software Tune Up For The Best Performance", section DataLoader, github.com/stas00/ml-engineering,
training/performance/: 2 workers are usually enough unless the DataLoader is very slow; the model
says when: with W = 2, once L ≤ 2C.)

Warm-up. The first batch of an epoch waits S + L whatever W is; the prefetch queue then absorbs
up to W × prefetch_factor batches of jitter. `simulate` plays the schedule step by step (issue,
produce, consume) so the prediction covers warm-up and steady state alike.

Cores. Transform work needs a core; IO latency does not. With W workers and the step's compute on
the same c CPU cores, the transform part runs about max(1, (W + 1)/c) times slower (`cpu_stretch`).
That is a rough model of time-sharing, not of caches or of torch's threads.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from perflab.core.errors import InputError


def batch_load_s(batch: int, io_s: float, transform_s: float, stretch: float = 1.0) -> float:
    """L: one worker's time to produce one batch of `batch` samples (seconds)."""
    if batch < 1 or io_s < 0 or transform_s < 0:
        raise InputError("batch must be ≥ 1 and per-sample times ≥ 0")
    return batch * (io_s + transform_s * stretch)


def cpu_stretch(workers: int, cores: int, compute_on_cpu: bool) -> float:
    """How much slower CPU transform work runs when W workers (and a CPU step) share `cores` cores."""
    busy = max(workers, 1) + (1 if compute_on_cpu and workers > 0 else 0)
    return max(1.0, busy / max(cores, 1))


def steady_wait_s(load_s: float, compute_s: float, workers: int, inline_s: float = 0.0) -> float:
    """Data wait per step once the pipeline is full: L + H₀ for W = 0, else max(0, L/W − C)."""
    if workers < 0:
        raise InputError(f"workers must be ≥ 0, got {workers}")
    if workers == 0:
        return load_s + inline_s
    return max(0.0, load_s / workers - compute_s)


def simulate(load_s: float, compute_s: float, workers: int, batches: int, *, prefetch_factor: int = 2,
             startup_s: float = 0.0, overhead_s: float = 0.0, inline_s: float = 0.0) -> list[float]:
    """Data wait of each of `batches` steps, by playing the DataLoader's schedule.

    Batch i goes to worker i mod W; the loader keeps W × prefetch_factor batches requested, and
    requests batch i + W·prefetch_factor when batch i is handed to the loop. A worker produces its
    batches one after another, each taking L. `overhead_s` is a per-batch handover cost (pickling
    through a queue), added to every wait when W ≥ 1; `inline_s` (H₀) is the per-batch cost of
    loading in the loop's own process beyond L, added to every wait when W = 0.
    """
    if batches < 1:
        raise InputError(f"batches must be ≥ 1, got {batches}")
    if inline_s < 0 or overhead_s < 0:
        raise InputError("per-batch overheads must be ≥ 0 seconds")
    if workers == 0:
        return [load_s + inline_s] * batches
    depth = workers * max(prefetch_factor, 1)
    issued = [startup_s] * min(depth, batches) + [0.0] * max(0, batches - depth)
    free = [startup_s] * workers
    t, waits = 0.0, []
    for i in range(batches):
        w = i % workers
        done = max(free[w], issued[i]) + load_s
        free[w] = done
        start = max(t, done) + overhead_s
        waits.append(start - t)
        if i + depth < batches:
            issued[i + depth] = start
        t = start + compute_s
    return waits


@dataclass
class Prediction:
    workers: int
    load_s: float
    compute_s: float
    steady_wait_s: float
    first_wait_s: float
    median_wait_s: float
    step_s: float

    @property
    def wait_fraction(self) -> float:
        return self.median_wait_s / self.step_s if self.step_s else 0.0


def predict(batch: int, io_s: float, transform_s: float, compute_s: float, workers: int, batches: int, *,
            prefetch_factor: int = 2, startup_s: float = 0.0, cores: int = 1, compute_on_cpu: bool = True,
            overhead_s: float = 0.0, inline_s: float = 0.0) -> Prediction:
    """The model's data wait for one setting: steady state, first step, and the median over `batches`."""
    stretch = cpu_stretch(workers, cores, compute_on_cpu)
    L = batch_load_s(batch, io_s, transform_s, stretch)
    waits = simulate(L, compute_s, workers, batches, prefetch_factor=prefetch_factor, startup_s=startup_s,
                     overhead_s=overhead_s, inline_s=inline_s)
    med = statistics.median(waits)
    return Prediction(workers, L, compute_s, steady_wait_s(L, compute_s, workers, inline_s), waits[0], med,
                      compute_s + med)


@dataclass(frozen=True)
class Predictions:
    """The model's prediction for each worker count of one setting (lesson 07, section 2)."""

    rows: tuple[Prediction, ...]

    def table(self):
        """One row per worker count: L, the steady wait and the step, in ms."""
        import pandas as pd

        from perflab.core.readout import num

        def ms(x: float) -> str:
            return f"{num(round(x * 1e3, 9), 3)} ms"  # rounded first: 8 ms + 2 ms reads 10.0, not 10.00

        return pd.DataFrame([{"workers": p.workers, "L (one batch)": ms(p.load_s), "steady wait": ms(p.steady_wait_s),
                              "step": ms(p.step_s)} for p in self.rows]).set_index("workers")


def predictions(batch: int, io_s: float, transform_s: float, compute_s: float, worker_counts, batches: int, *,
                cores: int = 1, compute_on_cpu: bool = True) -> Predictions:
    """`predict` for each worker count in `worker_counts`."""
    return Predictions(tuple(predict(batch, io_s, transform_s, compute_s, w, batches, cores=cores,
                                     compute_on_cpu=compute_on_cpu) for w in worker_counts))


@dataclass
class Recommendation:
    workers: int | None
    reason: str


def recommend(batch: int, io_s: float, transform_s: float, compute_s: float, *, max_share: float = 0.05,
              cores: int = 2, compute_on_cpu: bool = True, max_workers: int = 16) -> Recommendation:
    """The fewest workers whose steady data wait is at most `max_share` of the step, with the reason.

    Says plainly when the cores, not the number of workers, are the limit: when more workers than
    free cores would be needed, or no worker count helps because transform work saturates the CPU.
    """
    if not 0 < max_share < 1:
        raise InputError(f"max_share must be between 0 and 1, got {max_share}")
    free_cores = max(1, cores - (1 if compute_on_cpu else 0))
    for w in range(0, max_workers + 1):
        L = batch_load_s(batch, io_s, transform_s, cpu_stretch(w, cores, compute_on_cpu))
        wait = steady_wait_s(L, compute_s, w)
        if wait <= max_share * (compute_s + wait):
            why = (f"{w} worker(s): a batch takes L = {L * 1e3:.1f} ms to load, the step computes "
                   f"C = {compute_s * 1e3:.1f} ms; " + ("loading inside the step costs nothing here"
                                                        if w == 0 else f"L/W = {L / w * 1e3:.1f} ms ≤ C, so loading hides behind compute"))
            if w > free_cores and transform_s > 0:
                why += (f". That is more workers than the {free_cores} core(s) left beside the step: the transforms "
                        f"share cores, so measure; the cores, not the workers, are the limit")
            return Recommendation(w, why)
    cpu_need = batch * transform_s / max(compute_s, 1e-12)
    return Recommendation(None, f"no worker count up to {max_workers} keeps the wait under {max_share:.0%}: the transforms "
                                f"need {cpu_need:.1f} core-steps of CPU per step and only {free_cores} core(s) are free. "
                                f"The cores, not the workers, are the limit: make transforms cheaper, do them offline or on "
                                f"the device, or use a machine with more cores")
