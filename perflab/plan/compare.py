"""The plan beside published runs nobody here chose: how far it lands, row by row.

* **Training runs** (`runs`, `compare`): perflab/plan/data/published_runs.json holds torchtitan's H100 and
  A100 tables and llm-foundry's MPT rows, each with its file, commit and row, and the layout the plan
  gives it (GPU, GPUs, FSDP, tensor and sequence parallelism, micro-batch, recompute). A run that
  recomputed selectively (torchtitan's op-level policy) is planned with no recompute and with full
  recompute, which bracket it. Each row says what the plan does not reproduce (`unlike`: fused kernels,
  torch.compile, a power-capped GPU whose exact peak nobody knows, the allocator's reserved memory).
* **Model states** (`zero_states`): ZeRO's Figure 1 (Rajbhandari et al., arXiv:1910.02054): a 7.5B model on
  64 GPUs with Adam, 2 + 2 + K bytes per parameter (K = 12): 120 GB with data parallelism, 1.9 GB with
  every state partitioned (stage 3). The plan's parameters, gradients and optimizer state at the
  optimizer step, for a model of 7.5B parameters, with DDP and with FSDP2 (whose bytes differ in kind,
  fp32 weights 4 + fp32 gradients 4 + AdamW 8, and not in total).
* **Activations per layer** (`activations_per_layer`): Korthikanti et al. (arXiv:2205.05198, §4.1, Table 2)
  count a GPT layer's saved activations, 16-bit with 1-byte dropout masks, as sbh(34 + 5as/h) bytes; the
  plan's per-layer share is its peak's growth from two blocks to three, for a GPT-2 layer with eager
  attention and dropout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from perflab.core.jsonable import JSON

DATA = Path(__file__).with_name("data") / "published_runs.json"
GIB = 2**30


@lru_cache(maxsize=1)
def data() -> JSON:
    """The data file as it is."""
    return json.loads(DATA.read_text())


def runs(ids: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The published runs (or those of `ids`), each with its source and model filled in."""
    d = data()
    out = []
    for r in d["runs"]:
        if ids is not None and r["id"] not in ids:
            continue
        out.append(dict(r, source=dict(d["sources"][r["source"]], key=r["source"]), model_spec=d["models"][r["model"]]))
    return out


def target(run: dict[str, Any]):
    """A zero-argument builder of the run's model and one micro-batch, for `plan` (one object per run, so its
    plans share their traces)."""
    return _builder(run["model"], run["micro_batch"], run["seq"])


@cache
def _builder(model: str, micro_batch: int, seq: int):
    spec = data()["models"][model]
    if spec["type"] == "mpt":
        from perflab.plan.published import mpt_overrides

        kind, over = "gpt2", dict(mpt_overrides(spec["shape"], seq), bos_token_id=0, eos_token_id=0)
    else:
        kind, over = spec["type"], dict(spec["config"])

    def build():
        from perflab.plan.target import from_hf

        return from_hf(kind, over, batch=micro_batch, seq=seq)

    return build


@dataclass(frozen=True)
class Comparison:
    """One published run beside the plan of it: tokens/s per GPU (the plan's for each recompute it was
    planned with), and memory where the source gives it."""

    run: str
    source: str  # the file and row
    model: str
    layout: str  # in words
    published_ac: str
    published_tokens_per_s_per_gpu: float
    plan_tokens_per_s_per_gpu: dict[str, float]  # recompute -> the plan's tokens/s per GPU
    plan_peak_bytes: dict[str, int]  # recompute -> the plan's per-GPU peak
    plan_mfu: dict[str, float | None]  # recompute -> MFU, attention counted whole
    published_memory_bytes: float | None = None  # what the source printed (torchtitan: peak reserved, GiB)
    fitted_bytes: float | None = None  # the GPU the run fitted in, where no memory is printed
    in_project: bool = False
    unlike: list[str] = field(default_factory=list)

    @property
    def ratios(self) -> dict[str, float]:
        """The plan's tokens/s over the published, per recompute planned."""
        return {ac: v / self.published_tokens_per_s_per_gpu for ac, v in self.plan_tokens_per_s_per_gpu.items()}

    @property
    def brackets(self) -> bool | None:
        """For a run planned with no and with full recompute: whether its throughput lies between the two."""
        r = self.ratios
        if set(r) != {"none", "full"}:
            return None
        return r["full"] <= 1 <= r["none"]


def compare(ids: tuple[str, ...] | None = None) -> list[Comparison]:
    """Plan every published run (or those of `ids`) as its data row lays it out."""
    from perflab.plan.run import plan

    out = []
    for r in runs(ids):
        build = target(r)
        tps, peaks, mfus = {}, {}, {}
        for ac in r["plan_ac"]:
            p = plan(build, gpu=r["gpu"], gpus=r["gpus"], tp=r["tp"], sp=r["sp"], fsdp=r["fsdp"], ac=ac, suggest=False)
            tps[ac] = (p.tokens_per_s or 0.0) / r["gpus"]
            peaks[ac] = p.peak_bytes
            mfus[ac] = p.mfu
        layout = (f"{r['gpus']} × {r['gpu']}, " + ("FSDP" if r["fsdp"] else "DDP")
                  + (f" + TP {r['tp']}" + (" with SP" if r["sp"] else "") if r["tp"] > 1 else "")
                  + f", {r['micro_batch']} × {r['seq']} tokens per GPU")
        mem = r.get("memory_gib")
        out.append(Comparison(r["id"], f"{r['source']['repo']} {r['source']['path']}, {r['where']}", r["model"], layout,
                              r["published_ac"], float(r["tokens_per_s_per_gpu"]), tps, peaks, mfus,
                              mem * GIB if mem else None, r.get("fitted_gb", 0) * 1e9 or None, r["in_project"],
                              list(r.get("unlike", []))))
    return out


@dataclass(frozen=True)
class Comparisons:
    """The rows of `compare`, as one table."""

    rows: list[Comparison]

    def table(self):
        import pandas as pd

        from perflab.core.readout import num

        def plan_text(c: Comparison) -> str:
            return " / ".join(f"{num(v)} ({ac})" for ac, v in c.plan_tokens_per_s_per_gpu.items())

        def ratio_text(c: Comparison) -> str:
            return " / ".join(f"{v:.2f}×" for v in c.ratios.values())

        def memory_text(c: Comparison) -> str:
            peaks = " / ".join(f"{v / GIB:.1f}" for v in c.plan_peak_bytes.values())
            if c.published_memory_bytes:
                return f"{peaks} GiB (published {c.published_memory_bytes / GIB:.1f} GiB reserved)"
            return f"{peaks} GiB (fitted {c.fitted_bytes / 1e9:.0f} GB)" if c.fitted_bytes else f"{peaks} GiB"

        rows = [{"run": c.run, "layout": c.layout, "recompute (published)": c.published_ac,
                 "published tokens/s/GPU": num(c.published_tokens_per_s_per_gpu),
                 "plan tokens/s/GPU (recompute)": plan_text(c), "plan ÷ published": ratio_text(c),
                 "plan peak per GPU": memory_text(c)} for c in self.rows]
        return pd.DataFrame(rows).set_index("run")


# ----------------------------------------------------------------------------- ranks that really ran
@dataclass(frozen=True)
class RankCheck:
    """The plan of lesson 12's steps beside each gloo rank that ran them with real tensors (torch's tracker on
    every rank): the peak per rank."""

    rows: list[tuple[str, int, int, int]]  # (layout, rank, measured peak bytes, planned peak bytes)

    def table(self):
        import pandas as pd

        from perflab.core.readout import nbytes, percent

        return pd.DataFrame([{"layout": k, "rank": r, "measured peak": nbytes(m), "planned peak": nbytes(p),
                              "planned − measured": f"{p - m:+,} B ({percent((p - m) / m)})"}
                             for k, r, m, p in self.rows]).set_index(["layout", "rank"])

    @property
    def worst(self) -> float:
        """The largest |planned − measured| ÷ measured over the ranks."""
        return max(abs(p - m) / m for _, _, m, p in self.rows)


def rank_check(kinds: tuple[str, ...] = ("fsdp", "tp"), model: str = "tiny-gpt", batch: int = 2, seq: int = 32) -> RankCheck:
    """Run lesson 12's FSDP2 and tensor-parallel steps on two gloo ranks (`perflab.shard.run.measure`) and
    plan the same steps on a fake group of two; their peaks, rank by rank."""
    from perflab.plan.run import plan, preset_target
    from perflab.shard.run import measure

    live = measure(list(kinds), 2, preset=model, batch=batch, seq=seq)
    build = preset_target(model, batch, seq)
    layouts = {"fsdp": {"fsdp": True}, "tp": {"tp": 2}}
    rows = []
    for kind in kinds:
        p = plan(build, gpus=2, dtype="fp32", suggest=False, **layouts[kind])
        rows += [("FSDP2" if kind == "fsdp" else "tensor parallel", int(r["rank"]), int(r["peak_bytes"]), p.peak_bytes)
                 for r in live[kind].rows]
    return RankCheck(rows)


# ----------------------------------------------------------------------------- ZeRO's Figure 1
ZERO = {"source": "Rajbhandari et al., ZeRO: Memory Optimizations Toward Training Trillion Parameter Models, "
                  "arXiv:1910.02054, Figure 1 (Ψ = 7.5B, Nd = 64, K = 12)",
        "params": 7.5e9, "gpus": 64, "baseline_gb": 120.0, "stage3_gb": 1.9}


def zero_model(params: float = 7.5e9) -> dict[str, Any]:
    """A GPT-2 config of about `params` parameters (width 4096, the depth that comes nearest)."""
    h, vocab, seq = 4096, 50304, 2048
    per_layer = 12 * h * h + 13 * h  # attention 4h², MLP 8h², biases and norms
    layers = round((params - (vocab + seq) * h) / per_layer)
    return {"n_embd": h, "n_layer": layers, "n_head": 32, "n_positions": seq, "vocab_size": vocab, "n_inner": 4 * h,
            "activation_function": "gelu", "bos_token_id": 0, "eos_token_id": 0}


@dataclass(frozen=True)
class ZeroStates:
    """The plan's model states per GPU at the optimizer step beside ZeRO's Figure 1."""

    params: int
    ddp_bytes: int
    fsdp_bytes: int
    gpus: int

    @property
    def ddp_ratio(self) -> float:
        """The plan's DDP model states over ZeRO's (2 + 2 + 12) Ψ for this model's Ψ."""
        return self.ddp_bytes / (16 * self.params)

    @property
    def fsdp_ratio(self) -> float:
        """The plan's FSDP2 model states over ZeRO stage 3's (2 + 2 + 12) Ψ / Nd."""
        return self.fsdp_bytes / (16 * self.params / self.gpus)


def zero_states(gpus: int = 64, seq: int = 512) -> ZeroStates:
    """Plan a 7.5B-parameter model's step with DDP and with FSDP2 on `gpus` GPUs; its model states at the step."""
    from perflab.plan.run import plan

    build = _zero_builder(seq)
    got = {}
    for fsdp in (False, True):
        p = plan(build, gpus=gpus, fsdp=fsdp, suggest=False)
        st = p.phases["optimizer"]
        got[fsdp] = st["parameters"] + st["gradients"] + st["optimizer state"]
    return ZeroStates(p.params_total, got[False], got[True], gpus)


@cache
def _zero_builder(seq: int):
    over = zero_model()

    def build():
        from perflab.plan.target import from_hf

        return from_hf("gpt2", over, batch=1, seq=seq)

    return build


# ----------------------------------------------------------------------------- Korthikanti et al.'s activations
KORTHIKANTI = "Korthikanti et al., Reducing Activation Recomputation in Large Transformer Models, arXiv:2205.05198, §4.1 and Table 2"


@dataclass(frozen=True)
class LayerActivations:
    """One GPT layer's saved activations: the plan's beside sbh(34 + 5as/h) bytes."""

    s: int
    b: int
    h: int
    a: int
    planned_bytes: int

    @property
    def korthikanti_bytes(self) -> float:
        return self.s * self.b * self.h * (34 + 5 * self.a * self.s / self.h)

    @property
    def ratio(self) -> float:
        return self.planned_bytes / self.korthikanti_bytes


def activations_per_layer(h: int = 512, a: int = 8, s: int = 512, b: int = 1, dropout: float = 0.1) -> LayerActivations:
    """The plan's saved activations per GPT-2 layer (eager attention, dropout `dropout`, bf16 under FSDP2's
    mixed precision on one GPU, no recompute): the growth of the peak's activations from two blocks to three."""
    from perflab.plan.cost import cluster
    from perflab.plan.step import Layout, run_step

    over = {"n_embd": h, "n_layer": 4, "n_head": a, "n_positions": s, "vocab_size": 512, "n_inner": 4 * h,
            "activation_function": "gelu", "attn_pdrop": dropout, "resid_pdrop": dropout, "embd_pdrop": dropout,
            "attn_implementation": "eager", "bos_token_id": 0, "eos_token_id": 0}

    def build():
        from perflab.plan.target import from_hf

        return from_hf("gpt2", over, batch=b, seq=s)

    c, lay = cluster("h100"), Layout(1, fsdp=True)
    two, three = (run_step(build, lay, c, None, d) for d in (2, 3))
    grown = three.phase_kinds["step"]["activation"] - two.phase_kinds["step"]["activation"]
    return LayerActivations(s, b, h, a, grown)
