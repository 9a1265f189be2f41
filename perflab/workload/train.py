"""The course's one training step, timed: forward to the loss → backward → optimizer step → zero_grad.

    >>> runner = StepRunner(build_model(cfg), grad_accum=2)
    >>> t = runner.step(make_batches(cfg, batch=8, seq=128, n=2))   # one optimizer step
    >>> t.step_s, t.forward_s, t.backward_s, t.optimizer_s          # seconds

`StepRunner` is general (any model whose forward takes token ids and returns logits, any
optimizer, eager or compiled, with gradient accumulation, activation checkpointing, hooks, and a
phase callback a memory probe or a profiler wraps around each phase). Every lesson that trains runs
it: lesson 02 turns its times into utilization (`perflab.flops.step.measure_step`), lesson 03 measures
its memory phase by phase (`perflab.memory.probe`), lesson 09 plants faults in it
(`perflab.profiling.faults`), lesson 10 compiles it (`perflab.compiler`) and lesson 11 tunes it
(`perflab.tune`).

Timing: on a GPU every phase boundary records a CUDA event and the step waits for the device once
at its end, so phases are timed on the device without extra synchronisation; the step's wall time
(what tokens/s uses) is taken on the host after that wait. On a CPU every boundary reads
`time.perf_counter`. On a GPU the step runs the model in bf16 autocast (weights and optimizer in
fp32: mixed precision) and utilization is taken against the bf16 peak; on a CPU it runs in fp32.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
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
    """Runs optimizer steps of `model` and times their phases: the one training step of the course.

    optimizer: default `perflab.workload.optim.make_optimizer(model.parameters())` (AdamW, lr 1e-4).
    grad_accum: micro-batches per optimizer step (their gradients add up; the loss of each is
      divided by grad_accum so the step equals one over the concatenated batch).
    autocast_dtype: e.g. torch.bfloat16 for mixed precision on a GPU; None runs in the weights' dtype.
    loss_fn: `loss_fn(logits, targets)`, given the model's output cast to fp32 first, as `model_loss`
      casts it (the 16-bit logits are freed before the loss's peak); default `next_token_loss`.
    hooks: callables run at the named points, each `hook(runner, step_index)`:
      'before_step', 'after_forward', 'after_backward', 'after_step'. Time spent in hooks inside
      the step is reported as `extra_s` (and is part of `step_s`, as it would be in a trainer).
    compile_kw: None runs the model eagerly; a dict runs `torch.compile(model, **compile_kw)` (its first
      step compiles). The optimizer and `model` stay the uncompiled module's.
    checkpointing: True or False sets perflab's `model.checkpointing` (every block recomputed in the
      backward pass); None leaves the model as it was built.
    output: applied to the model's output before the cast and the loss (lesson 11 cuts a padded
      vocabulary's zero columns off here); None: the output is the logits.
    phase: `phase(name, step_index)` returns a context manager entered around each phase: 'forward'
      and 'backward' of every micro-batch, then 'optimizer step' and 'zero_grad' (a memory probe's
      counters, a profiler's ranges); None: nothing around them.
    keep_loss: True keeps each micro-batch's loss, detached, until the next step (`micro_losses`,
      `mean_loss()`), so nothing inside the step waits for the device. False reads each loss's value
      right after its forward (`.item()`: outside the phases, a wait on a GPU) and holds no reference
      to it once its backward has run: what a memory probe needs, whose estimate frees the scalar loss
      in the backward pass. Either way `last_loss` is the last micro-batch's loss.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, *, grad_accum: int = 1,
                 autocast_dtype: torch.dtype | None = None, loss_fn: Callable = next_token_loss,
                 hooks: Mapping[str, Sequence[Callable]] | None = None, device=None, compile_kw: dict | None = None,
                 checkpointing: bool | None = None, output: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 phase: Callable[[str, int], contextlib.AbstractContextManager] | None = None, keep_loss: bool = True):
        from perflab.workload.optim import make_optimizer

        self.model = model
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.optimizer = optimizer or make_optimizer(model.parameters())
        self.grad_accum = positive_int("grad_accum", grad_accum)
        self.autocast_dtype = autocast_dtype
        self.loss_fn = loss_fn
        self.hooks = {k: list(v) for k, v in (hooks or {}).items()}
        if checkpointing is not None:
            model.checkpointing = bool(checkpointing)  # pyright: ignore[reportArgumentType]  # a plain attribute perflab's Transformer reads
        self.forward: Callable[[torch.Tensor], torch.Tensor] = (
            model if compile_kw is None else torch.compile(model, **compile_kw))  # pyright: ignore[reportAttributeAccessIssue]  # a compiled module is called like the model
        self.output = output
        self.phase = phase
        self.keep_loss = keep_loss
        self.steps_done = 0
        self._read_loss: float | None = None  # keep_loss=False: the last loss's value, read after its forward
        self.micro_losses: list[torch.Tensor] = []  # the last step's losses, detached (keep_loss=True)
        self.last_quietness: Any = None  # perflab.core.quietness.Quietness of the last `run`'s timed steps
        self.last_waited_s = 0.0  # seconds the last `run` waited for the device's lock before measuring

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def _in(self, name: str):
        return contextlib.nullcontext() if self.phase is None else self.phase(name, self.steps_done)

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

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        out = self.forward(x)
        return out if self.output is None else self.output(out)

    def _micro(self, x: torch.Tensor, y: torch.Tensor, clock: _Clock | None) -> None:
        """Forward to the loss and backward of one micro-batch; its gradients add to the others'."""
        with self._in("forward"):
            with self._autocast():
                # cast before the call (as model_loss does): the 16-bit logits die here, not at the loss's peak
                loss = self.loss_fn(self._logits(x).float(), y)
                if self.grad_accum > 1:
                    kept, loss = loss.detach(), loss / self.grad_accum
                else:
                    kept = loss.detach()
        if clock is not None:
            clock.mark("forward")
        if self.keep_loss:
            self.micro_losses.append(kept)
        else:
            self._read_loss = kept.item()  # outside the phases: .item() waits for the device
        del kept
        self._run_hooks("after_forward", clock)
        with self._in("backward"):
            loss.backward()
            loss = None  # the scalar dies with its backward (a memory probe counts it there)
        if clock is not None:
            clock.mark("backward")
        self._run_hooks("after_backward", clock)

    def _update(self) -> None:
        with self._in("optimizer step"):
            self.optimizer.step()
        with self._in("zero_grad"):
            self.optimizer.zero_grad(set_to_none=True)

    def _check(self, micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        if len(micro_batches) != self.grad_accum:
            raise InputError(f"a step takes grad_accum={self.grad_accum} micro-batches, got {len(micro_batches)}")
        self.micro_losses = []

    def step(self, micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> StepTimes:
        """One optimizer step over `micro_batches` (grad_accum of them), timed phase by phase."""
        self._check(micro_batches)
        clock = _Clock(self.device)
        t0 = time.perf_counter()
        self._run_hooks("before_step", None)
        clock.mark("start")
        for x, y in micro_batches:
            self._micro(x, y, clock)
        self._update()
        clock.mark("optimizer")
        self._run_hooks("after_step", clock)
        d = clock.durations()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        step_s = time.perf_counter() - t0
        self._finish()
        tokens = sum(x.numel() for x, _ in micro_batches)
        return StepTimes(step_s, d.get("forward", 0.0), d.get("backward", 0.0), d.get("optimizer", 0.0), tokens,
                         d.get("extra", 0.0))

    def _finish(self) -> None:
        self.steps_done += 1

    @property
    def last_loss(self) -> float | None:
        """The last micro-batch's loss (None before a step). With keep_loss=True it is read when asked,
        so a step itself never waits for the device to hand a loss back."""
        if self.keep_loss:
            return float(self.micro_losses[-1]) if self.micro_losses else None
        return self._read_loss

    def accumulate(self, micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """The forward and backward passes of a step, untimed and without hooks, leaving the gradients
        for `update()` (lesson 10 measures the memory of these two passes on their own)."""
        self._check(micro_batches)
        for x, y in micro_batches:
            self._micro(x, y, None)

    def update(self) -> None:
        """The optimizer step and zero_grad that end a step begun by `accumulate`."""
        self._update()
        self._finish()

    def mean_loss(self) -> float:
        """The last step's loss: the mean of its micro-batches' losses (keep_loss=True)."""
        if not self.micro_losses:
            raise InputError("no loss kept: a runner with keep_loss=True has not run a step yet")
        return float(torch.stack(self.micro_losses).mean())

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


@dataclass
class Health:
    """An untrained model's first step, in numbers (`untrained_health`)."""

    model: str
    init: str
    targets: str
    loss: float  # the first forward's loss
    ln_V: float  # where an untrained model should start: it predicts every token equally
    denormal_grad_fraction: float  # share of gradient entries that are denormal after the first backward
    denormal_grads: int
    fwd_bwd_s: float  # seconds of one forward + backward, the fastest of `reps` after the first


def untrained_health(cfg, *, init: str = "gpt2", targets: str = "next", batch: int = 2, seq: int | None = None,
                     device=None, seed: int = 0, reps: int = 3) -> Health:
    """One forward and backward of an untrained model: is it a sane starting point?

    Returns the loss next to ln V (where an untrained model should start: it predicts uniformly),
    the share of gradient entries that are denormal (after the first backward), and the seconds a
    forward+backward takes (the fastest of `reps`, after that first one). The passes are the course's
    step (`StepRunner.accumulate`), without its optimizer step.
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
    runner = StepRunner(model)
    runner.accumulate([data])
    loss = runner.micro_losses[-1].item()
    den = count_denormals(model.parameters(), grads=True)
    times = []
    for _ in range(reps):  # the first pass above warmed up; the fastest of a few is the least disturbed
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        runner.accumulate([data])
        times.append(time.perf_counter() - t0)
    return Health(cfg.name, init, targets, loss, math.log(cfg.vocab), den.fraction, den.denormal, min(times))
