"""Numeric parity: train the same model from the same seed and data eagerly and compiled, and
compare the losses step by step.

Compiled code reorders and fuses floating-point work, so the results are not bit-equal; they
must agree within what the dtype can hold. fp32's machine epsilon is 2^-23 ≈ 1.2e-7; a reduction
of n terms in another order moves the result by ~√n·eps relatively, and a few optimizer steps
amplify that, so for fp32 we allow a relative difference of 1e-4 (~1000·eps): far above
reordering noise, far below any real change (a bf16 cast, eps 2^-7, whose rounding errs by up to
2^-8 ≈ 3.9e-3, lands near 1e-3).
bf16 and fp16 get 2e-2 (a few eps of their own).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from perflab.core.errors import InputError
from perflab.core.validate import positive_int
from perflab.workload.optim import make_optimizer
from perflab.workload.train import StepRunner

TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-2}


def tolerance(dtype: torch.dtype) -> float:
    """Relative loss tolerance for `dtype` (see the module's docstring for why)."""
    return TOLERANCE.get(dtype, 1e-4)


@dataclass
class Parity:
    eager: list[float]
    compiled: list[float]
    abs_diff: list[float]
    rel_diff: list[float]
    tol: float

    @property
    def max_abs(self) -> float:
        return max(self.abs_diff)

    @property
    def max_rel(self) -> float:
        return max(self.rel_diff)

    @property
    def ok(self) -> bool:
        return self.max_rel <= self.tol

    def frame(self):
        import pandas as pd

        return pd.DataFrame({"step": range(1, len(self.eager) + 1), "eager loss": self.eager,
                             "compiled loss": self.compiled, "abs diff": self.abs_diff, "rel diff": self.rel_diff})

    def as_dict(self) -> dict:
        return {"eager": self.eager, "compiled": self.compiled, "max_loss_abs_diff": self.max_abs,
                "max_loss_rel_diff": self.max_rel, "tolerance": self.tol, "ok": self.ok}


def train_losses(model: torch.nn.Module, batches, steps: int, *, compile_kw: dict | None = None, lr: float = 1e-3,
                 cast: torch.dtype | None = None) -> list[float]:
    """Losses of `steps` AdamW steps on `batches` (cycled), the course's step
    (`perflab.workload.train.StepRunner`). compile_kw: passed to torch.compile (None runs eagerly).
    cast: run the model in this dtype (the 'unsafe change' of the lesson)."""
    steps = positive_int("steps", steps)
    if cast is not None:
        model = model.to(cast)
    runner = StepRunner(model, make_optimizer(model.parameters(), lr=lr), compile_kw=compile_kw)
    losses = []
    for i in range(steps):
        runner.step([batches[i % len(batches)]])
        assert runner.last_loss is not None  # a step keeps its loss
        losses.append(runner.last_loss)
    return losses


def check(model: torch.nn.Module, batches, steps: int = 5, *, compile_kw: dict | None = None, unsafe: bool = False,
          tol: float | None = None, eager: list[float] | None = None) -> Parity:
    """Eager vs compiled losses of two copies of `model` over the same batches.

    unsafe=True runs the compiled copy in bf16, a change that looks like a free speed-up and is
    not numerically the same model: the check must flag it. eager: the eager losses of the same
    model, batches and steps from an earlier check (`Parity.eager`), so they are not trained again."""
    compile_kw = {} if compile_kw is None else compile_kw
    dtype = next(model.parameters()).dtype
    if eager is None:
        eager = train_losses(copy.deepcopy(model), batches, steps)
    elif len(eager) != steps:
        raise InputError(f"eager has {len(eager)} losses for {steps} steps")
    torch._dynamo.reset()
    comp = train_losses(copy.deepcopy(model), batches, steps, compile_kw=compile_kw,
                        cast=torch.bfloat16 if unsafe else None)
    torch._dynamo.reset()
    ad = [abs(a - b) for a, b in zip(eager, comp)]
    rd = [d / max(abs(a), 1e-12) for d, a in zip(ad, eager)]
    return Parity(eager, comp, ad, rd, tolerance(dtype) if tol is None else tol)


@dataclass
class CastCaught:
    """The lesson's two parity runs against one eager run: compiled as it is, and compiled with a bf16
    cast slipped in (which the check must flag)."""

    compiled: Parity
    cast: Parity

    @property
    def caught(self) -> bool:
        """Whether the check flagged the run with the bf16 cast."""
        return not self.cast.ok

    def table(self):
        """One row per run: the largest absolute and relative loss differences, the tolerance, ok or not."""
        import pandas as pd

        return pd.DataFrame([{"run": run, "max abs": f"{p.max_abs:.1e}", "max rel": f"{p.max_rel:.1e}",
                              "tolerance": f"{p.tol:.0e}", "ok": p.ok}
                             for run, p in (("compiled", self.compiled), ("compiled, bf16 cast", self.cast))])

    def steps_table(self):
        """Step by step: both runs' losses and their differences, and the cast run's relative difference."""
        table = self.compiled.frame()
        table["rel diff, bf16 cast"] = self.cast.rel_diff
        return table


def compare(model: torch.nn.Module, batches, steps: int = 5, *, backend: str = "inductor") -> CastCaught:
    """`check` of `model` compiled with `backend` ("inductor", or "eager": dynamo only), then of the same
    model compiled with a bf16 cast, against one eager run (trained once)."""
    kw = {} if backend == "inductor" else {"backend": backend}
    ok = check(model, batches, steps, compile_kw=kw)
    bad = check(model, batches, steps, compile_kw=kw, unsafe=True, eager=ok.eager)
    return CastCaught(ok, bad)
