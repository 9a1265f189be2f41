"""What fp8 buys in speed: bf16 against fp8 `torch._scaled_mm`, measured here, and predicted for a GPU.

**Measured** (`measure`): square GEMMs m = n = k in bf16 (`a @ b`) and in fp8 (`torch._scaled_mm` on
E4M3 inputs with one fp32 scale each, a bf16 output), each checked against an fp32 product of the same
inputs before it is timed (`perflab.core.timing.bench`, which records the machine's quietness). A
CPU has no fp8 units: torch's CPU `_scaled_mm` is a slow reference loop (a 1024³ product took 41 s
against 18 ms in bf16 on the course's 2-core machine), so CPU sizes stay tiny.

**Predicted** (`predict`): the roofline on a GPU of perflab's hardware table, which gives the dense
peak per dtype and the memory bandwidth, each with its datasheet. A GEMM takes max(2mnk ÷ peak,
bytes ÷ bandwidth). fp8 with dynamic tensorwise scaling (torchao's default recipe, unfused) adds four
passes over the bf16 inputs, each at the memory bandwidth:

1. amax of A: read A in bf16 (2·m·k bytes); 2. amax of B: read B (2·k·n bytes);
3. cast A: read A in bf16, write it in fp8 (3·m·k bytes); 4. cast B (3·k·n bytes).

So fp8 time = GEMM at the fp8 peak + the passes, and the speedup over bf16 is below the datasheet's 2×
by the passes' share. The passes grow with m·k + k·n, the GEMM with m·n·k: small GEMMs (a small
model's) gain little or lose (`crossover`: the smallest square size where fp8 wins).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from perflab.core.errors import InputError, UnsupportedError
from perflab.core.hardware import AcceleratorSpec
from perflab.core.quietness import Quietness

BF16_BYTES, FP8_BYTES = 2, 1


# ---------------------------------------------------------------- predicted


@dataclass(frozen=True)
class Pass:
    """One memory-bound pass the fp8 GEMM needs around it."""

    name: str
    bytes: float
    seconds: float


@dataclass(frozen=True)
class Fp8Prediction:
    """bf16 against fp8 for one m×n×k GEMM on one accelerator, by the roofline."""

    m: int
    n: int
    k: int
    accelerator: str
    bf16_s: float
    fp8_gemm_s: float
    passes: tuple[Pass, ...]
    peak_bf16: float  # TFLOP/s the GEMMs run at: the datasheet's dense peaks unless `rates` said otherwise
    peak_fp8: float
    bandwidth_gbps: float
    basis: str = "datasheet peaks"  # what the GEMMs' rates are

    @property
    def cast_s(self) -> float:
        return sum(p.seconds for p in self.passes)

    @property
    def fp8_s(self) -> float:
        return self.fp8_gemm_s + self.cast_s

    @property
    def speedup(self) -> float:
        return self.bf16_s / self.fp8_s

    @property
    def rate_ratio(self) -> float:
        """fp8's rate over bf16's (the datasheet's: 2 on an H100)."""
        return self.peak_fp8 / self.peak_bf16

    def passes_table(self):
        import pandas as pd

        from perflab.core.readout import nbytes, seconds

        rows = [{"pass": p.name, "bytes": nbytes(p.bytes), "time at the memory bandwidth": seconds(p.seconds)}
                for p in self.passes]
        rows += [{"pass": "all four", "bytes": nbytes(sum(p.bytes for p in self.passes)), "time at the memory bandwidth":
                  seconds(self.cast_s)}]
        return pd.DataFrame(rows).set_index("pass")

    def text(self) -> str:
        from perflab.core.readout import num, seconds

        return (f"{self.m}×{self.n}×{self.k} on {self.accelerator}: bf16 {seconds(self.bf16_s)}; fp8 GEMM "
                f"{seconds(self.fp8_gemm_s)} + casts {seconds(self.cast_s)} = {seconds(self.fp8_s)}: "
                f"{num(self.speedup)}× faster (fp8's rate is {num(self.rate_ratio)}× bf16's, {self.basis})")


def gemm_seconds(m: int, n: int, k: int, tflops: float, bandwidth_gbps: float, in_bytes: int, out_bytes: int) -> float:
    """Roofline time of one GEMM: max(2mnk ÷ peak, (A + B + C bytes) ÷ bandwidth)."""
    flops = 2.0 * m * n * k
    moved = in_bytes * (m * k + k * n) + out_bytes * m * n
    return max(flops / (tflops * 1e12), moved / (bandwidth_gbps * 1e9))


def accelerator_spec(accelerator: str | AcceleratorSpec) -> AcceleratorSpec:
    from perflab.core.hardware import lookup

    spec = accelerator if isinstance(accelerator, AcceleratorSpec) else lookup(accelerator)
    if spec is None:
        raise InputError(f"unknown accelerator {accelerator!r}: use an id of perflab's hardware table, e.g. h100-sxm")
    if not (spec.peak("bf16") and spec.peak("fp8") and spec.memory_bandwidth_gbps):
        raise UnsupportedError(f"{spec.name} has no fp8 peak in perflab's table (fp8 Tensor Cores start with Ada and Hopper)")
    return spec


def predict(m: int, n: int, k: int, accelerator: str | AcceleratorSpec = "h100-sxm",
            rates: dict[str, float] | None = None) -> Fp8Prediction:
    """bf16 against fp8 (`_scaled_mm` with dynamic tensorwise scales) for m×n×k on `accelerator`.

    `rates`: TFLOP/s to run each dtype's GEMMs at instead of the datasheet's peaks (e.g. the fastest
    rates measured on that GPU)."""
    spec = accelerator_spec(accelerator)
    bw = float(spec.memory_bandwidth_gbps or 0)
    p16, p8 = float(spec.peak("bf16") or 0), float(spec.peak("fp8") or 0)
    if rates:
        p16, p8 = float(rates.get("bf16", p16)), float(rates.get("fp8", p8))
    bf16 = gemm_seconds(m, n, k, p16, bw, BF16_BYTES, BF16_BYTES)
    fp8 = gemm_seconds(m, n, k, p8, bw, FP8_BYTES, BF16_BYTES)
    a, b = m * k, k * n
    moved = [("amax of A: read A in bf16", BF16_BYTES * a), ("amax of B: read B in bf16", BF16_BYTES * b),
             ("cast A: read bf16, write fp8", (BF16_BYTES + FP8_BYTES) * a),
             ("cast B: read bf16, write fp8", (BF16_BYTES + FP8_BYTES) * b)]
    passes = tuple(Pass(name, float(nb), nb / (bw * 1e9)) for name, nb in moved)
    return Fp8Prediction(m, n, k, spec.name, bf16, fp8, passes, p16, p8, bw,
                         "given rates" if rates else "datasheet peaks")


def crossover(accelerator: str | AcceleratorSpec = "h100-sxm", step: int = 16, limit: int = 65536) -> int:
    """The smallest square size (a multiple of `step`) from which fp8 is predicted faster than bf16."""
    spec = accelerator_spec(accelerator)
    lo, hi = step, limit
    if predict(hi, hi, hi, spec).speedup <= 1:
        raise InputError(f"fp8 never wins below {limit} on {spec.name} by this model")
    while hi - lo > step:  # speedup grows with size: bisect on the multiples of `step`
        mid = (lo + hi) // 2 // step * step
        lo, hi = (mid, hi) if predict(mid, mid, mid, spec).speedup <= 1 else (lo, mid)
    return hi


@dataclass(frozen=True)
class PredictionTable:
    """Predictions for several named GEMM shapes on one accelerator."""

    rows: tuple[tuple[str, Fp8Prediction], ...]

    def table(self):
        import pandas as pd

        from perflab.core.readout import num, percent, seconds

        out = [{"GEMM": name, "m×n×k": f"{p.m}×{p.n}×{p.k}", "bf16": seconds(p.bf16_s), "fp8 GEMM": seconds(p.fp8_gemm_s),
                "casts": seconds(p.cast_s), "casts' share of fp8": percent(p.cast_s / p.fp8_s, 2),
                "fp8 speedup": f"{num(p.speedup)}×"} for name, p in self.rows]
        return pd.DataFrame(out).set_index("GEMM")


def model_gemm(cfg, tokens: int) -> tuple[int, int, int]:
    """(m, n, k) of a model's MLP up-projection for `tokens` tokens: tokens × d_ff × h."""
    return int(tokens), int(cfg.d_ff), int(cfg.hidden)


def predictions(shapes: Sequence[tuple[str, tuple[int, int, int]]], accelerator: str = "h100-sxm") -> PredictionTable:
    return PredictionTable(tuple((name, predict(*mnk, accelerator)) for name, mnk in shapes))


EXAMPLE_MODELS = (("tiny-gpt", 1024), ("gpt2-small", 8192), ("llama2-7b", 8192))  # preset, tokens per GEMM


def example_shapes() -> list[tuple[str, tuple[int, int, int]]]:
    """Square GEMMs and the MLP up-projection of three model presets (`EXAMPLE_MODELS`)."""
    from perflab.workload.models import preset

    out: list[tuple[str, tuple[int, int, int]]] = [(f"{n}³", (n, n, n)) for n in (1024, 4096, 8192)]
    out += [(f"{name} MLP up, {tokens} tokens", model_gemm(preset(name), tokens)) for name, tokens in EXAMPLE_MODELS]
    return out


def curve(accelerator: str = "h100-sxm", sizes: Sequence[int] = tuple(2**i for i in range(8, 16))) -> list[Fp8Prediction]:
    """Predictions for square sizes (256 to 32768 by default)."""
    return [predict(n, n, n, accelerator) for n in sizes]


# ---------------------------------------------------------------- measured


@dataclass(frozen=True)
class GemmTiming:
    """One square GEMM timed in bf16 and in fp8 on this device."""

    size: int
    bf16_s: float
    fp8_s: float
    bf16_spread: float
    fp8_spread: float
    quietness: Quietness  # both timings together

    @property
    def ratio(self) -> float:
        """fp8 time ÷ bf16 time (above 1: fp8 is slower)."""
        return self.fp8_s / self.bf16_s


@dataclass
class SpeedTable:
    """bf16 against fp8 `_scaled_mm` over sizes, measured on one device."""

    device: str
    kind: str  # 'cpu' or 'cuda'
    rows: list[GemmTiming] = field(default_factory=list)
    skipped: str | None = None  # why nothing was measured
    cpu_fp8: bool = False  # a CPU that reports fp8 matrix instructions (amx_fp8)

    @property
    def disturbed(self) -> list[GemmTiming]:
        return [r for r in self.rows if r.quietness.disturbed]

    def table(self):
        import pandas as pd

        from perflab.core.readout import num, percent, seconds

        out = [{"m = n = k": r.size, "bf16": seconds(r.bf16_s), "fp8 _scaled_mm": seconds(r.fp8_s),
                "fp8 time ÷ bf16 time": f"{num(r.ratio)}×", "spread (bf16, fp8)": f"{percent(r.bf16_spread, 2)}, "
                f"{percent(r.fp8_spread, 2)}", "machine": r.quietness.line()} for r in self.rows]
        return pd.DataFrame(out).set_index("m = n = k")

    def headline(self) -> float | None:
        """fp8 ÷ bf16 time at the largest size, or None when nothing was measured or the machine was busy."""
        if self.skipped or not self.rows or self.disturbed:
            return None
        return self.rows[-1].ratio

    def verdict(self) -> str:
        """What the measurement says, or why it says nothing (a busy machine, no fp8 here)."""
        from perflab.core.readout import num
        from perflab.core.verdicts import busy_text

        if self.skipped:
            return self.skipped
        if not self.rows:
            return "nothing measured"
        if self.disturbed:
            return busy_text("; ".join(f"{r.size}³: {r.quietness.cause}" for r in self.disturbed))
        lo, hi = min(r.ratio for r in self.rows), max(r.ratio for r in self.rows)
        sizes = ", ".join(f"{r.size}³" for r in self.rows)
        if self.kind != "cuda":
            units = ("this CPU has no fp8 matrix units (no amx_fp8 flag)" if not self.cpu_fp8 else
                     "this CPU reports fp8 matrix units (amx_fp8)")
            return (f"fp8 took {num(lo)}× to {num(hi)}× bf16's time at {sizes}: {units}. fp8 pays only on hardware "
                    "that multiplies it.")
        best = min(self.rows, key=lambda r: r.ratio)
        return (f"fp8 ran at {num(1 / best.ratio)}× bf16's speed at {best.size}³ (time ratios {num(lo)}× to "
                f"{num(hi)}× over {sizes})")


def fp8_reason(device) -> str | None:
    """Why `torch._scaled_mm` cannot run here, or None."""
    import torch

    dev = torch.device(device)
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"this torch ({torch.__version__}) has no torch._scaled_mm or float8 dtypes"
    if dev.type == "cpu":
        return None  # a reference kernel: slow, but it runs
    from perflab.core.dtypes import unsupported_reason

    return unsupported_reason("fp8", dev)


def _operands(n: int, device, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=g).to(device)
    b = torch.randn(n, n, generator=g).to(device)
    one = torch.ones((), device=device)
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.to(torch.float8_e4m3fn).t()  # _scaled_mm wants its second operand column-major
    return a.bfloat16(), b.bfloat16(), a8, b8, one


def measure(sizes: Sequence[int], device, *, warmup_ms: float = 0.0, rep_ms: float = 30.0, min_reps: int = 3,
            progress: bool = True) -> SpeedTable:
    """bf16 `a @ b` against fp8 `torch._scaled_mm` for each m = n = k in `sizes`, checked then timed."""
    import torch

    from perflab.core.device import cpu_facts, describe
    from perflab.core.quietness import of_bench, watch
    from perflab.core.timing import bench, check_close

    dev = torch.device(device)
    out = SpeedTable(describe(dev).name, dev.type, cpu_fp8=dev.type == "cpu" and "amx_fp8" in cpu_facts().flags)
    why = fp8_reason(dev)
    if why:
        out.skipped = f"fp8 not measured here: {why}"
        return out
    bar = _bar(len(sizes), progress)
    for i, n in enumerate(sizes):
        if n % 16:
            raise InputError(f"_scaled_mm needs sizes that are multiples of 16 (got {n})")
        a, b, a8, b8, one = _operands(n, dev, seed=i)
        def f8(a8=a8, b8=b8, one=one):
            return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one,  # pyright: ignore[reportPrivateImportUsage]
                                    out_dtype=torch.bfloat16)  # fp8 matmul has no public API yet

        check_close(f8().float(), a8.float() @ b8.float(), tol=1e-2, what=f"fp8 _scaled_mm {n}³")
        check_close((a @ b).float(), a.float() @ b.float(), tol=2e-2, what=f"bf16 matmul {n}³")
        with watch(dev) as w:  # a window long enough to judge, when a tiny GEMM's own is not
            t16 = bench(lambda a=a, b=b: a @ b, device=dev, warmup_ms=warmup_ms, rep_ms=rep_ms, min_reps=min_reps,
                        label=f"bf16 {n}³")
            t8 = bench(f8, device=dev, warmup_ms=warmup_ms, rep_ms=rep_ms, min_reps=min_reps, label=f"fp8 {n}³")
        out.rows.append(GemmTiming(n, t16.median_s, t8.median_s, t16.spread, t8.spread,
                                   Quietness.combine([of_bench(t16, w), of_bench(t8, w)])))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return out


def _bar(total: int, enabled: bool):
    if not enabled or total <= 1:
        return None
    try:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc="bf16 vs fp8 GEMMs", unit="size", leave=False)
    except ImportError:  # pragma: no cover
        return None
