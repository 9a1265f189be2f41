"""A training step's utilization, measured (lesson 02): MFU/HFU of a real step, gradient
accumulation, and the garbage-collector straggler. The step itself is `perflab.workload.train`.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, to_json
from perflab.core.validate import positive_int
from perflab.workload.train import StepRunner, default_dtype, make_batches


@dataclass
class StepReport:
    """One configuration's training step on this device, measured, with its utilization."""

    model: str
    device: str
    device_name: str
    dtype: str
    batch: int
    seq: int
    grad_accum: int
    checkpointing: bool
    steps: int
    step_s: float  # median over the timed steps
    step_times_s: list[float]
    forward_s: float  # medians
    backward_s: float
    optimizer_s: float
    tokens_per_step: int
    tokens_per_s: float
    model_flops_per_step: int
    hardware_flops_per_step: int
    counted_flops_per_step: int | None  # perflab.flops.counting.count_flops on one real step (None: not checked)
    model_tflops: float  # achieved, model FLOPs
    hardware_tflops: float
    peak_tflops: float | None
    peak_source: str
    ceiling_tflops: float | None
    ceiling_label: str
    mfu_spec: float | None
    hfu_spec: float | None
    mfu_ceiling: float | None
    hfu_ceiling: float | None
    loss: float | None = None
    notes: list[str] = field(default_factory=list)
    suspect: str | None = None  # why an MFU/HFU is not shown: it came out above 100 % of its basis

    def as_dict(self) -> JSON:
        """Every field, for `perflab mfu --measure --json`."""
        return to_json(self)

    def row(self) -> JSON:
        """`as_dict` without the per-step times and the notes: one row of a table of steps."""
        d = self.as_dict()
        d.pop("step_times_s")
        d.pop("notes")
        return d

    def __str__(self) -> str:
        def pct(x):
            return "n/a" if x is None else f"{x:.1%}"

        return (f"{self.model} b={self.batch} s={self.seq} GAS={self.grad_accum} {'checkpointing' if self.checkpointing else 'no checkpointing'} "
                f"on {self.device_name} ({self.dtype}): {self.step_s * 1e3:.1f} ms/step, {self.tokens_per_s:,.0f} tokens/s, "
                f"{self.model_tflops:.3g} model TFLOP/s · MFU {pct(self.mfu_spec)} / HFU {pct(self.hfu_spec)} of the "
                f"{'estimated' if self.peak_source == 'estimate' else 'spec'} peak, "
                f"MFU {pct(self.mfu_ceiling)} / HFU {pct(self.hfu_ceiling)} of the measured ceiling"
                + (f" ({self.ceiling_label})" if self.ceiling_tflops else "")
                + (f"; n/a where {self.suspect}" if self.suspect else ""))


def steps_frame(reports: Sequence[StepReport], labels: Sequence[str]):
    """Measured steps side by side, for a person: time, throughput, FLOP rate and utilization against
    the peak and the measured ceiling, with units in the column names and the digits the measurement
    supports (the peak and the ceiling themselves are named where they are printed)."""
    import pandas as pd

    from perflab.core.readout import num, percent

    rows = [{"step (ms)": num(r.step_s * 1e3), "tokens/s": num(r.tokens_per_s),
             "model TFLOP/s": num(r.model_tflops), "MFU, peak": percent(r.mfu_spec), "HFU, peak": percent(r.hfu_spec),
             "MFU, ceiling": percent(r.mfu_ceiling), "HFU, ceiling": percent(r.hfu_ceiling)} for r in reports]
    return pd.DataFrame(rows, index=list(labels))


def measure_step(cfg, *, batch: int = 8, seq: int | None = None, steps: int = 5, warmup: int = 2,
                 checkpointing: bool = False, grad_accum: int = 1, device=None, dtype: str | None = None,
                 ceiling: bool | float = True, ceiling_size: int | None = None, verify: bool = True,
                 hooks: dict[str, Sequence[Callable]] | None = None, seed: int = 0) -> StepReport:
    """Build `cfg`'s model, time `steps` optimizer steps (after `warmup`), and report utilization.

    dtype: 'bf16' (autocast; the GPU default) or 'fp32' (the CPU default).
    ceiling: True to look up (or measure) the device's matmul ceiling by the one rule every MFU shares
      (`perflab.flops.basis.measured_basis`; at ceiling_size³ when given), False to skip it, or a number
      in TFLOP/s to use as is. An MFU or HFU above 100 % of its basis is not reported (`suspect`).
    verify: count the first warm-up step's FLOPs with `perflab.flops.counting.count_flops` and check they
      equal the exact count (they must; a mismatch raises).
    """
    from perflab.core.device import describe, pick_device
    from perflab.core.dtypes import check_supported
    from perflab.core.hardware import peaks_for
    from perflab.flops.basis import Basis, measured_basis, spec_basis
    from perflab.flops.counter import count_flops
    from perflab.flops.mfu import utilization
    from perflab.flops.transformer import exact_flops, exact_for_counted
    from perflab.workload.models import build_model

    dev = torch.device(device) if device is not None else pick_device()
    seq = seq if seq is not None else cfg.seq_len
    steps, warmup = positive_int("steps", steps), max(int(warmup), 1 if verify else 0)
    dt = check_supported(dtype or default_dtype(dev), dev)
    if dt.name not in ("fp32", "bf16", "fp16"):
        raise InputError(f"training steps run in fp32, bf16 or fp16, not {dt.name}")
    model = build_model(cfg, device=dev, seed=seed)
    model.checkpointing = bool(checkpointing)
    runner = StepRunner(model, grad_accum=grad_accum, autocast_dtype=None if dt.name == "fp32" else dt.torch_dtype,
                        hooks=hooks, device=dev)
    # fresh random tokens for every micro-batch of every step, as a data loader gives: cycling a few
    # batches would let the model memorise them and its loss fall below the ln V an honest step shows
    batches = make_batches(cfg, batch, seq, n=runner.grad_accum * (steps + warmup + 1), device=dev, seed=seed)
    ex = exact_flops(cfg, batch, seq, checkpointing=checkpointing)
    counted = None
    notes: list[str] = []
    if verify:
        mb = [batches[j % len(batches)] for j in range(runner.grad_accum)]
        c = count_flops(runner.step, mb)
        counted = c.total
        ex = exact_for_counted(cfg, batch, seq, counted, checkpointing=checkpointing, steps=runner.grad_accum)
        if not ex.fused_attention:
            notes.append("attention ran an unfused kernel here (no recomputed scores in its backward)")
        warmup -= 1
    times = runner.run(batches, steps, warmup=warmup)
    step_s = statistics.median(t.step_s for t in times)
    tokens = batch * seq * runner.grad_accum
    model_flops, hw_flops = ex.model * runner.grad_accum, ex.hardware * runner.grad_accum
    info = describe(dev)
    peaks = peaks_for(info)
    peak = peaks.get(dt.name)
    if ceiling is True:  # the one rule every MFU shares (perflab.flops.mfu), at the step's size when asked
        ceil = measured_basis(dev, dt.name, (ceiling_size, ceiling_size, ceiling_size) if ceiling_size else None)
    elif ceiling:
        ceil = Basis(float(ceiling), "given peak", dt.name, "measured ceiling (given)")
    else:
        ceil = None
    flops, hw = {dt.name: model_flops}, {dt.name: hw_flops}
    kind = "spec peak" if peaks.source == "spec sheet" else "estimated peak"
    us = utilization(step_s, flops, {dt.name: spec_basis(peak, dt.name, peaks.source, kind)}, hw) if peak else None
    uc = utilization(step_s, flops, {dt.name: ceil}, hw) if ceil is not None and ceil.tflops else None
    ceil_t, ceil_label = (ceil.tflops, ceil.label()) if ceil is not None else (None, "not measured")
    suspect = "; ".join(u.suspect for u in (us, uc) if u is not None and u.suspect) or None
    mt, ht = model_flops / step_s / 1e12, hw_flops / step_s / 1e12
    return StepReport(
        model=cfg.name, device=str(dev), device_name=info.name, dtype=dt.name, batch=batch, seq=seq,
        grad_accum=runner.grad_accum, checkpointing=bool(checkpointing), steps=steps, step_s=step_s,
        step_times_s=[t.step_s for t in times], forward_s=statistics.median(t.forward_s for t in times),
        backward_s=statistics.median(t.backward_s for t in times), optimizer_s=statistics.median(t.optimizer_s for t in times),
        tokens_per_step=tokens, tokens_per_s=tokens / step_s, model_flops_per_step=model_flops,
        hardware_flops_per_step=hw_flops, counted_flops_per_step=counted, model_tflops=mt, hardware_tflops=ht,
        peak_tflops=peak, peak_source=peaks.source if peak else "unknown", ceiling_tflops=ceil_t, ceiling_label=ceil_label,
        mfu_spec=us.mfu if us else None, hfu_spec=us.hfu if us else None,
        mfu_ceiling=uc.mfu if uc else None, hfu_ceiling=uc.hfu if uc else None,
        loss=runner.last_loss, notes=notes, suspect=suspect)


def checkpointing_comparison(cfg, **kw) -> tuple[StepReport, StepReport]:
    """The same step without and with activation checkpointing (measured alternately is not needed:
    each report is a median over its own steps)."""
    return measure_step(cfg, checkpointing=False, **kw), measure_step(cfg, checkpointing=True, **kw)


def grad_accum_sweep(cfg, gas_values: Sequence[int], *, batch: int = 4, seq: int | None = None, steps: int = 3,
                     device=None, name: str = "02_grad_accum", progress: bool = False, **kw):
    """Throughput against gradient-accumulation steps at a fixed micro-batch; one sweep point per
    GAS value, written as it is measured (`perflab.core.results.run_sweep`). Returns the SweepResult."""
    from perflab.core.device import describe, pick_device
    from perflab.core.results import run_sweep

    dev = torch.device(device) if device is not None else pick_device()
    s = seq if seq is not None else cfg.seq_len

    opts: dict[str, Any] = {"warmup": 1, **kw}

    def one(p):
        r = measure_step(cfg, batch=p["batch"], seq=p["seq"], steps=p["steps"], grad_accum=p["gas"], device=dev,
                         verify=False, **opts)
        return {"tokens_per_s": r.tokens_per_s, "step_s": r.step_s, "optimizer_s": r.optimizer_s,
                "forward_s": r.forward_s, "backward_s": r.backward_s, "mfu_spec": r.mfu_spec, "mfu_ceiling": r.mfu_ceiling,
                "tokens_per_step": r.tokens_per_step}

    points = [{"model": cfg.name, "batch": batch, "seq": s, "steps": steps, "gas": positive_int("GAS", g)} for g in gas_values]
    return run_sweep(name, points, one, device_slug=describe(dev).slug, progress=progress)


# ---------------------------------------------------------------- Python's garbage collector as a straggler


class PythonGarbage:
    """Python objects of the kind a data pipeline and a logger make, for the GC lesson.

    heap: long-lived objects (a tokenized-dataset index held as dicts and lists) that every *full*
      collection must walk. per_step: records created each step in reference cycles (a record that
      points at its batch and back), freed only by the cyclic collector. keep: how many of them
      each step survive in a log that is never cleared (they age into the oldest generation and
      eventually trigger a full collection); by default sized from the number of objects this
      process already tracks so that a full collection comes about every `full_every` steps.
    """

    def __init__(self, heap: int = 20_000, per_step: int | None = None, keep: int | None = None, full_every: int = 8):
        self.heap = [{"doc": i, "tokens": [i, i + 1]} for i in range(int(heap))]
        if keep is None:
            # Python (3.8-3.13) runs a full collection once the objects that survived younger
            # collections exceed 25% of the long-lived ones; size the log so that happens about
            # every `full_every` steps in this process, whatever else it holds.
            tracked = len(gc.get_objects())
            keep = max(100, int(0.25 * tracked / (2 * max(1, full_every))))
        self.keep = int(keep)
        self.per_step = int(per_step) if per_step is not None else self.keep + 1000
        self.log: list[dict] = []

    def __call__(self, runner=None, step: int = 0) -> None:
        for i in range(self.per_step):
            rec: dict[str, Any] = {"step": step, "i": i}
            rec["batch"] = {"owner": rec}  # a reference cycle
            if i < self.keep:
                self.log.append(rec)


@dataclass
class GCSeries:
    mode: str  # 'gc enabled' or 'gc disabled, collect every N'
    step_s: list[float]
    collections: list[tuple[int, int, float]]  # (step index, generation, seconds) of each collection seen

    @property
    def median_s(self) -> float:
        return statistics.median(self.step_s)

    @property
    def worst_s(self) -> float:
        return max(self.step_s)


def gc_straggler_series(cfg, *, steps: int = 40, batch: int = 2, seq: int = 32, collect_every: int = 20,
                        garbage: PythonGarbage | None = None, device=None, seed: int = 0) -> tuple[GCSeries, GCSeries]:
    """Step-time series of the same tiny training step while `garbage` makes Python objects each
    step: once with Python's automatic GC on, once with `gc.disable()` and an explicit
    `gc.collect()` every `collect_every` steps (the handbook's remedy: every rank then collects at
    the same step instead of whenever its own allocation counters say so).

    Every collection is recorded through `gc.callbacks` with its generation and duration. The GC's
    previous state is restored afterwards, whatever happens.
    """
    from perflab.core.device import pick_device
    from perflab.workload.models import build_model

    dev = torch.device(device) if device is not None else pick_device()
    garbage = garbage or PythonGarbage()
    steps = positive_int("steps", steps)
    collect_every = positive_int("collect_every", collect_every)
    batches = make_batches(cfg, batch, seq, n=2, device=dev, seed=seed)
    was_enabled = gc.isenabled()
    events: list[list[Any]] = []
    current = {"step": -1}

    def on_gc(phase, info):
        if phase == "start":
            events.append([current["step"], info["generation"], time.perf_counter()])
        elif events and len(events[-1]) == 3:
            events[-1][2] = time.perf_counter() - events[-1][2]
            events[-1].append(True)

    def series(enabled: bool) -> GCSeries:
        model = build_model(cfg, device=dev, seed=seed)
        hooks: dict[str, Sequence[Callable]] = {"before_step": [garbage]}
        if not enabled:
            def scheduled(runner, i):
                if (i + 1) % collect_every == 0:
                    gc.collect()
            hooks["after_step"] = [scheduled]
        runner = StepRunner(model, hooks=hooks, device=dev)
        runner.run(batches, 2, warmup=0)  # warm up the model before timing
        gc.collect()
        events.clear()
        (gc.enable if enabled else gc.disable)()
        out = []
        for i in range(steps):
            current["step"] = i
            runner.steps_done = i
            out.append(runner.step([batches[i % 2]]).step_s)
        cols = [(int(s), int(g), float(d)) for s, g, d, *_ in events if s >= 0]
        mode = "gc enabled (automatic)" if enabled else f"gc.disable() + gc.collect() every {collect_every} steps"
        return GCSeries(mode, out, cols)

    gc.callbacks.append(on_gc)
    try:
        on = series(True)
        garbage.log.clear()  # the second run starts from the same heap as the first
        off = series(False)
    finally:
        gc.callbacks.remove(on_gc)
        (gc.enable if was_enabled else gc.disable)()
        garbage.log.clear()
    return on, off


def predicted_step_s(cfg, batch: int, seq: int, checkpointing: bool, device, dtype: str) -> tuple[float, float, int]:
    """A lower bound on one training step's seconds: its hardware FLOPs (exact count) at the rate a
    matmul reaches here (`core.measure.predicted_tflops`). Returns (seconds, TFLOP/s, FLOPs).
    The panels of lessons 02 and 03 use it to refuse a setting a slider cannot measure quickly."""
    from perflab.core.device import describe
    from perflab.core.hardware import peaks_for
    from perflab.core.measure import predicted_tflops
    from perflab.flops.transformer import exact_flops

    flops = exact_flops(cfg, batch, seq, checkpointing=checkpointing).hardware
    rate = predicted_tflops(dtype, device, peaks_for(describe(device)).get(dtype))
    return flops / (rate * 1e12), rate, flops
