"""MFU of a step whose GEMMs run in two formats: which peak it is divided by.

A step with fp8 linear layers still runs attention's products (and the output layer) in bf16. Its
model FLOPs can be divided two ways, both computed by `perflab.flops.mfu.utilization` (the course's
one division):

* **against the bf16 peak** (one basis for every FLOP, as if the step ran in bf16):
  MFU = Σ FLOPs ÷ (bf16 peak × step time);
* **each GEMM against its own dtype's peak** (the fp8 FLOPs at the fp8 peak, the rest at bf16's):
  MFU = (fp8 FLOPs ÷ fp8 peak + bf16 FLOPs ÷ bf16 peak) ÷ step time.

On an H100 the fp8 peak is twice bf16's, so the first credits fp8 work with twice the utilization
it has against what the chip can do with it: the two differ by the FLOPs-weighted peak over the bf16
peak, and the first can pass 100 % (a bound no step can beat), which `utilization` refuses to print.

The example step (`mixed_step`): one training step (forward and backward, 3× the forward's FLOPs) of a
model preset, its linear layers in fp8 (each of their three GEMMs with the casting passes of
`perflab.numerics.speed.predict`), attention's two products per layer and the output layer in bf16;
each GEMM at given rates (the lesson passes the fastest published H100 rates) or the datasheet's
peaks. Only GEMMs are timed: `at_share` gives the MFUs of a step whose GEMMs take a given share of it.

Uses perflab.flops's `mfu` (`Basis`, `utilization`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perflab.flops.mfu import Basis, Utilization, utilization
from perflab.numerics.speed import accelerator_spec, gemm_seconds, predict


@dataclass(frozen=True)
class MixedStep:
    """One step's GEMM FLOPs by dtype and the seconds they take, on one accelerator."""

    model: str
    tokens: int
    accelerator: str
    flops: dict[str, float]  # dtype -> model FLOPs (fwd + bwd)
    seconds: dict[str, float]  # dtype -> GEMM time (fp8's with its casts)
    cast_s: float
    bases: dict[str, Basis]  # dtype -> datasheet peak
    rates: str  # what the GEMMs' rates are

    @property
    def gemm_s(self) -> float:
        return sum(self.seconds.values())

    def conventions(self, share: float = 1.0) -> tuple[Utilization, Utilization]:
        """(against the bf16 peak, each dtype against its own) for a step whose GEMMs are `share` of it."""
        step_s = self.gemm_s / share
        total = sum(self.flops.values())
        one = utilization(step_s, {"bf16": total}, {"bf16": self.bases["bf16"]})
        own = utilization(step_s, self.flops, self.bases)
        return one, own

    def flops_table(self):
        import pandas as pd

        from perflab.core.readout import num, percent, seconds

        total = sum(self.flops.values())
        rows = [{"dtype": d, "FLOPs per step": num(f), "share of FLOPs": percent(f / total, 3),
                 "time of these GEMMs": seconds(self.seconds[d]), "datasheet peak": f"{num(self.bases[d].tflops)} TFLOP/s"}
                for d, f in self.flops.items()]
        return pd.DataFrame(rows).set_index("dtype")

    def table(self, shares: Sequence[float] = (1.0, 0.75, 0.5)):
        """MFU under both conventions, for steps whose GEMMs are each of `shares` of the step."""
        import pandas as pd

        from perflab.core.readout import num, percent, seconds

        rows = []
        for s in shares:
            one, own = self.conventions(s)
            rows.append({"GEMMs' share of the step": percent(s, 3), "step time": seconds(self.gemm_s / s),
                         "MFU against the bf16 peak": one.text(),
                         "MFU, each dtype against its own peak": own.text(),
                         "FLOPs-weighted peak": f"{num(own.effective_tflops)} TFLOP/s"})
        return pd.DataFrame(rows).set_index("GEMMs' share of the step")


def _basis(spec, dtype: str) -> Basis:
    return Basis(float(spec.peak(dtype) or 0), "spec peak", dtype, f"{spec.name}; {spec.sources.get('peak_tflops', '')}")


def linear_gemms(cfg) -> list[tuple[str, int, int]]:
    """(name, in_features, out_features) of one layer's linear layers."""
    h, d = cfg.hidden, cfg.d_head
    out = [("q", h, cfg.heads * d), ("k", h, cfg.n_kv * d), ("v", h, cfg.n_kv * d), ("o", cfg.heads * d, h),
           ("mlp up", h, cfg.d_ff), ("mlp down", cfg.d_ff, h)]
    if cfg.glu:
        out.append(("mlp gate", h, cfg.d_ff))
    return out


def mixed_step(cfg, tokens: int, seq: int, accelerator: str = "h100-sxm", rates: dict[str, float] | None = None,
               ) -> MixedStep:
    """The example step of the module docstring: `tokens` tokens in sequences of `seq`."""
    spec = accelerator_spec(accelerator)
    bw = float(spec.memory_bandwidth_gbps or 0)
    r16 = float((rates or {}).get("bf16", spec.peak("bf16") or 0))
    f8 = f16 = t8 = t16 = cast = 0.0
    for _name, fin, fout in linear_gemms(cfg):
        # forward y = x·Wᵀ (tokens × out × in), input gradient (tokens × in × out), weight gradient (out × in × tokens)
        for m, n, k in ((tokens, fout, fin), (tokens, fin, fout), (fout, fin, tokens)):
            p = predict(m, n, k, spec, rates)
            f8 += 2.0 * m * n * k
            t8 += p.fp8_s
            cast += p.cast_s
    # attention: S = Q·Kᵀ and O = P·V per head, dense (4·s·d FLOPs per token per head forward), ×3 for training
    seqs = max(1, tokens // seq)
    att_fwd = [(seq, seq, cfg.d_head), (seq, cfg.d_head, seq)]
    for m, n, k in att_fwd:
        g = 3 * seqs * cfg.heads
        f16 += g * 2.0 * m * n * k
        t16 += g * gemm_seconds(m, n, k, r16, bw, 2, 2)
    f8, t8, cast = f8 * cfg.layers, t8 * cfg.layers, cast * cfg.layers
    f16, t16 = f16 * cfg.layers, t16 * cfg.layers
    # the output layer (tokens × V × h), three GEMMs, stays bf16
    for m, n, k in ((tokens, cfg.vocab, cfg.hidden), (tokens, cfg.hidden, cfg.vocab), (cfg.vocab, cfg.hidden, tokens)):
        f16 += 2.0 * m * n * k
        t16 += gemm_seconds(m, n, k, r16, bw, 2, 2)
    return MixedStep(cfg.name, int(tokens), spec.name, {"fp8": f8, "bf16": f16}, {"fp8": t8, "bf16": t16}, cast,
                     {"fp8": _basis(spec, "fp8"), "bf16": _basis(spec, "bf16")},
                     "given rates" if rates else "datasheet peaks")


def published_rates(rows: Sequence[dict]) -> dict[str, float]:
    """{dtype: TFLOP/s} from published MAMF rows (perflab.course.reference.published_mamf's records)."""
    return {str(r["dtype"]): float(r["tflops"]) for r in rows if r}


def rates_text(rows: Sequence[dict]) -> str:
    """Where the rates come from, in one line: each dtype's TFLOP/s, its best shape, and the table's source."""
    got = [r for r in rows if r]
    if not got:
        return "no published rates: the GEMMs run at the datasheet's peaks"
    each = "; ".join(f"{r['dtype']} {float(r['tflops']):,g} TFLOP/s ({r['accelerator']}, best shape {r['best_shape']})"
                     for r in got)  # as published, every digit and no more
    return f"GEMM rates, the fastest published: {each}. Source: {got[0]['source']}"
