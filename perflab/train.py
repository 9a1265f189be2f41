"""A real training step, timed: build → forward → backward → optimizer step, with hooks.

    >>> runner = StepRunner(build_model(cfg), grad_accum=2)
    >>> t = runner.step(make_batches(cfg, batch=8, seq=128, n=2))   # one optimizer step
    >>> t.step_s, t.forward_s, t.backward_s, t.optimizer_s          # seconds

    >>> rep = measure_step(preset("tiny-gpt"), batch=8, seq=128, checkpointing=True)
    >>> rep.tokens_per_s, rep.mfu_spec, rep.hfu_spec, rep.mfu_ceiling

`StepRunner` is general (any model whose forward takes token ids and returns logits, any
optimizer); `measure_step` builds one of perflab's models, times it, and turns the times into
utilization with the exact FLOP count of `perflab.transformer_flops` — checked against
`perflab.flops.count_flops` on the same step.

Timing: on a GPU every phase boundary records a CUDA event and the step waits for the device once
at its end, so phases are timed on the device without extra synchronisation; the step's wall time
(what tokens/s uses) is taken on the host after that wait. On a CPU every boundary reads
`time.perf_counter`. On a GPU the step runs the model in bf16 autocast (weights and optimizer in
fp32: mixed precision) and utilization is taken against the bf16 peak; on a CPU it runs in fp32.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from .errors import InputError
from .validate import positive_int


def make_batches(cfg, batch: int, seq: int, n: int = 1, device=None, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`n` micro-batches of random token ids (inputs, next-token targets), each b×s, on `device`."""
    batch, seq, n = positive_int("batch", batch), positive_int("seq", seq), positive_int("n", n)
    if seq > cfg.seq_len:
        raise InputError(f"seq={seq} is longer than {cfg.name}'s context of {cfg.seq_len}: choose seq ≤ {cfg.seq_len}")
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, cfg.vocab, (batch, seq + 1), generator=g)
        out.append((ids[:, :-1].contiguous().to(device), ids[:, 1:].contiguous().to(device)))
    return out


@dataclass
class StepTimes:
    """Seconds spent in one optimizer step (all its micro-batches)."""

    step_s: float  # wall clock, host side, after waiting for the device
    forward_s: float
    backward_s: float  # includes recomputation when checkpointing
    optimizer_s: float
    tokens: int
    extra_s: float = 0.0  # time spent in hooks inside the step (e.g. a scheduled gc.collect())

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


class _Clock:
    """Marks phase boundaries; CUDA events on a GPU, perf_counter elsewhere."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device
        self.marks: list[tuple[str, Any]] = []

    def mark(self, name: str) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append((name, ev))
        else:
            if self.device.type == "mps":
                torch.mps.synchronize()
            self.marks.append((name, time.perf_counter()))

    def durations(self) -> dict[str, float]:
        """Seconds between consecutive marks, summed by the name of the mark that ends each span."""
        if self.cuda:
            torch.cuda.synchronize(self.device)
        out: dict[str, float] = {}
        for (_, a), (name, b) in zip(self.marks, self.marks[1:]):
            dt = a.elapsed_time(b) / 1e3 if self.cuda else b - a
            out[name] = out.get(name, 0.0) + dt
        return out


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


class StepRunner:
    """Runs optimizer steps of `model` and times their phases.

    grad_accum: micro-batches per optimizer step (their gradients add up; the loss of each is
      divided by grad_accum so the step equals one over the concatenated batch).
    autocast_dtype: e.g. torch.bfloat16 for mixed precision on a GPU; None runs in the weights' dtype.
    hooks: callables run at the named points, each `hook(runner, step_index)`:
      'before_step', 'after_forward', 'after_backward', 'after_step'. Time spent in hooks inside
      the step is reported as `extra_s` (and is part of `step_s`, as it would be in a trainer).
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, *, grad_accum: int = 1,
                 autocast_dtype: torch.dtype | None = None, loss_fn: Callable = next_token_loss,
                 hooks: dict[str, Sequence[Callable]] | None = None, device=None):
        self.model = model
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.grad_accum = positive_int("grad_accum", grad_accum)
        self.autocast_dtype = autocast_dtype
        self.loss_fn = loss_fn
        self.hooks = {k: list(v) for k, v in (hooks or {}).items()}
        self.steps_done = 0
        self.last_loss: float | None = None

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def _run_hooks(self, where: str, clock: _Clock | None) -> None:
        fns = self.hooks.get(where)
        if not fns:
            return
        if clock is not None:
            clock.mark("_before_hook")
        for fn in fns:
            fn(self, self.steps_done)
        if clock is not None:
            clock.mark("extra")

    def step(self, micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> StepTimes:
        if len(micro_batches) != self.grad_accum:
            raise InputError(f"a step takes grad_accum={self.grad_accum} micro-batches, got {len(micro_batches)}")
        clock = _Clock(self.device)
        t0 = time.perf_counter()
        self._run_hooks("before_step", None)
        clock.mark("start")
        loss = None
        for x, y in micro_batches:
            with self._autocast():
                loss = self.loss_fn(self.model(x), y) / self.grad_accum
            clock.mark("forward")
            self._run_hooks("after_forward", clock)
            loss.backward()
            clock.mark("backward")
            self._run_hooks("after_backward", clock)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        clock.mark("optimizer")
        self._run_hooks("after_step", clock)
        d = clock.durations()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        step_s = time.perf_counter() - t0
        self.steps_done += 1
        self.last_loss = float(loss.detach()) * self.grad_accum if loss is not None else None
        tokens = sum(x.numel() for x, _ in micro_batches)
        return StepTimes(step_s, d.get("forward", 0.0), d.get("backward", 0.0), d.get("optimizer", 0.0), tokens,
                         d.get("extra", 0.0))

    def run(self, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], steps: int, warmup: int = 1) -> list[StepTimes]:
        """`warmup` untimed steps then `steps` timed ones, cycling through `batches`
        (grad_accum micro-batches per step)."""
        steps = positive_int("steps", steps)
        out = []
        k = 0
        for i in range(warmup + steps):
            mb = [batches[(k + j) % len(batches)] for j in range(self.grad_accum)]
            k += self.grad_accum
            t = self.step(mb)
            if i >= warmup:
                out.append(t)
        return out


# ---------------------------------------------------------------- a step, measured and turned into MFU


def default_dtype(device: torch.device) -> str:
    """bf16 (autocast) on a CUDA GPU, fp32 elsewhere."""
    return "bf16" if device.type == "cuda" else "fp32"


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
    counted_flops_per_step: int | None  # perflab.flops.count_flops on one real step (None: not checked)
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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def row(self) -> dict[str, Any]:
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
                f"MFU {pct(self.mfu_ceiling)} / HFU {pct(self.hfu_ceiling)} of the measured ceiling")


def measure_step(cfg, *, batch: int = 8, seq: int | None = None, steps: int = 5, warmup: int = 2,
                 checkpointing: bool = False, grad_accum: int = 1, device=None, dtype: str | None = None,
                 ceiling: bool | float = True, ceiling_size: int | None = None, verify: bool = True,
                 hooks: dict[str, Sequence[Callable]] | None = None, seed: int = 0) -> StepReport:
    """Build `cfg`'s model, time `steps` optimizer steps (after `warmup`), and report utilization.

    dtype: 'bf16' (autocast; the GPU default) or 'fp32' (the CPU default).
    ceiling: True to measure (or look up) the device's matmul ceiling, False to skip it, or a
      number in TFLOP/s to use as is.
    verify: count the first warm-up step's FLOPs with `perflab.flops.count_flops` and check they
      equal the exact count (they must; a mismatch raises).
    """
    from .device import describe, pick_device
    from .dtypes import check_supported
    from .flopcounter import count_flops
    from .hardware import peaks_for
    from .mfu import matmul_ceiling
    from .models import build_model
    from .transformer_flops import exact_flops, exact_for_counted

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
    batches = make_batches(cfg, batch, seq, n=max(grad_accum, 2), device=dev, seed=seed)
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
    if ceiling is True:
        ceil = matmul_ceiling(dev, dt.name, ceiling_size)
        ceil_t, ceil_label = ceil.tflops, ceil.label
    elif ceiling:
        ceil_t, ceil_label = float(ceiling), "measured ceiling (given)"
    else:
        ceil_t, ceil_label = None, "not measured"
    mt, ht = model_flops / step_s / 1e12, hw_flops / step_s / 1e12
    return StepReport(
        model=cfg.name, device=str(dev), device_name=info.name, dtype=dt.name, batch=batch, seq=seq,
        grad_accum=runner.grad_accum, checkpointing=bool(checkpointing), steps=steps, step_s=step_s,
        step_times_s=[t.step_s for t in times], forward_s=statistics.median(t.forward_s for t in times),
        backward_s=statistics.median(t.backward_s for t in times), optimizer_s=statistics.median(t.optimizer_s for t in times),
        tokens_per_step=tokens, tokens_per_s=tokens / step_s, model_flops_per_step=model_flops,
        hardware_flops_per_step=hw_flops, counted_flops_per_step=counted, model_tflops=mt, hardware_tflops=ht,
        peak_tflops=peak, peak_source=peaks.source if peak else "unknown", ceiling_tflops=ceil_t, ceiling_label=ceil_label,
        mfu_spec=mt / peak if peak else None, hfu_spec=ht / peak if peak else None,
        mfu_ceiling=mt / ceil_t if ceil_t else None, hfu_ceiling=ht / ceil_t if ceil_t else None,
        loss=runner.last_loss, notes=notes)


def checkpointing_comparison(cfg, **kw) -> tuple[StepReport, StepReport]:
    """The same step without and with activation checkpointing (measured alternately is not needed:
    each report is a median over its own steps)."""
    return measure_step(cfg, checkpointing=False, **kw), measure_step(cfg, checkpointing=True, **kw)


def grad_accum_sweep(cfg, gas_values: Sequence[int], *, batch: int = 4, seq: int | None = None, steps: int = 3,
                     device=None, name: str = "02_grad_accum", progress: bool = False, **kw):
    """Throughput against gradient-accumulation steps at a fixed micro-batch; one sweep point per
    GAS value, written as it is measured (`perflab.results.run_sweep`). Returns the SweepResult."""
    from .device import describe, pick_device
    from .results import run_sweep

    dev = torch.device(device) if device is not None else pick_device()
    s = seq if seq is not None else cfg.seq_len

    def one(p):
        r = measure_step(cfg, batch=p["batch"], seq=p["seq"], steps=p["steps"], grad_accum=p["gas"], device=dev,
                         verify=False, **({"warmup": 1} | kw))
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
            rec = {"step": step, "i": i}
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
    from .device import pick_device
    from .models import build_model

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
        hooks: dict[str, list[Callable]] = {"before_step": [garbage]}
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
