"""The tensors of one real training step, and what a loss scale does for fp16 gradients.

`capture(cfg, batch, seq)` runs one forward and backward of the course's model
(`perflab.workload.models.build_model`, the batches of `perflab.workload.train.make_batches`, the loss of
`model_loss`) in fp32 and keeps, for every `nn.Linear`:

* its **weight**;
* its **activation**: the input it multiplies (a forward pre-hook), flattened to tokens × features;
* its **weight gradient** (`.grad` after the backward);
* its **activation gradient**: the gradient of the loss with respect to its output (a full backward
  hook's `grad_output`), what the backward's GEMMs multiply.

Loss scaling (`loss_scale_trips`): fp16's smallest subnormal is 2^−24, so gradients below 2^−25 flush
to zero. `torch.amp.GradScaler` multiplies the loss by a scale S before the backward, so every
gradient is S times larger while it is held in fp16, and divides the gradients by S (unscales them,
in fp32) before the optimizer step; it starts at S = 2^16 and halves S whenever a gradient overflows.
Here the step's fp32 gradients times S are cast to fp16, which shows what S recovers from flushing
and what it pushes past fp16's largest value. (A real fp16 backward also rounds every intermediate in
fp16, so it loses at least this much.) bf16 has fp32's 8-bit exponent, so the same gradients keep
their range in bf16 without any scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from perflab.numerics.cast import Trip, trip
from perflab.numerics.formats import BF16, FP16, FloatFormat

GRADSCALER_INIT = 2.0**16  # torch.amp.GradScaler's default init_scale (65536)
KINDS = ("weights", "activations", "weight gradients", "activation gradients")


@dataclass
class StepTensors:
    """Per `nn.Linear` (by its module name): the four tensors of one training step, in fp32."""

    model: str
    batch: int
    seq: int
    loss: float
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    activations: dict[str, torch.Tensor] = field(default_factory=dict)
    weight_grads: dict[str, torch.Tensor] = field(default_factory=dict)
    activation_grads: dict[str, torch.Tensor] = field(default_factory=dict)

    def by_kind(self) -> dict[str, dict[str, torch.Tensor]]:
        return {"weights": self.weights, "activations": self.activations, "weight gradients": self.weight_grads,
                "activation gradients": self.activation_grads}

    def flat(self) -> dict[str, torch.Tensor]:
        """Each kind's values of every layer as one 1-D tensor."""
        return {k: torch.cat([t.reshape(-1) for t in d.values()]) for k, d in self.by_kind().items()}

    @property
    def layers(self) -> list[str]:
        return list(self.weights)

    def describe(self) -> str:
        from perflab.core.readout import num

        n = sum(t.numel() for t in self.flat().values())
        return (f"{self.model}: one step of batch {self.batch} × {self.seq} tokens, loss {num(self.loss)}; "
                f"{len(self.layers)} linear layers, {n:,} values kept")


def capture(cfg, batch: int, seq: int, *, seed: int = 0, device=None) -> StepTensors:
    """One fp32 forward and backward of `build_model(cfg)` on `make_batches(cfg, batch, seq)`; the tensors
    every linear layer multiplies (module docstring)."""
    from perflab.workload.models import build_model
    from perflab.workload.train import make_batches, model_loss

    model = build_model(cfg, device=device, seed=seed)
    (b,) = make_batches(cfg, batch, seq, n=1, device=device, seed=seed)
    out = StepTensors(cfg.name, batch, seq, 0.0)
    handles = []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            def pre(m, args, name=name):
                out.activations[name] = args[0].detach().reshape(-1, args[0].shape[-1]).float().cpu()

            def back(m, grad_in, grad_out, name=name):
                out.activation_grads[name] = grad_out[0].detach().reshape(-1, grad_out[0].shape[-1]).float().cpu()

            handles += [mod.register_forward_pre_hook(pre), mod.register_full_backward_hook(back)]
    try:
        loss = model_loss(model, b)
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            out.weights[name] = mod.weight.detach().float().cpu()
            if mod.weight.grad is not None:
                out.weight_grads[name] = mod.weight.grad.detach().float().cpu()
    out.loss = float(loss.detach())
    return out


@dataclass(frozen=True)
class ScaledTrip:
    """Gradients times a loss scale S, cast into a format (then divided by S again)."""

    scale: float
    fmt: str
    trip: Trip


@dataclass(frozen=True)
class LossScaleTable:
    """What a loss scale does to one step's gradients in fp16, beside bf16 without one."""

    rows: tuple[ScaledTrip, ...]
    what: str

    def flushed(self, fmt: str, scale: float) -> float:
        return next(r.trip.flushed for r in self.rows if r.fmt == fmt and r.scale == scale)

    def overflow(self, fmt: str, scale: float) -> float:
        return next(r.trip.overflow for r in self.rows if r.fmt == fmt and r.scale == scale)

    def table(self):
        import math

        import pandas as pd

        from perflab.core.readout import num, percent

        rows = [{"format": r.fmt, "loss scale S": f"2^{int(math.log2(r.scale))}" if r.scale != 1 else "1 (none)",
                 "flushed to zero": percent(r.trip.flushed, 2), "overflow (inf in fp16)": percent(r.trip.overflow, 2),
                 "relative error (kept values)": num(r.trip.rel_error, 2)} for r in self.rows]
        return pd.DataFrame(rows).set_index(["format", "loss scale S"])


def loss_scale_trips(grads: torch.Tensor, scales: Sequence[float] = (1.0, 2.0**8, GRADSCALER_INIT),
                     formats: Sequence[FloatFormat] = (FP16, BF16), what: str = "gradients") -> LossScaleTable:
    """`grads` × S cast into each format, for each S of `scales` (bf16 only at S = 1: it needs none)."""
    rows = []
    for fmt in formats:
        for s in scales if fmt is FP16 else (1.0,):
            rows.append(ScaledTrip(float(s), fmt.name, trip(grads.float() * s, fmt, what)))
    return LossScaleTable(tuple(rows), what)
