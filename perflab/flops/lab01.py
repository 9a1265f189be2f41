"""Checks for lab 01 (labs/01_flops.ipynb): FLOPs of a small MLP, graded against torch's counter.

The expected values are not formulas typed in here: each case builds the MLP with PyTorch and counts
its FLOPs with `FlopCounterMode` (matmul multiply-adds, 2 FLOPs each; bias adds and ReLU are not
counted), so a learner who finds a different convention gets told what the counter saw.
"""

from __future__ import annotations

import torch
from torch import nn

from perflab.core.grading import grade
from perflab.flops.counting import torch_flop_count

CASES = [(8, 32, 64, 10), (64, 784, 256, 10), (3, 5, 7, 11), (128, 1024, 4096, 1024)]


def _mlp(d_in: int, d_hidden: int, d_out: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.ReLU(), nn.Linear(d_hidden, d_out))


def counted_forward(batch: int, d_in: int, d_hidden: int, d_out: int) -> int:
    mlp, x = _mlp(d_in, d_hidden, d_out), torch.randn(batch, d_in)
    with torch.no_grad():
        return torch_flop_count(lambda: mlp(x))[0]


def counted_train_step(batch: int, d_in: int, d_hidden: int, d_out: int) -> int:
    mlp, x = _mlp(d_in, d_hidden, d_out), torch.randn(batch, d_in)  # data: no gradient wanted
    return torch_flop_count(lambda: mlp(x).sum().backward())[0]


def _cases(counter):
    return [({"batch": b, "d_in": i, "d_hidden": h, "d_out": o}, counter(b, i, h, o)) for b, i, h, o in CASES]


def check_forward(mlp_forward_flops) -> bool:
    """Grade `mlp_forward_flops(batch, d_in, d_hidden, d_out)` against FlopCounterMode."""
    return grade("MLP forward FLOPs", mlp_forward_flops, _cases(counted_forward),
                 hint="each Linear is a (batch×in)·(in×out) matmul: 2·batch·in·out FLOPs; bias and ReLU are not counted")


def check_train_step(mlp_train_flops) -> bool:
    """Grade `mlp_train_flops(...)` (forward + backward) against FlopCounterMode."""
    return grade("MLP forward+backward FLOPs", mlp_train_flops, _cases(counted_train_step),
                 hint="backward computes each weight's gradient (one matmul per layer) and the gradient of each "
                      "layer's input — except the first layer's, because the data needs no gradient")


def check_tflops(achieved_tflops) -> bool:
    """Grade `achieved_tflops(m, n, k, seconds)`: the rate of one matmul in TFLOP/s."""
    cases = [({"m": m, "n": n, "k": k, "seconds": s}, 2 * m * n * k / s / 1e12)
             for m, n, k, s in [(4096, 4096, 4096, 0.0002), (1024, 512, 256, 0.001), (8192, 8192, 8192, 1.5)]]
    return grade("matmul TFLOP/s", achieved_tflops, cases, rtol=1e-6,
                 hint="TFLOP/s = FLOPs / seconds / 1e12, with 2·m·n·k FLOPs")
