"""Where fp8 would pay in the learner's step: each GEMM the step ran, predicted in bf16 and in fp8 on a GPU.

The step's op table (`perflab.audit.ops.OpStats`) holds every 2-D product it ran (`mm`, `addmm`: a linear
layer's forward and its two backward GEMMs) by shape (m, n, k) with its calls per step. For a GPU of
perflab's hardware table with an fp8 peak, each shape is predicted as lesson 16 predicts one GEMM
(`perflab.numerics.speed.predict`): bf16 at the bf16 dense peak, fp8 at the fp8 dense peak plus the
amax and cast passes of both inputs at the memory bandwidth (dynamic tensorwise scaling, unfused), each
GEMM at max(FLOPs ÷ peak, bytes ÷ bandwidth). A GEMM pays in fp8 when its fp8 time, casts included, is
below its bf16 time.

The step's matmuls in all: every GEMM in bf16, against fp8 for the GEMMs where it wins and bf16 for the
rest. The matmul-class FLOPs the op table holds no 2-D shape for (attention's products, convolutions)
stay in bf16 in both, counted at the bf16 peak: their compute bound, a lower bound on their time, so the
step's gain is an upper bound. Every figure is a roofline bound in any case: real kernels reach neither
peak.

Which GPU (`choose_gpu`): the one named (`--gpu`), else the device the audit ran on when it is a GPU the
table knows; a CPU has no fp8 units, so with no GPU named nothing is predicted, and the report says why.
`perflab.audit.run.run_audit` fills the audit's `fp8` from its counted step; `perflab.audit.run.fp8_step`
runs that one counted step alone (lesson 16).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perflab.core.errors import InputError, UnsupportedError
from perflab.core.hardware import AcceleratorSpec, lookup
from perflab.core.jsonable import JSON, fields_json
from perflab.core.readout import num, percent, seconds
from perflab.numerics.speed import Fp8Prediction, accelerator_spec, predict

if TYPE_CHECKING:
    from perflab.core.device import DeviceInfo

HOW = ("the roofline, with fp8's amax and cast passes at the memory bandwidth (dynamic tensorwise scaling, "
       "unfused: perflab.numerics.speed, lesson 16)")


def fp8_gpu_ids() -> list[str]:
    """The ids of the hardware table's GPUs that have a bf16 and an fp8 dense peak and a memory bandwidth."""
    from perflab.core.hardware import accelerators

    return [a.id for a in accelerators() if a.peak("bf16") and a.peak("fp8") and a.memory_bandwidth_gbps]


def gpu_spec(gpu: str | AcceleratorSpec) -> AcceleratorSpec:
    """The record of the GPU named by `--gpu` (an id of perflab's hardware table, or the name torch
    reports); InputError, naming the ids that have an fp8 peak, for one the table does not know."""
    if isinstance(gpu, AcceleratorSpec):
        return gpu
    spec = lookup(str(gpu))
    if spec is None:
        raise InputError(f"--gpu {gpu!r} is not in perflab's hardware table: use one of {', '.join(fp8_gpu_ids())}")
    return spec


@dataclass(frozen=True)
class Fp8Basis:
    """What the predictions stand on: one GPU's dense peaks and memory bandwidth, and their datasheets."""

    gpu_id: str
    gpu: str
    bf16_tflops: float
    fp8_tflops: float
    bandwidth_gbps: float
    peaks_source: str
    bandwidth_source: str

    @classmethod
    def of(cls, spec: AcceleratorSpec) -> Fp8Basis:
        return cls(spec.id, spec.name, float(spec.peak("bf16") or 0), float(spec.peak("fp8") or 0),
                   float(spec.memory_bandwidth_gbps or 0), spec.sources.get("peak_tflops", "datasheet"),
                   spec.sources.get("memory", "datasheet"))

    def text(self) -> str:
        return (f"{self.gpu}'s dense peaks, bf16 {num(self.bf16_tflops)} and fp8 {num(self.fp8_tflops)} TFLOP/s "
                f"({cite(self.peaks_source)}), and memory bandwidth {num(self.bandwidth_gbps)} GB/s "
                f"({cite(self.bandwidth_source)}); {HOW}")


def cite(source: str) -> str:
    """A datasheet citation up to its address (the table's sources go on to quote the figures)."""
    head, sep, rest = source.partition("https://")
    return head + sep + rest.split(",")[0].split(" ")[0].rstrip(":;.") if sep else source


@dataclass(frozen=True)
class GemmGain:
    """One GEMM shape of the step: m×n×k, its calls per step, its share of the step's matmul-class FLOPs,
    and its prediction for one call (None: no GPU to predict for)."""

    m: int
    n: int
    k: int
    calls: int  # per step
    share: float  # of the step's matmul-class FLOPs (the counter's, recompute included)
    prediction: Fp8Prediction | None = None

    JSON_SKIP = ("prediction",)
    JSON_EXTRA = ("flops", "bf16_s", "fp8_s", "cast_s", "speedup", "fp8_wins")

    @property
    def flops(self) -> int:
        """FLOPs per step: 2·m·n·k per call."""
        return 2 * self.m * self.n * self.k * self.calls

    @property
    def bf16_s(self) -> float | None:
        """Predicted seconds per step in bf16 (all its calls)."""
        return None if self.prediction is None else self.calls * self.prediction.bf16_s

    @property
    def fp8_s(self) -> float | None:
        """Predicted seconds per step in fp8, its amax and cast passes included."""
        return None if self.prediction is None else self.calls * self.prediction.fp8_s

    @property
    def cast_s(self) -> float | None:
        return None if self.prediction is None else self.calls * self.prediction.cast_s

    @property
    def speedup(self) -> float | None:
        """bf16 time ÷ fp8 time (above 1: fp8 pays)."""
        return None if self.prediction is None else self.prediction.speedup

    @property
    def fp8_wins(self) -> bool | None:
        return None if self.prediction is None else self.prediction.speedup > 1

    @property
    def saved_s(self) -> float:
        """Seconds per step fp8 saves on this shape (0 where it loses or nothing is predicted)."""
        if self.bf16_s is None or self.fp8_s is None:
            return 0.0
        return max(self.bf16_s - self.fp8_s, 0.0)

    @property
    def shape(self) -> str:
        return f"{self.m}×{self.n}×{self.k}"


@dataclass(frozen=True)
class Fp8Gains:
    """The step's GEMMs on one GPU, bf16 against fp8 (`gains`); `basis` None when nothing is predicted,
    `note` saying which GPU and why (or why none)."""

    basis: Fp8Basis | None
    note: str
    gemms: tuple[GemmGain, ...]  # by FLOPs per step, largest first
    matmul_flops: int  # the step's matmul-class FLOPs (perflab's counter, hardware FLOPs)

    JSON_EXTRA = ("other_flops", "bf16_s", "fp8_s", "speedup")

    @property
    def winners(self) -> list[GemmGain]:
        """The GEMMs predicted faster in fp8, the most seconds saved first."""
        return sorted((g for g in self.gemms if g.fp8_wins), key=lambda g: -g.saved_s)

    @property
    def losers(self) -> list[GemmGain]:
        return [g for g in self.gemms if g.fp8_wins is False]

    @property
    def other_flops(self) -> int:
        """Matmul-class FLOPs with no 2-D GEMM shape in the op table (attention's products, convolutions)."""
        return max(self.matmul_flops - sum(g.flops for g in self.gemms), 0)

    @property
    def other_s(self) -> float | None:
        """Their seconds at the bf16 peak (a lower bound: their compute bound)."""
        return None if self.basis is None else self.other_flops / (self.basis.bf16_tflops * 1e12)

    @property
    def bf16_s(self) -> float | None:
        """The step's matmuls in bf16: every GEMM, and the other matmul FLOPs at the bf16 peak."""
        if self.basis is None or self.other_s is None:
            return None
        return sum(g.bf16_s or 0.0 for g in self.gemms) + self.other_s

    @property
    def fp8_s(self) -> float | None:
        """The step's matmuls with fp8 where it wins and bf16 elsewhere."""
        if self.bf16_s is None:
            return None
        return self.bf16_s - sum(g.saved_s for g in self.gemms)

    @property
    def speedup(self) -> float | None:
        return None if not self.bf16_s or not self.fp8_s else self.bf16_s / self.fp8_s

    def to_json(self) -> JSON:
        """Its fields (the GEMMs without their `Fp8Prediction`, with their figures) and the step's totals."""
        return fields_json(self)

    def count_line(self) -> str:
        """How many GEMM shapes pay in fp8, and their share of the step's matmul FLOPs."""
        win, n = self.winners, len(self.gemms)
        if not win:
            return f"none of the step's {n} GEMM shape(s) is predicted faster in fp8"
        return (f"{len(win)} of {n} GEMM shapes predicted faster in fp8, {percent(sum(x.share for x in win))} of the "
                "step's matmul FLOPs")

    def stay_line(self) -> str | None:
        """The GEMMs that stay in bf16, and the one closest to paying."""
        lose = self.losers
        if not lose:
            return None
        best = max(lose, key=lambda x: x.speedup or 0.0)
        return (f"stay in bf16 (fp8 predicted slower): {len(lose)} shape(s), {percent(sum(x.share for x in lose))} of "
                f"the matmul FLOPs; the closest, {best.shape}, at {num(best.speedup)}×")

    def all_line(self) -> str:
        """The step's matmuls in all, bf16 against fp8 where it wins."""
        rest = (f"; {percent(self.other_flops / self.matmul_flops)} of the matmul FLOPs have no 2-D GEMM shape "
                "(attention's products, convolutions): bf16 in both, at its peak" if self.other_flops else "")
        return (f"the step's matmuls in all: {seconds(self.bf16_s)} in bf16 → {seconds(self.fp8_s)} with fp8 where it "
                f"wins, {num(self.speedup)}×{rest}")

    def lines(self) -> list[str]:
        """The audit summary's lines (the first is its headline)."""
        g = self.gemms
        if self.basis is None:
            return [f"no prediction: {self.note}" + (f"; the step ran {len(g)} GEMM shape(s)" if g else "")]
        out = [f"where fp8 would pay on {self.basis.gpu} ({self.note})"]
        if not g:
            return [*out, "the step ran no 2-D GEMM (mm, addmm): nothing an fp8 linear layer would convert"]
        win = self.winners
        out.append(self.count_line() + (": m×n×k, calls per step, share of the matmul FLOPs, bf16 → fp8 per step "
                                        "(casts included), gain" if win else ""))
        out += [f"  {x.shape}, {x.calls}, {percent(x.share)}, {seconds(x.bf16_s)} → {seconds(x.fp8_s)}, "
                f"{num(x.speedup)}×" for x in win]
        out += [line for line in (self.stay_line(), self.all_line()) if line]
        out.append(f"basis: {self.basis.text()}")
        return out

    def text(self) -> str:
        return "\n".join(self.lines())

    def table(self):
        """Every GEMM shape of the step, with its prediction, as a table."""
        import pandas as pd

        rows = [{"m×n×k": x.shape, "calls per step": x.calls, "share of the matmul FLOPs": percent(x.share),
                 "bf16 per step": seconds(x.bf16_s), "fp8 per step (casts included)": seconds(x.fp8_s),
                 "casts per step": seconds(x.cast_s), "fp8 gain": "–" if x.speedup is None else f"{num(x.speedup)}×",
                 "verdict": {True: "fp8 pays", False: "keep bf16", None: "–"}[x.fp8_wins]} for x in self.gemms]
        return pd.DataFrame(rows).set_index("m×n×k")


def choose_gpu(gpu: str | AcceleratorSpec | None, device: DeviceInfo) -> tuple[AcceleratorSpec | None, str]:
    """(the GPU to predict for, or None; a note saying which and why, or why none). `gpu` is the GPU
    named (`--gpu`), `device` the device the audit ran on (`perflab.core.device.describe`)."""
    here = device.kind
    if gpu is not None:
        spec = gpu_spec(gpu)
        if here == "cpu":
            why = "the GPU named; the audit ran on a CPU, which has no fp8 units"
        elif lookup(device.name) is not None and lookup(device.name) == spec:
            why = "the GPU named, the one the audit ran on"
        else:
            why = f"the GPU named, not the {device.name} the audit ran on"
        return _with_fp8(spec, why)
    if here == "cpu":
        return None, ("the audit ran on a CPU, which has no fp8 units; name a GPU of perflab's hardware table "
                      "(--gpu, e.g. h100-sxm) to predict for it")
    spec = lookup(device.name)
    if spec is None:
        return None, (f"{device.name} is not in perflab's hardware table; name a GPU it knows (--gpu, e.g. h100-sxm) "
                      "to predict for it")
    return _with_fp8(spec, "the GPU the audit ran on")


def _with_fp8(spec: AcceleratorSpec, why: str) -> tuple[AcceleratorSpec | None, str]:
    try:
        return accelerator_spec(spec), why
    except UnsupportedError as e:  # a GPU without fp8 units: no GEMM pays, and the line says so
        return None, f"{e}; name one that has (--gpu, e.g. h100-sxm)"


def gains(gemm_calls: Mapping[tuple[int, int, int], int], matmul_flops: int, gpu: AcceleratorSpec | None,
          note: str) -> Fp8Gains:
    """The step's GEMMs (`gemm_calls`: (m, n, k) → calls per step, `perflab.audit.ops.OpStats.gemm_calls`)
    bf16 against fp8 on `gpu` (None: shapes only), each predicted by `perflab.numerics.speed.predict`;
    `matmul_flops` the step's matmul-class FLOPs, the shares' denominator."""
    spec = accelerator_spec(gpu) if gpu is not None else None
    # the counter's figure, or the GEMMs' own when it counted less (it counts every mm and addmm)
    total = max(int(matmul_flops), sum(2 * m * n * k * c for (m, n, k), c in gemm_calls.items()))
    rows = [GemmGain(m, n, k, int(c), 2 * m * n * k * c / max(total, 1), predict(m, n, k, spec) if spec else None)
            for (m, n, k), c in gemm_calls.items() if c > 0]
    rows.sort(key=lambda g: (-g.flops, g.m, g.n, g.k))
    return Fp8Gains(Fp8Basis.of(spec) if spec else None, note, tuple(rows), total)
