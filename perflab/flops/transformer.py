"""FLOPs of a decoder transformer under every common convention, side by side, and an exact count.

Why so many conventions? Each paper that reports a utilization figure counts "the FLOPs of a
step" its own way, and two MFU numbers are comparable only when their FLOPs were counted the
same way. This module writes each convention down once, with its source, and pins each to a
published figure in tests/unit/flops/test_transformer.py.

Words (the course's): b micro-batch, s sequence length, h hidden size, a heads, L layers,
V vocabulary, N parameters, d head size, f MLP width. 1 multiply-add = 2 FLOPs.

The conventions (per iteration of b sequences of s tokens; divide by b·s for "per token"):

* ``megatron_recompute`` — Narayanan et al. 2021, eq. (3): 96·b·s·L·h²·(1 + s/(6h) + V/(16·L·h)).
  Assumes a GPT shape (4h MLP, a·d = h, multi-head attention) and *full activation
  recomputation* (every layer's forward runs twice), so it is a hardware-FLOPs count.
* ``megatron`` — Korthikanti et al. 2022, eq. (7): 72·b·s·L·h²·(1 + s/(6h) + V/(12·h·L)).
  The same shape without recomputation: model FLOPs.
* ``korthikanti_selective`` — Korthikanti et al. 2022, eq. (8): 72·b·s·L·h²·(1 + s/(3h) + V/(12·h·L)):
  hardware FLOPs with selective recomputation of the attention core.
* ``palm`` — Chowdhery et al. 2022 (PaLM), Appendix B: 6·N + 12·L·H·Q·T per token (H heads of
  size Q, context T). N counts the parameters that take part in matmuls, as nanoGPT's and
  torchtitan's MFU code compute it: everything except the position table and an *untied* input
  embedding (a tied embedding is the output layer's matrix, so it stays in).
* ``kaplan`` — Kaplan et al. 2020, §2.1: C ≈ 6·N per token with N the non-embedding parameters
  (no attention term, no output layer).
* ``exact`` — a per-component count of this model's actual shapes (grouped-query K/V, the true MLP
  width, three MLP matrices with GLU, the logits), forward + backward. Its scope is *matmul-class*
  FLOPs: every matrix product, the two batched products inside attention included. Norms,
  softmax, activations, residual adds and the optimizer are not in it (they are <1% of the FLOPs
  of any real transformer, though not of its time). `perflab.flops.counting.count_flops` counts exactly
  this scope, so for perflab's models the two agree to the FLOP.

Attention is counted dense (all s×s scores), as torch's FlopCounterMode and PaLM count it; a causal
kernel skips about half of those score blocks, so by this count attention's hardware FLOPs are
overstated. The other convention halves causal attention: FlashAttention's benchmark (`flops()`,
`// (2 if causal else 1)`), the FlashAttention-2 paper (§4.1) and Megatron-LM (`attn_layer_flops`,
its `seq_len / 2` term).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON
from perflab.core.validate import positive_int
from perflab.workload.models import ModelConfig, non_embedding_params, param_breakdown, param_count

CONVENTIONS = ("megatron_recompute", "megatron", "korthikanti_selective", "palm", "kaplan", "exact")


@dataclass(frozen=True)
class Convention:
    key: str
    name: str
    formula: str
    counts: str  # what it includes, in a few words
    source: str


CONVENTION_INFO: dict[str, Convention] = {
    "megatron_recompute": Convention(
        "megatron_recompute", "Megatron-LM (with recompute)", "96·b·s·L·h²·(1 + s/6h + V/16Lh)",
        "GPT shape; fwd + bwd + full recompute (4× layer fwd)",
        "Narayanan et al. 2021, eq. 3 (arXiv:2104.04473)"),
    "megatron": Convention(
        "megatron", "Megatron model FLOPs", "72·b·s·L·h²·(1 + s/6h + V/12hL)",
        "GPT shape; fwd + bwd, no recompute",
        "Korthikanti et al. 2022, eq. 7 (arXiv:2205.05198)"),
    "korthikanti_selective": Convention(
        "korthikanti_selective", "Megatron hardware FLOPs, selective recompute", "72·b·s·L·h²·(1 + s/3h + V/12hL)",
        "GPT shape; fwd + bwd + recompute of attention core",
        "Korthikanti et al. 2022, eq. 8 (arXiv:2205.05198)"),
    "palm": Convention(
        "palm", "PaLM", "6N + 12·L·H·Q·T per token",
        "N = matmul parameters (no positions, no untied input embedding); dense attention",
        "Chowdhery et al. 2022, Appendix B (arXiv:2204.02311)"),
    "kaplan": Convention(
        "kaplan", "Kaplan 6N", "6·N_non-embedding per token",
        "non-embedding weights only; no attention, no logits",
        "Kaplan et al. 2020, §2.1 (arXiv:2001.08361)"),
    "exact": Convention(
        "exact", "exact (perflab)", "Σ components, fwd + 2× bwd",
        "true shapes (GQA, GLU, f), attention, logits; matmul-class only",
        "perflab.flops.transformer.exact_flops"),
}


# ---------------------------------------------------------------- the papers' formulas, raw inputs


def narayanan_eq3(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> int:
    """FLOPs per iteration, Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training
    on GPU Clusters Using Megatron-LM"), §5.1 eq. (3): F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).

    Where the terms come from: per layer the forward does 24·B·s·h² (QKV 6Bsh², output projection
    2Bsh², MLP 16Bsh²) plus 4·B·s²·h (scores and attention over values); backward doubles it and
    activation recomputation adds one more forward, so layers count 4×; the logits (2·B·s·h·V)
    count 3× (forward + backward, not recomputed). Expanded to integers:
    96·B·s·l·h² + 16·B·s²·l·h + 6·B·s·h·V.
    """
    B, s, L, h, V = batch, seq, layers, hidden, vocab  # the paper's l is L here
    return 96 * B * s * L * h * h + 16 * B * s * s * L * h + 6 * B * s * h * V


def korthikanti_eq7(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> int:
    """Model FLOPs per iteration, Korthikanti et al. 2022 ("Reducing Activation Recomputation in
    Large Transformer Models"), Appendix A eq. (7): 72·B·L·s·h²·(1 + s/(6h) + v/(12·h·L)).

    Forward per layer 24·B·s·h² + 4·B·s²·h, logits 2·B·s·h·v, all ×3 (backward = 2× forward).
    Expanded: 72·B·s·L·h² + 12·B·s²·L·h + 6·B·s·h·v.
    """
    B, s, L, h, v = batch, seq, layers, hidden, vocab
    return 72 * B * s * L * h * h + 12 * B * s * s * L * h + 6 * B * s * h * v


def korthikanti_eq8(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> int:
    """Hardware FLOPs per iteration with selective recomputation, Korthikanti et al. 2022,
    Appendix A eq. (8): 72·B·L·s·h²·(1 + s/(3h) + v/(12·h·L)).

    The paper's text says selective recomputation adds one forward of the attention core
    (2·B·s²·h for the scores + 2·B·s²·h for attention over values = 4·B·s²·h per layer), which
    would give 1 + 2s/(9h); the printed eq. (8), and the HFU column of its Table 5, use s/(3h),
    i.e. 12·B·s²·h extra per layer. Reproduced here as printed. Expanded:
    72·B·s·L·h² + 24·B·s²·L·h + 6·B·s·h·v.
    """
    B, s, L, h, v = batch, seq, layers, hidden, vocab
    return 72 * B * s * L * h * h + 24 * B * s * s * L * h + 6 * B * s * h * v


def narayanan_params_eq2(layers: int, hidden: int, vocab: int, seq: int) -> int:
    """Parameters of a GPT model, Narayanan et al. 2021 eq. (2): P = 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h)).

    Expanded: 12·l·h² + 13·l·h + (V + s)·h — weights, biases and the two LayerNorms of each layer,
    token and position embeddings; it leaves out the final LayerNorm (2h), which perflab's
    `param_count` includes.
    """
    L, h = layers, hidden  # the paper's l
    return 12 * L * h * h + 13 * L * h + (vocab + seq) * h


def narayanan_training_days(tokens: float, params: float, gpus: int, tflops_per_gpu: float) -> float:
    """End-to-end training time, Narayanan et al. 2021 eq. (4): ≈ 8·T·P / (n·X), in days.

    8 = the 96·B·s·l·h² of eq. (3) per token over the 12·l·h² parameters (fwd, bwd and recompute
    at 2 FLOPs per parameter each); attention and logits terms are dropped.
    """
    if gpus <= 0 or tflops_per_gpu <= 0:
        raise InputError("gpus and tflops_per_gpu must be > 0")
    return 8 * tokens * params / (gpus * tflops_per_gpu * 1e12) / 86400


def palm_flops_per_token(n_params: float, layers: int, heads: int, head_dim: int, seq: int) -> float:
    """PaLM's model FLOPs per token, Chowdhery et al. 2022 Appendix B: 6·N + 12·L·H·Q·T.

    6·N: each matmul parameter does one multiply-add (2 FLOPs) per token forward and two in
    backward. 12·L·H·Q·T: the two attention products (scores and attention over values) do
    2·T·H·Q multiply-adds per token per layer, ×2 FLOPs, ×3 for forward + backward.
    """
    return 6 * n_params + 12 * layers * heads * head_dim * seq


def handbook_tflops_estimate(model_billion: float, seqlen: int, global_batch: int, sec_per_iter: float,
                         gpus: int, recompute: bool = True) -> float:
    """The handbook's quick TFLOP/s per GPU for a decoder transformer (Stas Bekman, *Machine Learning
    Engineering Open Book*, training/performance/README.md, "TFLOPS as a performance metric",
    https://github.com/stas00/ml-engineering/tree/master/training/performance):
    model_B · 4 · 2 · seqlen · GBS / (sec · gpus · 1e3), GBS the global batch in sequences.

    4 with activation recomputation (fwd + 2×bwd + recompute), 3 without; the 2 is FLOPs per
    parameter per token of a forward. It ignores attention and so slightly underestimates.
    """
    if sec_per_iter <= 0 or gpus <= 0:
        raise InputError("seconds per iteration and number of GPUs must be > 0")
    return model_billion * (4 if recompute else 3) * 2 * seqlen * global_batch / (sec_per_iter * gpus * 1e3)


# ---------------------------------------------------------------- parameter counts the conventions use


def palm_params(cfg: ModelConfig) -> int:
    """N as PaLM's formula wants it (and nanoGPT/torchtitan compute it): all parameters except the
    learned position table and an untied input embedding, which are looked up, not multiplied."""
    p = param_breakdown(cfg)
    return param_count(cfg) - p["positions"] - (0 if cfg.tied else p["embedding"])


# ---------------------------------------------------------------- the exact count

COMPONENTS = ("q", "k", "v", "scores", "attn_values", "out", "mlp_gate", "mlp_up", "mlp_down", "logits")
PHASES = ("forward", "backward", "recompute")


@dataclass
class ExactCount:
    """Matmul-class FLOPs of one training step (all layers), per component and phase.

    forward: one forward pass. backward: the gradients (2× forward for every product: the
    gradient w.r.t. the input and w.r.t. the weight, or both operands for attention's products).
    recompute: forward work done again — inside a fused attention kernel's backward (it keeps only
    the softmax statistics and recomputes the scores) and, with activation checkpointing, every
    block's forward up to its last saved tensor.
    """

    cfg: ModelConfig
    batch: int
    seq: int
    checkpointing: bool
    fused_attention: bool
    forward: dict[str, int] = field(default_factory=dict)
    backward: dict[str, int] = field(default_factory=dict)
    recompute: dict[str, int] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    @property
    def forward_total(self) -> int:
        return sum(self.forward.values())

    @property
    def backward_total(self) -> int:
        return sum(self.backward.values())

    @property
    def recompute_total(self) -> int:
        return sum(self.recompute.values())

    @property
    def model(self) -> int:
        """Model FLOPs: forward + backward (what MFU counts)."""
        return self.forward_total + self.backward_total

    @property
    def hardware(self) -> int:
        """Hardware FLOPs: model FLOPs plus everything recomputed (what HFU counts)."""
        return self.model + self.recompute_total

    def per_token(self, which: str = "model") -> float:
        return getattr(self, which) / self.tokens

    def frame(self):
        """A DataFrame: one row per component, FLOPs per phase, and the share of hardware FLOPs."""
        import pandas as pd

        rows = []
        for c in COMPONENTS:
            f, b, r = self.forward.get(c, 0), self.backward.get(c, 0), self.recompute.get(c, 0)
            if f or b or r:
                rows.append({"component": c, "forward": f, "backward": b, "recompute": r, "total": f + b + r})
        df = pd.DataFrame(rows)
        df.loc[len(df)] = {"component": "total", "forward": self.forward_total, "backward": self.backward_total,
                           "recompute": self.recompute_total, "total": self.hardware}
        df["share"] = df["total"] / self.hardware
        return df.set_index("component")

    def as_dict(self) -> JSON:
        """The count for `perflab flops --json`."""
        return {"batch": self.batch, "seq": self.seq, "checkpointing": self.checkpointing,
                "fused_attention": self.fused_attention, "forward": dict(self.forward),
                "backward": dict(self.backward), "recompute": dict(self.recompute),
                "model": self.model, "hardware": self.hardware}


def layer_forward(cfg: ModelConfig, batch: int, seq: int) -> dict[str, int]:
    """Forward FLOPs of ONE layer by component (2 FLOPs per multiply-add), for b·s tokens."""
    n = batch * seq
    h, a, kv, d, f = cfg.hidden, cfg.heads, cfg.n_kv, cfg.d_head, cfg.d_ff
    out = {
        "q": 2 * n * h * a * d,  # x[n×h] · Wq[h×a·d]
        "k": 2 * n * h * kv * d,  # grouped-query attention: kv heads of size d
        "v": 2 * n * h * kv * d,
        # every query head attends over all s keys (K/V heads are shared, not the products):
        "scores": 2 * batch * a * seq * seq * d,  # Q·Kᵀ: [s×d]·[d×s] per head
        "attn_values": 2 * batch * a * seq * seq * d,  # P·V: [s×s]·[s×d] per head
        "out": 2 * n * a * d * h,
        "mlp_up": 2 * n * h * f,
        "mlp_down": 2 * n * f * h,
    }
    if cfg.glu:
        out["mlp_gate"] = 2 * n * h * f  # SwiGLU's third matrix
    return out


def exact_flops(cfg: ModelConfig, batch: int = 1, seq: int | None = None, *, checkpointing: bool = False,
                fused_attention: bool = True, checkpoint_early_stop: bool = True) -> ExactCount:
    """The exact matmul-class FLOPs of one training step of `build_model(cfg)` on b×s tokens.

    checkpointing: `model.checkpointing = True` (torch.utils.checkpoint around every block).
    fused_attention: the attention kernel is a fused one (flash / memory-efficient / CPU flash),
      whose backward recomputes the scores Q·Kᵀ; False for the unfused "math" path.
    checkpoint_early_stop: torch's non-reentrant checkpoint stops recomputing once the last tensor
      the backward needs is back (`torch.utils.checkpoint.set_checkpoint_early_stop`, on by
      default), so a block's last product — the MLP down projection, whose output nothing
      saves — is not recomputed.
    """
    batch = positive_int("batch", batch)
    seq = positive_int("seq", seq if seq is not None else cfg.seq_len)
    L = cfg.layers
    layer = layer_forward(cfg, batch, seq)
    fwd = {c: L * v for c, v in layer.items()}
    fwd["logits"] = 2 * batch * seq * cfg.hidden * cfg.vocab  # x·Eᵀ (tied) or the output layer
    bwd = {c: 2 * v for c, v in fwd.items()}
    rec: dict[str, int] = {}
    if checkpointing:
        for c, v in layer.items():
            if checkpoint_early_stop and c == "mlp_down":
                continue
            rec[c] = rec.get(c, 0) + L * v
    if fused_attention:
        rec["scores"] = rec.get("scores", 0) + L * layer["scores"]
    order = {c: i for i, c in enumerate(COMPONENTS)}
    fwd = dict(sorted(fwd.items(), key=lambda kv: order[kv[0]]))
    bwd = dict(sorted(bwd.items(), key=lambda kv: order[kv[0]]))
    rec = dict(sorted(rec.items(), key=lambda kv: order[kv[0]]))
    return ExactCount(cfg, batch, seq, checkpointing, fused_attention, fwd, bwd, rec)


def exact_for_counted(cfg: ModelConfig, batch: int, seq: int, counted: int, *, checkpointing: bool = False,
                      steps: int = 1) -> ExactCount:
    """The exact count that matches a counted run: PyTorch picks the attention kernel at run time (a
    fused one, whose backward recomputes the scores, or the unfused "math" path), so try both.
    `steps` micro-steps were counted together. Raises AssertionError when neither matches."""
    for fused in (True, False):
        ex = exact_flops(cfg, batch, seq, checkpointing=checkpointing, fused_attention=fused)
        if ex.hardware * steps == counted:
            return ex
    raise AssertionError(f"counted {counted:,} FLOPs, but the exact count is "
                         f"{exact_flops(cfg, batch, seq, checkpointing=checkpointing).hardware * steps:,} "
                         f"(fused attention) or {exact_flops(cfg, batch, seq, checkpointing=checkpointing, fused_attention=False).hardware * steps:,} (unfused)")


@dataclass
class CounterCheck:
    """One training step's FLOPs counted by perflab's counter and by torch's FlopCounterMode, without and with
    activation checkpointing, each held to the exact count (`counter_check`)."""

    counted: dict[bool, Any]  # checkpointing → perflab.flops.counter.FlopCount
    torch_counted: dict[bool, int]  # checkpointing → torch's FlopCounterMode total
    exact: dict[bool, ExactCount]  # checkpointing → the exact count that matches (fused or unfused attention)

    def text(self) -> str:
        lines = [f"checkpointing={ck}: perflab counts {self.counted[ck].total:,} = exact {self.exact[ck].hardware:,};  "
                 f"torch's FlopCounterMode {self.torch_counted[ck]:,} "
                 f"({self.torch_counted[ck] / self.counted[ck].total - 1:+.1%})" for ck in (False, True)]
        return "\n".join(lines + [str(self.counted[True])])


def counter_check(cfg: ModelConfig, batch: int, seq: int, *, device=None) -> CounterCheck:
    """Count one step (forward, and the backward of a scalar made from the logits) of `cfg`'s model with perflab's
    counter and torch's, without and with activation checkpointing. perflab's count must equal the exact count
    (`exact_for_counted` raises otherwise); torch's may miss attention (on a CPU it counts it as zero)."""
    import torch

    from perflab.flops.counting import count_flops, torch_flop_count
    from perflab.workload.models import build_model

    counted, theirs, exact = {}, {}, {}
    for ck in (False, True):
        m = build_model(cfg, device=device)
        m.checkpointing = ck
        x = torch.randint(0, cfg.vocab, (batch, seq), device=device)

        def one_step(m=m, x=x):
            m(x).float().pow(2).mean().backward()

        counted[ck] = count_flops(one_step)
        theirs[ck], _ = torch_flop_count(one_step)
        exact[ck] = exact_for_counted(cfg, batch, seq, counted[ck].total, checkpointing=ck)
        if counted[ck].model != exact[ck].model:  # the recompute booked apart: the model FLOPs agree too
            raise AssertionError(f"counted {counted[ck].model:,} model FLOPs, the exact count {exact[ck].model:,}")
    return CounterCheck(counted, theirs, exact)


# ---------------------------------------------------------------- all conventions side by side


def flops_per_token(cfg: ModelConfig, seq: int | None = None) -> dict[str, float]:
    """FLOPs per token of one training step under each convention (keys: CONVENTIONS).

    `exact` is model FLOPs (forward + backward, no recompute), the quantity the other model-FLOPs
    conventions estimate. Per-token values do not depend on the batch size.
    """
    s = positive_int("seq", seq if seq is not None else cfg.seq_len)
    L, h, V = cfg.layers, cfg.hidden, cfg.vocab
    return {
        "megatron_recompute": narayanan_eq3(1, s, L, h, V) / s,
        "megatron": korthikanti_eq7(1, s, L, h, V) / s,
        "korthikanti_selective": korthikanti_eq8(1, s, L, h, V) / s,
        "palm": float(palm_flops_per_token(palm_params(cfg), L, cfg.heads, cfg.d_head, s)),
        "kaplan": float(6 * non_embedding_params(cfg)),
        "exact": exact_flops(cfg, 1, s, fused_attention=False).model / s,
    }


def conventions_frame(cfg: ModelConfig, seq: int | None = None, batch: int = 1, *, checkpointing: bool = False):
    """Every convention for one config: FLOPs per token and per step, and how far each is from the
    exact model count (and, for the recompute conventions, from the exact hardware count)."""
    import pandas as pd

    s = positive_int("seq", seq if seq is not None else cfg.seq_len)
    b = positive_int("batch", batch)
    per_tok = flops_per_token(cfg, s)
    ex = exact_flops(cfg, b, s, checkpointing=checkpointing)
    exact_model = ex.model / ex.tokens
    exact_hw = ex.hardware / ex.tokens
    rows = []
    for key in CONVENTIONS:
        info = CONVENTION_INFO[key]
        v = per_tok[key]
        rows.append({
            "convention": info.name, "key": key, "formula": info.formula, "counts": info.counts,
            "flops_per_token": v, "flops_per_step": v * b * s,
            "vs_exact_model": v / exact_model - 1,
            "kind": "hardware" if key in ("megatron_recompute", "korthikanti_selective") else "model",
            "source": info.source,
        })
    rows.append({"convention": "exact hardware (this run)", "key": "exact_hardware",
                 "formula": "fwd + bwd + recompute", "counts": ("with activation checkpointing; " if checkpointing else "")
                 + "attention kernel recomputes scores in backward",
                 "flops_per_token": exact_hw, "flops_per_step": float(ex.hardware),
                 "vs_exact_model": exact_hw / exact_model - 1, "kind": "hardware",
                 "source": "perflab.flops.transformer.exact_flops"})
    return pd.DataFrame(rows).set_index("convention")


def megatron_gpt(layers: int, hidden: int, heads: int, vocab: int = 51200, seq: int = 2048, name: str = "megatron-gpt") -> ModelConfig:
    """A GPT shape as Megatron-LM's papers use it: 4h MLP, biases, LayerNorm, learned positions,
    tied embeddings; vocabulary 51,200 (GPT-2's 50,257 padded), context 2048."""
    return ModelConfig(name, layers, hidden, heads, None, 4 * hidden, False, vocab, seq, True, True, "learned", "layernorm")
