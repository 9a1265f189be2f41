"""The batch arithmetic of a run (lesson 03): MBS, GAS, DP = GPUs/(TP·PP) and GBS = MBS·DP·GAS.

    >>> batch_plan(1024, tp=8, pp=8, mbs=1, gbs=1024, seq=4096).text()
    'DP = GPUs/(TP·PP) = 1024/(8·8) = 16; GBS = MBS·DP·GAS = 1·16·64 = 1024; 4,194,304 tokens per ...'

The micro-batch (MBS) is what one forward pass sees, the global batch (GBS) what one optimizer step sees;
activation memory follows MBS, not GBS. `perflab.memory.estimate` re-exports every name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON
from perflab.core.validate import positive_int


@dataclass(frozen=True)
class BatchPlan:
    """MBS, GBS = MBS·DP·GAS and DP = GPUs/(TP·PP) (the ML-engineering convention)."""

    gpus: int
    tp: int
    pp: int
    dp: int
    mbs: int
    gas: int
    gbs: int
    seq: int | None = None

    @property
    def tokens_per_step(self) -> int | None:
        return self.gbs * self.seq if self.seq else None

    def as_dict(self) -> JSON:
        return {"gpus": self.gpus, "tp": self.tp, "pp": self.pp, "dp": self.dp, "mbs": self.mbs, "gas": self.gas,
                "gbs": self.gbs, "seq": self.seq, "tokens_per_step": self.tokens_per_step}

    def text(self) -> str:
        t = (f"DP = GPUs/(TP·PP) = {self.gpus}/({self.tp}·{self.pp}) = {self.dp}; "
             f"GBS = MBS·DP·GAS = {self.mbs}·{self.dp}·{self.gas} = {self.gbs}")
        if self.seq:
            t += f"; {self.tokens_per_step:,} tokens per optimizer step at seq {self.seq}"
        return t


def batch_plan(gpus: int, *, tp: int = 1, pp: int = 1, mbs: int = 1, gas: int = 1, gbs: int | None = None,
               seq: int | None = None) -> BatchPlan:
    """The batch arithmetic of a run. Give `gas`, or a target `gbs` to solve for GAS."""
    gpus, tp, pp, mbs = (positive_int(n, v) for n, v in (("gpus", gpus), ("tp", tp), ("pp", pp), ("mbs", mbs)))
    if gpus % (tp * pp):
        raise InputError(f"{gpus} GPUs cannot hold whole model replicas of TP·PP = {tp}·{pp} = {tp * pp} GPUs: "
                         f"choose gpus as a multiple of {tp * pp}")
    dp = gpus // (tp * pp)
    if gbs is not None:
        gbs = positive_int("gbs", gbs)
        if gbs % (mbs * dp):
            raise InputError(f"GBS {gbs} is not a multiple of MBS·DP = {mbs}·{dp} = {mbs * dp}: "
                             f"try {max(1, gbs // (mbs * dp)) * mbs * dp} or {(gbs // (mbs * dp) + 1) * mbs * dp}")
        gas = gbs // (mbs * dp)
    gas = positive_int("gas", gas)
    return BatchPlan(gpus, tp, pp, dp, mbs, gas, mbs * dp * gas, positive_int("seq", seq) if seq else None)


@dataclass(frozen=True)
class BatchPlans:
    """Several runs' batch arithmetic side by side."""

    plans: Sequence[BatchPlan]

    def table(self):
        """One row per plan: GPUs, TP, PP, DP, MBS, GAS, GBS, and the sequence and tokens per optimizer step
        where a sequence length was given ('–' otherwise)."""
        import pandas as pd

        return pd.DataFrame([{"GPUs": p.gpus, "TP": p.tp, "PP": p.pp, "DP": p.dp, "MBS": p.mbs, "GAS": p.gas,
                              "GBS": p.gbs, "sequence s": f"{p.seq:,}" if p.seq else "–",
                              "tokens per step": f"{p.tokens_per_step:,}" if p.tokens_per_step else "–"}
                             for p in self.plans])
