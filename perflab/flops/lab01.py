"""Checks for lab 01 (labs/01_flops.ipynb): FLOPs of a small MLP, graded against torch's counter.

The expected values are not formulas typed in here: each case builds the MLP with PyTorch and counts
its FLOPs with `FlopCounterMode` (matmul multiply-adds, 2 FLOPs each; bias adds and ReLU are not
counted), so a learner who finds a different convention gets told what the counter saw.
"""

from __future__ import annotations

import torch
from torch import nn

from perflab.flops.counting import torch_flop_count
from perflab.grading.checks import Verdict, grade

# Shapes with every size different (a formula that swaps two sizes fails), odd and non-power-of-two
# sizes, a batch of 1, and one layer narrower than its input.
CASES = [(8, 32, 64, 10), (64, 784, 256, 10), (3, 5, 7, 11), (128, 1024, 4096, 1024), (1, 6, 3, 2)]


def reference_forward(batch: int, d_in: int, d_hidden: int, d_out: int) -> int:
    return 2 * batch * d_in * d_hidden + 2 * batch * d_hidden * d_out


def reference_train_step(batch: int, d_in: int, d_hidden: int, d_out: int) -> int:
    return 2 * reference_forward(batch, d_in, d_hidden, d_out) + 2 * batch * d_hidden * d_out


FORWARD_MISTAKES = [
    ("you counted multiply-adds (MACs): each is 2 FLOPs", lambda batch, d_in, d_hidden, d_out:
        reference_forward(batch, d_in, d_hidden, d_out) // 2),
    ("you counted the bias additions: the counter counts matmuls only", lambda batch, d_in, d_hidden, d_out:
        reference_forward(batch, d_in, d_hidden, d_out) + batch * (d_hidden + d_out)),
    ("you counted the bias additions and the ReLU: the counter counts matmuls only",
        lambda batch, d_in, d_hidden, d_out: reference_forward(batch, d_in, d_hidden, d_out) + batch * (2 * d_hidden + d_out)),
    ("you counted k − 1 additions per dot product (2k − 1 operations): the convention is 2 FLOPs per multiply-add",
        lambda batch, d_in, d_hidden, d_out: batch * d_hidden * (2 * d_in - 1) + batch * d_out * (2 * d_hidden - 1)),
]

TRAIN_MISTAKES = [
    ("that is the 3× rule (forward + 2× forward), which computes the gradient of the input data too: the data "
     "needs no gradient", lambda batch, d_in, d_hidden, d_out: 3 * reference_forward(batch, d_in, d_hidden, d_out)),
    ("that is forward + weight gradients only: backward also computes the gradient of the hidden activation "
     "(the second layer's input)", lambda batch, d_in, d_hidden, d_out: 2 * reference_forward(batch, d_in, d_hidden, d_out)),
    ("you counted multiply-adds (MACs): each is 2 FLOPs", lambda batch, d_in, d_hidden, d_out:
        reference_train_step(batch, d_in, d_hidden, d_out) // 2),
    ("that is the forward alone: add the backward's matmuls", reference_forward),
]


def reference_tflops(m: int, n: int, k: int, seconds: float) -> float:
    return 2 * m * n * k / seconds / 1e12


TFLOPS_MISTAKES = [
    ("you counted multiply-adds (MACs): a matmul is 2·m·n·k FLOPs", lambda m, n, k, seconds: m * n * k / seconds / 1e12),
    ("that is GFLOP/s: 1 TFLOP/s is 1e12 FLOP/s", lambda m, n, k, seconds: 2 * m * n * k / seconds / 1e9),
    ("that is FLOP/s: divide by 1e12 for TFLOP/s", lambda m, n, k, seconds: 2 * m * n * k / seconds),
    ("you multiplied by the time: a rate is FLOPs divided by seconds", lambda m, n, k, seconds: 2 * m * n * k * seconds / 1e12),
    ("you counted 2k − 1 operations per dot product: the convention is 2·m·n·k", lambda m, n, k, seconds:
        m * n * (2 * k - 1) / seconds / 1e12),
]


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


_FORBIDDEN = (torch_flop_count, counted_forward, counted_train_step)


def check_forward(mlp_forward_flops) -> Verdict:
    """Grade `mlp_forward_flops(batch, d_in, d_hidden, d_out)` against FlopCounterMode."""
    return grade("MLP forward FLOPs", mlp_forward_flops, _cases(counted_forward), mistakes=FORWARD_MISTAKES,
                 reference=reference_forward, forbidden=_FORBIDDEN,
                 hint="each Linear is a (batch×in)·(in×out) matmul: 2·batch·in·out FLOPs; bias and ReLU are not counted")


def check_train_step(mlp_train_flops) -> Verdict:
    """Grade `mlp_train_flops(...)` (forward + backward) against FlopCounterMode."""
    return grade("MLP forward+backward FLOPs", mlp_train_flops, _cases(counted_train_step), mistakes=TRAIN_MISTAKES,
                 reference=reference_train_step, forbidden=_FORBIDDEN,
                 hint="backward computes each weight's gradient (one matmul per layer) and the gradient of each "
                      "layer's input — except the first layer's, because the data needs no gradient")


def check_tflops(achieved_tflops) -> Verdict:
    """Grade `achieved_tflops(m, n, k, seconds)`: the rate of one matmul in TFLOP/s."""
    cases = [({"m": m, "n": n, "k": k, "seconds": s}, 2 * m * n * k / s / 1e12)
             for m, n, k, s in [(4096, 4096, 4096, 0.0002), (1024, 512, 256, 0.001), (8192, 8192, 8192, 1.5),
                                (1000, 3, 77, 2.5e-6)]]
    return grade("matmul TFLOP/s", achieved_tflops, cases, rtol=1e-6, mistakes=TFLOPS_MISTAKES, reference=reference_tflops,
                 hint="TFLOP/s = FLOPs / seconds / 1e12, with 2·m·n·k FLOPs")


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
LEARNER_ANSWERS = ("mlp_forward_flops", "mlp_train_flops", "achieved_tflops")  # the learner's functions, by name
REFERENCES = {"mlp_forward_flops": reference_forward, "mlp_train_flops": reference_train_step,
              "achieved_tflops": reference_tflops}
def _forbidden() -> tuple:
    """What the grader's worker disarms: the references above, and torch's own FLOP counter (its
    FlopCounterMode and per-op formulas count the answer for you)."""
    import torch.utils.flop_counter as flop_counter

    return (*_FORBIDDEN, flop_counter)


FORBIDDEN = _forbidden()


def grading_inputs(rng) -> dict[str, list[dict]]:
    """Inputs drawn per learner by the grader (none of them in the lab)."""
    from perflab.grading.checks import draw_int

    dims = [dict(batch=draw_int(rng, 1, 512), d_in=draw_int(rng, 1, 8192), d_hidden=draw_int(rng, 1, 8192),
                 d_out=draw_int(rng, 1, 4096)) for _ in range(6)]
    rates = [dict(m=draw_int(rng, 1, 16384), n=draw_int(rng, 1, 16384), k=draw_int(rng, 1, 16384),
                  seconds=rng.uniform(1e-6, 3.0)) for _ in range(4)]
    return {"mlp_forward_flops": dims, "mlp_train_flops": dims, "achieved_tflops": rates}


def judge(answers, rng) -> None:
    """The lab's checks on the learner's functions, then the grading inputs against the references."""
    from perflab.grading.checks import hidden

    drawn = grading_inputs(rng)
    for name, check in (("mlp_forward_flops", check_forward), ("mlp_train_flops", check_train_step),
                        ("achieved_tflops", check_tflops)):
        if check(answers[name]):
            hidden(f"{name} on the grading inputs", answers[name], REFERENCES[name], drawn[name], rtol=1e-6)
