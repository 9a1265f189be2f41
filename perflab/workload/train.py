"""A real training step, timed: build → forward → backward → optimizer step, with hooks.

    >>> runner = StepRunner(build_model(cfg), grad_accum=2)
    >>> t = runner.step(make_batches(cfg, batch=8, seq=128, n=2))   # one optimizer step
    >>> t.step_s, t.forward_s, t.backward_s, t.optimizer_s          # seconds

`StepRunner` is general (any model whose forward takes token ids and returns logits, any
optimizer). Lesson 02 turns its times into utilization (`perflab.flops.step.measure_step`).

Timing: on a GPU every phase boundary records a CUDA event and the step waits for the device once
at its end, so phases are timed on the device without extra synchronisation; the step's wall time
(what tokens/s uses) is taken on the host after that wait. On a CPU every boundary reads
`time.perf_counter`. On a GPU the step runs the model in bf16 autocast (weights and optimizer in
fp32: mixed precision) and utilization is taken against the bf16 peak; on a CPU it runs in fp32.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from perflab.core.errors import InputError
from perflab.core.validate import positive_int


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
    """Cross-entropy of b×s×V logits (cast to fp32, as training code does) against the b×s
    next-token targets of `make_batches`. The one loss every lesson and probe trains with."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def model_loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """`next_token_loss(model(inputs), targets)` for one (inputs, targets) batch of `make_batches`."""
    inputs, targets = batch
    # cast before the call: an argument stays alive for the whole call, so passing 16-bit logits in
    # would keep them (2·b·s·V bytes) next to their fp32 copy at the loss's peak
    return next_token_loss(model(inputs).float(), targets)


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
        self.last_quietness: Any = None  # perflab.core.quietness.Quietness of the last `run`'s timed steps
        self.last_waited_s = 0.0  # seconds the last `run` waited for the device's lock before measuring

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
        (grad_accum micro-batches per step). The device's lock is held throughout, and the timed steps
        are watched: `last_quietness` says whether other programs used the device meanwhile,
        `last_waited_s` how long the lock made it wait first."""
        from perflab.core.lock import device_lock
        from perflab.core.quietness import watch

        steps = positive_int("steps", steps)
        out = []
        k = 0

        def one() -> StepTimes:
            nonlocal k
            mb = [batches[(k + j) % len(batches)] for j in range(self.grad_accum)]
            k += self.grad_accum
            return self.step(mb)

        with device_lock(self.device, label="training steps") as waited:  # a measurement: its turn on the device
            for _ in range(warmup):
                one()
            with watch(self.device) as w:
                for _ in range(steps):
                    out.append(one())
        self.last_quietness, self.last_waited_s = w.result, waited
        return out


# ---------------------------------------------------------------- a step, measured and turned into MFU


def default_dtype(device: torch.device) -> str:
    """bf16 (autocast) on a CUDA GPU, fp32 elsewhere."""
    return "bf16" if device.type == "cuda" else "fp32"


def untrained_health(cfg, *, init: str = "gpt2", targets: str = "next", batch: int = 2, seq: int | None = None,
                     device=None, seed: int = 0, reps: int = 3) -> dict[str, Any]:
    """One forward and backward of an untrained model: is it a sane starting point?

    Returns the loss next to ln V (where an untrained model should start: it predicts uniformly),
    the share of gradient entries that are denormal (after the first backward), and the seconds a
    forward+backward takes (the fastest of `reps`, after that first one).
    `init='torch'` shows what PyTorch's defaults give perflab's tied-embedding models;
    `targets='inputs'` scores each position against its own input token instead of the next one
    (the bug this course once had: with a tied N(0, 1) embedding the model "predicts" its input
    perfectly, the loss is 0 and the softmax's saturated gradients underflow)."""
    if targets not in ("next", "inputs"):
        raise InputError(f"targets must be 'next' or 'inputs' (got {targets!r})")
    import math

    from perflab.core.denormals import count_denormals
    from perflab.workload.models import build_model

    seq = seq or cfg.seq_len
    model = build_model(cfg, device=device, seed=seed, init=init)
    data = make_batches(cfg, batch, seq, device=device, seed=seed)[0]
    if targets == "inputs":
        data = (data[0], data[0])
    loss = model_loss(model, data)
    loss.backward()
    den = count_denormals(model.parameters(), grads=True)
    times = []
    for _ in range(reps):  # the first pass above warmed up; the fastest of a few is the least disturbed
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        model_loss(model, data).backward()
        times.append(time.perf_counter() - t0)
    seconds = min(times)
    return {"model": cfg.name, "init": init, "targets": targets, "loss": loss.item(), "ln_V": math.log(cfg.vocab),
            "denormal_grad_fraction": den.fraction, "denormal_grads": den.denormal, "fwd_bwd_s": seconds}
