"""Loss parity: the course's model trained in fp32, in bf16 autocast and in emulated fp8, beside the
run-to-run noise of fp32 itself.

The fp8 run is an **emulation** (`to_fp8`): every `nn.Linear` becomes an `Fp8Linear` whose forward
rounds its input (per token) and its weight (per output channel) to E4M3 with amax scaling
(`perflab.numerics.scaling.quantize`), then multiplies the rounded values in fp32; its backward rounds
the gradient of its output to E5M2 (per token) the same way before the two backward products. So the
numbers are fp8's, the arithmetic is fp32's: what fp8 does to the loss, not to the speed. What is not a
`nn.Linear` stays fp32 (attention's products, the tied output layer, norms), as torchao's float8
training leaves them in higher precision.

Noise: two fp32 runs that differ only in their random seed (initial weights and batches) differ by some
amount; a format whose loss lies within that distance of fp32's cannot be told apart from fp32 by
this run. Each run is summarised by its mean loss over the last `window` steps.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch

from perflab.numerics.formats import E4M3, E5M2, FloatFormat
from perflab.numerics.scaling import quantize

MODES = ("fp32", "bf16 autocast", "fp8 (emulated)")


def fake_quant(x: torch.Tensor, fmt: FloatFormat, granularity: str = "row") -> torch.Tensor:
    """`x` rounded to `fmt` with amax scaling per `granularity` (rows of its last-dimension view), as fp32
    in x's shape."""
    return quantize(x, granularity, fmt)[0].reshape(x.shape)


class _Fp8Matmul(torch.autograd.Function):
    """y = q(x)·q(W)ᵀ in fp32, E4M3 forward; E5M2 gradient of y in the backward (module docstring)."""

    @staticmethod
    def forward(ctx, x, weight, granularity: str):
        x2 = x.reshape(-1, x.shape[-1]).float()
        xq, wq = fake_quant(x2, E4M3, granularity), fake_quant(weight.float(), E4M3, granularity)
        ctx.save_for_backward(xq, wq)
        ctx.granularity, ctx.shape, ctx.dtypes = granularity, x.shape, (x.dtype, weight.dtype)
        return (xq @ wq.t()).reshape(*x.shape[:-1], weight.shape[0]).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        xq, wq = ctx.saved_tensors
        g = fake_quant(grad_out.reshape(-1, grad_out.shape[-1]).float(), E5M2, ctx.granularity)
        gx = (g @ wq).reshape(ctx.shape).to(ctx.dtypes[0])
        gw = (g.t() @ xq).to(ctx.dtypes[1])
        return gx, gw, None


class Fp8Linear(torch.nn.Module):
    """A `nn.Linear`'s weight and bias, multiplied through the fp8 emulation."""

    def __init__(self, linear: torch.nn.Linear, granularity: str = "row"):
        super().__init__()
        self.weight, self.bias, self.granularity = linear.weight, linear.bias, granularity

    def forward(self, x):
        y = _Fp8Matmul.apply(x, self.weight, self.granularity)
        return y if self.bias is None else y + self.bias


def to_fp8(model: torch.nn.Module, granularity: str = "row") -> torch.nn.Module:
    """Replace every `nn.Linear` of `model` in place by an `Fp8Linear`; returns the model."""
    for name, child in list(model.named_children()):
        if isinstance(child, torch.nn.Linear):
            setattr(model, name, Fp8Linear(child, granularity))
        else:
            to_fp8(child, granularity)
    return model


def train(cfg, mode: str, *, steps: int, batch: int, seq: int, batches: int = 4, seed: int = 0, lr: float = 3e-3,
          device=None, tick=None) -> list[float]:
    """Losses of `steps` AdamW steps of `build_model(cfg)` in `mode` (one of MODES), cycling over `batches`
    fixed batches of `make_batches` (the model learns them by heart, so the loss falls)."""
    from perflab.core.errors import InputError
    from perflab.workload.models import build_model
    from perflab.workload.train import make_batches, model_loss

    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    dev = torch.device(device or "cpu")
    model = build_model(cfg, device=dev, seed=seed)
    if mode == "fp8 (emulated)":
        to_fp8(model)
    data = make_batches(cfg, batch, seq, n=batches, device=dev, seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    def cast():
        return torch.autocast(dev.type, dtype=torch.bfloat16) if mode == "bf16 autocast" else contextlib.nullcontext()

    losses = []
    for i in range(steps):
        with cast():
            loss = model_loss(model, data[i % batches])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if tick is not None:
            tick()
    return losses


@dataclass
class ParityResult:
    """Loss curves by run (label -> losses), compared over the last `window` steps."""

    runs: dict[str, list[float]] = field(default_factory=dict)
    window: int = 10
    reference: str = "fp32"
    noise_run: str = "fp32, random seed 1"

    def final(self, label: str) -> float:
        tail = self.runs[label][-self.window:]
        return sum(tail) / len(tail)

    @property
    def noise(self) -> float:
        """|final(fp32, random seed 1) − final(fp32)|: how far two fp32 runs land apart."""
        return abs(self.final(self.noise_run) - self.final(self.reference))

    def difference(self, label: str) -> float:
        return abs(self.final(label) - self.final(self.reference))

    def within_noise(self, label: str) -> bool:
        return self.difference(label) <= self.noise

    def table(self):
        import pandas as pd

        from perflab.core.readout import num

        rows = []
        for label in self.runs:
            d = self.difference(label)
            verdict = ("(the reference)" if label == self.reference else "(the noise)" if label == self.noise_run
                       else ("yes" if self.within_noise(label) else "no"))
            rows.append({"run": label, f"loss, mean of the last {self.window} steps": num(self.final(label), 4),
                         "first loss": num(self.runs[label][0], 4),
                         "distance from fp32": num(d, 2), "within two fp32 runs' distance": verdict})
        return pd.DataFrame(rows).set_index("run")

    def verdict(self, label: str = "fp8 (emulated)") -> str:
        from perflab.core.readout import num

        d, n = self.difference(label), self.noise
        if math.isnan(d) or math.isnan(n):
            return f"{label}: no verdict (a loss is NaN)"
        where = "within" if d <= n else "outside"
        return (f"{label}: {num(d, 2)} from fp32's loss over the last {self.window} steps, {where} the {num(n, 2)} that "
                f"two fp32 runs from different random seeds land apart" + ("" if d <= n else ": a real difference at this run's length"))


def compare(cfg, *, steps: int, batch: int, seq: int, batches: int = 4, window: int = 10, device=None,
            progress: bool = True) -> ParityResult:
    """fp32 (random seeds 0 and 1), bf16 autocast and emulated fp8 (random seed 0), each `steps` steps (module docstring).

    On a CUDA GPU or the CPU; elsewhere (Apple's MPS has no float8 casts) every run goes to the CPU."""
    dev = torch.device(device or "cpu")
    device = dev if dev.type in ("cpu", "cuda") else torch.device("cpu")
    plan = [("fp32", "fp32", 0), ("fp32, random seed 1", "fp32", 1), ("bf16 autocast", "bf16 autocast", 0),
            ("fp8 (emulated)", "fp8 (emulated)", 0)]
    bar = None
    if progress:
        try:
            from tqdm.auto import tqdm

            bar = tqdm(total=steps * len(plan), desc="training runs", unit="step", leave=False)
        except ImportError:  # pragma: no cover
            bar = None
    out = ParityResult(window=min(window, steps))
    try:
        for label, mode, seed in plan:
            out.runs[label] = train(cfg, mode, steps=steps, batch=batch, seq=seq, batches=batches, seed=seed,
                                    device=device, tick=bar.update if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    return out
