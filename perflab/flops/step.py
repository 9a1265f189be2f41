"""A training step's utilization, measured (lesson 02): MFU/HFU of a real step, gradient
accumulation, and the garbage-collector straggler. The step itself is `perflab.workload.train`.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, to_json
from perflab.core.quietness import Quietness
from perflab.core.validate import positive_int
from perflab.workload.train import StepRunner, default_dtype, make_batches

if TYPE_CHECKING:  # pragma: no cover
    from perflab.flops.basis import Basis


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
    quietness: Quietness | None = None  # the machine while the timed steps ran
    ceiling_verdict: str | None = None  # why no MFU/HFU against the ceiling: it was measured on a busy machine

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

        ceiling = (f"MFU and HFU against the measured ceiling {self.ceiling_verdict}" if self.ceiling_verdict else
                   f"MFU {pct(self.mfu_ceiling)} / HFU {pct(self.hfu_ceiling)} of the measured ceiling"
                   + (f" ({self.ceiling_label})" if self.ceiling_tflops else ""))
        return (f"{self.model} b={self.batch} s={self.seq} GAS={self.grad_accum} {'checkpointing' if self.checkpointing else 'no checkpointing'} "
                f"on {self.device_name} ({self.dtype}): {self.step_s * 1e3:.1f} ms/step, {self.tokens_per_s:,.0f} tokens/s, "
                f"{self.model_tflops:.3g} model TFLOP/s · MFU {pct(self.mfu_spec)} / HFU {pct(self.hfu_spec)} of the "
                f"{'estimated' if self.peak_source == 'estimate' else 'spec'} peak, " + ceiling
                + (f"; n/a where {self.suspect}" if self.suspect else "")
                + (f" [{self.quietness.line()}]" if self.quietness is not None else ""))

    @property
    def disturbed(self) -> bool:
        """Other programs used the device while the timed steps ran: no verdict from these figures."""
        return self.quietness is not None and self.quietness.disturbed


def steps_frame(reports: Sequence[StepReport], labels: Sequence[str]):
    """Measured steps side by side, for a person: time, throughput, FLOP rate and utilization against
    the peak and the measured ceiling, with units in the column names and the digits the measurement
    supports (the peak and the ceiling themselves are named where they are printed)."""
    import pandas as pd

    from perflab.core.readout import MACHINE, machine, num, percent

    def ceiling(r, v):
        return "inconclusive (busy)" if r.ceiling_verdict else percent(v)

    rows = [{"step (ms)": num(r.step_s * 1e3), "tokens/s": num(r.tokens_per_s),
             "model TFLOP/s": num(r.model_tflops), "MFU, peak": percent(r.mfu_spec), "HFU, peak": percent(r.hfu_spec),
             "MFU, ceiling": ceiling(r, r.mfu_ceiling), "HFU, ceiling": ceiling(r, r.hfu_ceiling),
             MACHINE: machine(r.quietness)} for r in reports]
    return pd.DataFrame(rows, index=list(labels))


def measure_step(cfg, *, batch: int = 8, seq: int | None = None, steps: int = 5, warmup: int = 2,
                 checkpointing: bool = False, grad_accum: int = 1, device=None, dtype: str | None = None,
                 ceiling: bool | float = True, ceiling_size: int | None = None, verify: bool = True,
                 hooks: dict[str, Sequence[Callable]] | None = None, seed: int = 0) -> StepReport:
    """Build `cfg`'s model, time `steps` optimizer steps (after `warmup`), and report utilization.

    dtype: 'bf16' (autocast; the GPU default) or 'fp32' (the CPU default).
    ceiling: True to look up (or measure) the device's matmul ceiling by the one rule every MFU shares
      (`perflab.flops.basis.measured_basis`; at ceiling_size³ when given), a `Basis` already measured (so that
      every step of a run divides by the same one: `lesson_basis`), False to skip it, or a number in TFLOP/s to
      use as is. An MFU or HFU above 100 % of its basis is not reported (`suspect`); nor is one against a
      ceiling measured on a busy machine and not stored (`ceiling_verdict` says so: `ceiling_inconclusive`).
    verify: count the first warm-up step's FLOPs with `perflab.flops.counting.count_flops` and check they
      equal the exact count (they must; a mismatch raises).
    """
    from perflab.core.device import describe, pick_device
    from perflab.core.dtypes import check_supported
    from perflab.core.hardware import peaks_for
    from perflab.flops.basis import Basis, measured_basis, spec_basis  # noqa: F811  (the type, at run time)
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
    elif isinstance(ceiling, Basis):
        ceil = ceiling
    elif ceiling:
        ceil = Basis(float(ceiling), "given peak", dt.name, "measured ceiling (given)")
    else:
        ceil = None
    busy_ceiling = ceiling_inconclusive(ceil)
    flops, hw = {dt.name: model_flops}, {dt.name: hw_flops}
    kind = "spec peak" if peaks.source == "spec sheet" else "estimated peak"
    us = utilization(step_s, flops, {dt.name: spec_basis(peak, dt.name, peaks.source, kind)}, hw) if peak else None
    uc = utilization(step_s, flops, {dt.name: ceil}, hw) if ceil is not None and ceil.tflops and not busy_ceiling \
        else None
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
        loss=runner.last_loss, notes=notes, suspect=suspect, quietness=runner.last_quietness,
        ceiling_verdict=busy_ceiling)


def ceiling_inconclusive(basis: Basis | None) -> str | None:
    """'inconclusive: the machine was busy (…)' for a ceiling measured while other programs used the device and
    so not stored: a figure against it says nothing. None for a stored ceiling, a spec peak or a given one."""
    from perflab.core.verdicts import busy_text

    if basis is None or basis.stored or basis.quietness is None or not basis.quietness.disturbed:
        return None
    return busy_text(f"while its ceiling was measured: {basis.quietness.cause}")


def lesson_basis(device=None, dtype: str | None = None, size: int | None = None) -> Basis:
    """The measured ceiling a run's MFUs are divided by (`perflab.flops.basis.measured_basis`: the stored one, or
    measured now), taken once, so that every step of the run divides by the same figure. `dtype` defaults to the
    dtype a training step runs in on `device`; `size` measures the matmul at size³ instead of the one shape."""
    from perflab.core.device import pick_device
    from perflab.flops.basis import measured_basis

    dev = torch.device(device) if device is not None else pick_device()
    return measured_basis(dev, dtype or default_dtype(dev), (size, size, size) if size else None)


@dataclass
class StepPair:
    """The same step measured without and with activation checkpointing, against one basis (lesson 02, section 4).
    Unpacks as (plain, ckpt)."""

    plain: StepReport
    ckpt: StepReport
    basis: Basis | None  # the measured ceiling both were divided by (None: none asked)

    def __iter__(self):
        return iter((self.plain, self.ckpt))

    def headline(self) -> float | None:
        """The plain step's MFU against the spec (or estimated) peak, in %, or None when there is no figure to
        judge a prediction by: no peak is known, or the machine was busy while the step ran."""
        if self.plain.mfu_spec is None or self.plain.disturbed:
            return None
        return float(100 * self.plain.mfu_spec)

    def text(self, peak: str = "") -> str:
        """Both steps in one line each, then the two denominators (`peak`: the peak as `Peaks.describe` names it)
        and, where the figures judge nothing, why."""
        from perflab.core.readout import num
        from perflab.core.verdicts import busy_text

        lines = [str(self.plain), str(self.ckpt), ""]
        if peak:
            lines.append(f"spec/estimated peak: {peak}")
        r = self.plain
        lines.append(f"ceiling: {r.ceiling_label}: {num(r.ceiling_tflops)} TFLOP/s" if r.ceiling_tflops else
                     f"ceiling: {r.ceiling_label}")
        if r.ceiling_verdict:
            lines.append(f"MFU against this ceiling: {r.ceiling_verdict}")
        if r.mfu_spec is None:
            lines.append("No peak is known for this device, so the step has no MFU against it to compare your "
                         "prediction with.")
        elif r.disturbed and r.quietness is not None:
            lines.append(f"MFU of the step against the peak, as a prediction's answer: {busy_text(r.quietness.cause)}")
        return "\n".join(lines)

    def table(self):
        return steps_frame([self.plain, self.ckpt], ["no checkpointing", "checkpointing"])

    def phases_text(self, exact) -> str:
        """The backward's FLOPs (`exact`: the step's `perflab.flops.transformer.exact_flops`) and time against the
        forward's, and what checkpointing changed, with the machine's quietness where it was not quiet."""
        p, c = self.plain, self.ckpt
        return (f"backward/forward FLOPs: {exact.backward_total / exact.forward_total:.2f}; measured time ratio "
                f"{p.backward_s / p.forward_s:.2f} (no checkpointing), {c.backward_s / c.forward_s:.2f} (checkpointing)\n"
                f"checkpointing: throughput {c.tokens_per_s / p.tokens_per_s - 1:+.0%}, "
                f"hardware FLOPs {c.hardware_flops_per_step / p.hardware_flops_per_step - 1:+.0%}, "
                f"backward time {c.backward_s / p.backward_s - 1:+.0%}"
                + "".join(f"\n{label}: {r.quietness.line()}" for label, r in (("no checkpointing", p),
                                                                             ("checkpointing", c))
                          if r.quietness is not None and not r.quietness.quiet))

    def summary(self, gc: GCComparison | None = None):
        """What the lesson measured, one quantity a row."""
        import pandas as pd

        from perflab.core.readout import machine, num, percent

        p, c = self.plain, self.ckpt
        none = "n/a: no peak is known for this device"
        rows = [("throughput, no checkpointing", f"{num(p.tokens_per_s)} tokens/s"),
                ("throughput, checkpointing", f"{num(c.tokens_per_s)} tokens/s"),
                ("MFU vs spec/estimated peak", percent(p.mfu_spec) if p.mfu_spec is not None else none),
                ("MFU vs measured ceiling", p.ceiling_verdict or percent(p.mfu_ceiling)),
                ("HFU vs spec/estimated peak (checkpointing)", percent(c.hfu_spec) if c.hfu_spec is not None else none),
                ("backward time ÷ forward time", f"{num(p.backward_s / p.forward_s)}×"),
                ("machine while the steps ran", "; ".join(dict.fromkeys(machine(r.quietness) for r in self)))]
        if gc is not None:
            rows.append(("worst step with gc on ÷ median step", f"{num(gc.on.worst_s / gc.on.median_s)}×"))
        return pd.DataFrame([{"quantity": q, "value": v} for q, v in rows])


def checkpointing_comparison(cfg, *, ceiling: bool | float | Basis = True, ceiling_size: int | None = None,
                             device=None, dtype: str | None = None, **kw) -> StepPair:
    """The same step without and with activation checkpointing (measured alternately is not needed: each report
    is a median over its own steps), both against one basis: with `ceiling=True` it is taken once
    (`lesson_basis`) before either step runs. Unpacks as (plain, ckpt)."""
    from perflab.core.device import pick_device

    dev = torch.device(device) if device is not None else pick_device()
    basis = lesson_basis(dev, dtype, ceiling_size) if ceiling is True else ceiling
    opts = {"device": dev, "dtype": dtype, "ceiling": basis if basis is not None else False, **kw}
    return StepPair(measure_step(cfg, checkpointing=False, **opts), measure_step(cfg, checkpointing=True, **opts),
                    basis if not isinstance(basis, (bool, float, int)) else None)


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
                "tokens_per_step": r.tokens_per_step, "ceiling_verdict": r.ceiling_verdict,
                "quietness": r.quietness.to_json() if r.quietness is not None else None}

    points = [{"model": cfg.name, "batch": batch, "seq": s, "steps": steps, "gas": positive_int("GAS", g)} for g in gas_values]
    return run_sweep(name, points, one, device_slug=describe(dev).slug, progress=progress)


def grad_accum_prediction(df) -> list[float]:
    """Tokens/s predicted from the GAS = 1 point if accumulation saved only optimizer time:
    per micro-batch (step − optimizer) + optimizer / GAS."""
    first = df.sort_values("gas").iloc[0]
    micro_tokens = first["tokens_per_step"] / first["gas"]
    micro = (first["step_s"] - first["optimizer_s"]) / first["gas"]
    return [micro_tokens / (micro + first["optimizer_s"] / g) for g in df["gas"]]


@dataclass
class GradAccum:
    """Throughput against gradient-accumulation steps (`grad_accum_sweep`), beside what amortizing the optimizer
    alone predicts."""

    sweep: Any  # perflab.core.results.SweepResult

    def summary(self) -> str:
        return self.sweep.summary()

    @property
    def frame(self):
        """The measured points by GAS, with `predicted_tokens_per_s` (`grad_accum_prediction`)."""
        df = self.sweep.ok_frame().sort_values("gas")
        return df.assign(predicted_tokens_per_s=grad_accum_prediction(df)) if len(df) else df

    def table(self):
        """One row per GAS: tokens per step, measured and predicted tokens/s, the step and the optimizer's part
        of it, the MFU against the spec (or estimated) peak, and the machine while it was measured. (A point read
        back from an earlier run keeps that run's figures: against the peak they stay comparable, against a
        ceiling measured then they would not.)"""
        import pandas as pd

        from perflab.core.quietness import as_quietness
        from perflab.core.readout import MACHINE, machine, num, percent, seconds

        return pd.DataFrame([{"GAS": int(r["gas"]), "tokens per step": f"{int(r['tokens_per_step']):,}",
                              "tokens/s": num(r["tokens_per_s"]), "predicted tokens/s": num(r["predicted_tokens_per_s"]),
                              "step": seconds(r["step_s"]), "optimizer": seconds(r["optimizer_s"]),
                              "MFU, peak": percent(r.get("mfu_spec")), MACHINE: machine(as_quietness(r.get("quietness")))}
                             for r in self.frame.to_dict("records")])


def grad_accum(cfg, gas_values: Sequence[int], **kw) -> GradAccum:
    """`grad_accum_sweep` as a typed result."""
    return GradAccum(grad_accum_sweep(cfg, gas_values, **kw))


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
    quietness: Quietness | None = None  # the machine while the series ran

    @property
    def median_s(self) -> float:
        return statistics.median(self.step_s)

    @property
    def worst_s(self) -> float:
        return max(self.step_s)

    @property
    def full_collections(self) -> list[tuple[int, float]]:
        """(step, seconds) of each full (generation 2) collection seen."""
        return [(st, d) for st, gen, d in self.collections if gen == 2]


@dataclass
class GCComparison:
    """The same step series with Python's automatic collector on, and off with scheduled collections. Unpacks as
    (on, off)."""

    on: GCSeries
    off: GCSeries

    def __iter__(self):
        return iter((self.on, self.off))

    def __len__(self) -> int:
        return 2

    def table(self):
        """Per mode: the median and worst step, the full collections, at which steps, and their time."""
        import pandas as pd

        from perflab.core.readout import MACHINE, machine, num

        return pd.DataFrame([{"mode": g.mode, "median step (ms)": num(1e3 * g.median_s),
                              "worst step (ms)": num(1e3 * g.worst_s), "full collections": len(g.full_collections),
                              "at steps": ", ".join(str(st) for st, _ in g.full_collections) or "–",
                              "time in full collections (ms)": num(1e3 * sum(d for _, d in g.full_collections)),
                              MACHINE: machine(g.quietness)} for g in self])


def gc_straggler_series(cfg, *, steps: int = 40, batch: int = 2, seq: int = 32, collect_every: int = 20,
                        garbage: PythonGarbage | None = None, device=None, seed: int = 0) -> GCComparison:
    """Step-time series of the same tiny training step while `garbage` makes Python objects each
    step: once with Python's automatic GC on, once with `gc.disable()` and an explicit
    `gc.collect()` every `collect_every` steps (the handbook's remedy: every rank then collects at
    the same step instead of whenever its own allocation counters say so).

    Every collection is recorded through `gc.callbacks` with its generation and duration. The GC's
    previous state is restored afterwards, whatever happens.
    """
    from perflab.core.device import pick_device
    from perflab.core.lock import device_lock
    from perflab.core.quietness import watch
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
        with device_lock(dev, label="training steps"), watch(dev) as w:  # a measurement: its turn, its quietness
            for i in range(steps):
                current["step"] = i
                runner.steps_done = i
                out.append(runner.step([batches[i % 2]]).step_s)
        cols = [(int(s), int(g), float(d)) for s, g, d, *_ in events if s >= 0]
        mode = "gc enabled (automatic)" if enabled else f"gc.disable() + gc.collect() every {collect_every} steps"
        return GCSeries(mode, out, cols, w.result)

    gc.callbacks.append(on_gc)
    try:
        on = series(True)
        garbage.log.clear()  # the second run starts from the same heap as the first
        off = series(False)
    finally:
        gc.callbacks.remove(on_gc)
        (gc.enable if was_enabled else gc.disable)()
        garbage.log.clear()
    return GCComparison(on, off)


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
