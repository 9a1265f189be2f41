"""FLOP counting: by hand for the layers people count, and with torch's counter to check.

Conventions (the course uses them everywhere):
* 1 MAC (multiply-accumulate, a·b + c) = 2 FLOPs. A matmul of m×k by k×n does m·n·k MACs,
  so 2·m·n·k FLOPs.
* FLOPs is a count; FLOP/s (TFLOP/s = 1e12 FLOP/s) is a rate.
* Like torch's `FlopCounterMode`, the hand counts here count matmul/conv multiply-adds only:
  bias additions, activations, norms and softmax are left out (they are a small share of a
  transformer's FLOPs but not of its time; notebook 01 shows both).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perflab.core.validate import positive_int


def matmul_flops(m: int, n: int, k: int) -> int:
    """FLOPs of an (m×k)·(k×n) product: 2·m·n·k."""
    return 2 * positive_int("m", m) * positive_int("n", n) * positive_int("k", k)


def macs_to_flops(macs: int) -> int:
    """1 MAC = 2 FLOPs."""
    return 2 * macs


def flops_to_macs(flops: int) -> float:
    """MACs = FLOPs / 2 (a count of multiply-adds, when every FLOP pair is one)."""
    return flops / 2


def linear_flops(batch: int, in_features: int, out_features: int) -> int:
    """Forward FLOPs of nn.Linear on `batch` rows (tokens): 2·batch·in·out (bias not counted)."""
    return matmul_flops(batch, out_features, in_features)


def linear_backward_flops(batch: int, in_features: int, out_features: int, input_requires_grad: bool = True) -> int:
    """Backward FLOPs of nn.Linear: the weight gradient (2·b·in·out) plus, when the input needs a
    gradient, the input gradient (another 2·b·in·out). So backward ≈ 2× forward for inner layers
    and 1× for a first layer whose input (the data) needs no gradient."""
    w = matmul_flops(in_features, out_features, batch)
    x = matmul_flops(batch, in_features, out_features) if input_requires_grad else 0
    return w + x


def conv2d_output_size(size: int, kernel: int, stride: int = 1, padding: int = 0, dilation: int = 1) -> int:
    """Output height/width of a convolution along one axis."""
    out = (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    if out < 1:
        from perflab.core.errors import InputError

        raise InputError(f"kernel {kernel} (dilation {dilation}) does not fit an input of {size} with padding {padding}")
    return out


def conv2d_flops(batch: int, in_channels: int, out_channels: int, height: int, width: int, kernel: int | tuple[int, int],
                 stride: int = 1, padding: int = 0, groups: int = 1) -> int:
    """Forward FLOPs of nn.Conv2d: 2 · (output elements) · (in_channels/groups · kh · kw)."""
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    oh = conv2d_output_size(height, kh, stride, padding)
    ow = conv2d_output_size(width, kw, stride, padding)
    return 2 * batch * out_channels * oh * ow * (in_channels // groups) * kh * kw


def torch_flop_count(fn: Callable[[], Any], *, display: bool = False) -> tuple[int, dict[str, int]]:
    """Run `fn()` under torch's FlopCounterMode: (total FLOPs, FLOPs per aten op name).

    Use it to check hand counts; it counts matmuls, convolutions and (on GPU) attention, and
    nothing elementwise.
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=display)
    with counter:
        fn()
    per_op: dict[str, int] = {}
    for _module, ops in counter.get_flop_counts().items():
        for op, n in ops.items():
            per_op[str(op)] = max(per_op.get(str(op), 0), int(n))
        break  # the 'Global' entry holds the whole run
    return int(counter.get_total_flops()), per_op


@dataclass(frozen=True)
class HandCount:
    """One layer counted by hand (`by_hand`) and by torch's FlopCounterMode (`counted`), in FLOPs."""

    layer: str
    shape: str
    by_hand: int
    counted: int

    @property
    def equal(self) -> bool:
        return self.by_hand == self.counted


@dataclass(frozen=True)
class HandCounts:
    """A few layers counted both ways (`hand_vs_counter`)."""

    rows: tuple[HandCount, ...]

    def row(self, layer: str) -> HandCount:
        return next(r for r in self.rows if r.layer == layer)

    @property
    def linear_forward(self) -> HandCount:
        """nn.Linear(1024, 4096) forward on 64 rows: the layer lesson 01 asks a prediction of."""
        return self.row("nn.Linear forward")

    @property
    def all_equal(self) -> bool:
        return all(r.equal for r in self.rows)

    def table(self):
        import pandas as pd

        return pd.DataFrame([{"layer": r.layer, "shape": r.shape, "by hand (FLOPs)": f"{r.by_hand:,}",
                              "counted by torch (FLOPs)": f"{r.counted:,}", "equal": "yes" if r.equal else "no"}
                             for r in self.rows])

    def example_line(self) -> str:
        """One layer's count in FLOPs and in MACs."""
        r = self.linear_forward
        return f"{r.layer} ({r.shape}): {r.by_hand:,} FLOPs = {r.by_hand // 2:,} MACs"


def hand_vs_counter(device=None) -> HandCounts:
    """Hand counts next to FlopCounterMode's for a few layers (run on `device`)."""
    import torch
    from torch import nn

    from perflab.core.device import pick_device

    dev = torch.device(device) if device is not None else pick_device()
    rows = []

    def add(layer: str, shape: str, hand: int, fn):
        counted, _ = torch_flop_count(fn)
        rows.append(HandCount(layer, shape, hand, counted))

    a, b = torch.randn(512, 256, device=dev), torch.randn(256, 128, device=dev)
    add("matmul", "512×256 · 256×128", matmul_flops(512, 128, 256), lambda: a @ b)
    lin = nn.Linear(1024, 4096).to(dev)
    x = torch.randn(64, 1024, device=dev)
    add("nn.Linear forward", "64 tokens, 1024→4096", linear_flops(64, 1024, 4096), lambda: lin(x))
    add("nn.Linear forward+backward (data input)", "64 tokens, 1024→4096",
        linear_flops(64, 1024, 4096) + linear_backward_flops(64, 1024, 4096, input_requires_grad=False),
        lambda: lin(x).sum().backward())
    xg = torch.randn(64, 1024, device=dev, requires_grad=True)
    add("nn.Linear forward+backward (input needs grad)", "64 tokens, 1024→4096",
        linear_flops(64, 1024, 4096) + linear_backward_flops(64, 1024, 4096, input_requires_grad=True),
        lambda: lin(xg).sum().backward())
    conv = nn.Conv2d(3, 64, 7, stride=2, padding=3).to(dev)
    img = torch.randn(8, 3, 224, 224, device=dev)
    add("nn.Conv2d forward", "8×3×224×224, 64 filters 7×7 stride 2", conv2d_flops(8, 3, 64, 224, 224, 7, stride=2, padding=3),
        lambda: conv(img))
    return HandCounts(tuple(rows))


def count_flops(fn: Callable[..., Any], *args, **kwargs):
    """Run `fn(*args, **kwargs)` and count the FLOPs of everything it ran, attention included on
    every device; returns a `perflab.flops.counter.FlopCount` (`.total`, `.by_phase`, `.table()`,
    `.result`). Call backward inside `fn` to count it. See `perflab.flops.counter` for the scope."""
    from perflab.flops.counter import count_flops as _count

    return _count(fn, *args, **kwargs)
