"""Memory of a training step, predicted: model states, activations, and the batch arithmetic.

Three kinds of bytes fill an accelerator during training (ZeRO paper, Rajbhandari et al. 2020, §3):

* **model states**, per parameter: the weights the model computes with, an fp32 master copy (mixed
  precision only), the gradients, and the optimizer's states;
* **activations**: tensors the forward pass saves for the backward pass; they grow with the
  micro-batch b and the sequence length s;
* **the remainder**: temporaries, the allocator's cache and fragmentation, the CUDA context and
  kernels, communication buffers. `perflab.memory.probe` measures it; this module names it.

    >>> est = estimate(params=7.5e9, precision="mixed", grad_dtype="fp16", zero=1, dp=64)
    >>> est.total_bytes / 1e9                 # 31.4 GB: the ZeRO paper's Figure 1, P_os
    >>> activations_per_layer_bytes(s=2048, b=1, h=12288, a=96)   # Korthikanti et al. 2022, Table 2

Words: b micro-batch, s sequence length, h hidden, a heads, L layers, V vocabulary, t tensor-parallel
degree, p pipeline degree, d (or dp) data-parallel degree, N (or Ψ) parameters. GB = 1e9 bytes,
GiB = 2**30. Every function returns bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON
from perflab.core.validate import positive_int, positive_number
from perflab.memory.batch import BatchPlan, BatchPlans, batch_plan  # noqa: F401  (the batch arithmetic's home)

GB = 1e9
GiB = 2**30

# ---------------------------------------------------------------- bytes per parameter

DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


@dataclass(frozen=True)
class Precision:
    """How a training run stores its model states.

    weight_bytes: the copy the forward/backward pass computes with; master_bytes: the fp32 copy the
    optimizer updates (mixed precision only); state_bytes: the width of each optimizer state;
    default_grad: the gradient dtype most frameworks use with it.
    """

    name: str
    weight_bytes: int
    master_bytes: int
    state_bytes: int
    default_grad: str
    note: str


PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", 4, 0, 4, "fp32", "everything in fp32"),
    "mixed": Precision("mixed", 2, 4, 4, "fp32",
                       "bf16/fp16 weights for compute + fp32 master weights and fp32 optimizer states"),
    "bf16": Precision("bf16", 2, 0, 2, "bf16",
                      "pure bf16: weights, gradients and optimizer states all in bf16 (needs Kahan "
                      "summation or stochastic rounding to train well)"),
}


@dataclass(frozen=True)
class Optimizer:
    """An optimizer's memory: `states` tensors the size of the model, each `state_bytes` wide
    (None: the precision's width), plus `extra_per_param` bytes (quantization scales)."""

    name: str
    states: int
    state_bytes: int | None = None
    extra_per_param: float = 0.0
    step_temporary_params: float = 0.0  # transient copies of the parameters during .step() (upper bound)
    note: str = ""


OPTIMIZERS: dict[str, Optimizer] = {
    "adamw": Optimizer("AdamW", 2, step_temporary_params=1.0,
                       note="exp_avg and exp_avg_sq; torch's default (foreach) step makes temporaries "
                            "of up to one parameter-sized fp32 tensor"),
    "adamw-fused": Optimizer("fused AdamW", 2,
                             note="same states as AdamW; one fused kernel per step, no temporaries "
                                  "(torch.optim.AdamW(fused=True), apex FusedAdam)"),
    "adam8bit": Optimizer("8-bit Adam", 2, state_bytes=1, extra_per_param=2 * 4 / 2048,
                          note="bitsandbytes: each moment quantized to 1 byte, one fp32 scale per "
                               "block of 2048 values"),
    "sgd": Optimizer("SGD with momentum", 1, note="one momentum buffer"),
    "lion": Optimizer("Lion", 1, note="one momentum buffer (Chen et al. 2023): the 4-byte class"),
    "adafactor": Optimizer("Adafactor (with momentum)", 1,
                           note="4-byte class: a momentum buffer; the second moment is factored "
                                "into row and column sums (≈0 bytes per parameter, ignored here)"),
}


def _choose(name: str, table: dict, what: str):
    key = str(name).strip().lower().replace("_", "-")
    aliases = {"adam": "adamw", "fused-adamw": "adamw-fused", "fusedadam": "adamw-fused", "adamw8bit": "adam8bit",
               "adam-8bit": "adam8bit", "8bit-adam": "adam8bit", "sgd-momentum": "sgd", "float32": "fp32",
               "amp": "mixed", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
    key = aliases.get(key, key)
    if key not in table:
        raise InputError(f"unknown {what} {name!r}: use one of {', '.join(table)}")
    return key, table[key]


def precision_of(name: str) -> Precision:
    return _choose(name, PRECISIONS, "precision")[1]


def optimizer_of(name: str) -> Optimizer:
    return _choose(name, OPTIMIZERS, "optimizer")[1]


def grad_bytes(grad_dtype: str) -> int:
    key = _choose(grad_dtype, {k: v for k, v in DTYPE_BYTES.items() if k in ("fp32", "bf16", "fp16")},
                  "gradient dtype")[0]
    return DTYPE_BYTES[key]


def bytes_per_param(precision: str = "mixed", optimizer: str = "adamw", grad_dtype: str | None = None) -> dict[str, float]:
    """Bytes each parameter costs, by component, before any ZeRO partitioning.

    mixed + AdamW + fp32 gradients: 2 (bf16 weights) + 4 (fp32 master) + 4 (grads) + 8 (two fp32
    moments) = 18, the figure of most training guides; with half-precision gradients it is
    2 + 4 + 2 + 8 = 16, the ZeRO paper's 2Ψ + 2Ψ + KΨ with K = 12 (master + two moments).
    """
    p = precision_of(precision)
    o = optimizer_of(optimizer)
    g = grad_bytes(grad_dtype or p.default_grad)
    state = o.state_bytes if o.state_bytes is not None else p.state_bytes
    return {"weights": p.weight_bytes, "master_weights": p.master_bytes, "gradients": g,
            "optimizer_states": o.states * state + o.extra_per_param}


def bytes_per_param_table(precisions: tuple[str, ...] = ("fp32", "mixed", "bf16"),
                          optimizers: tuple[str, ...] = ("adamw", "adamw-fused", "adam8bit", "sgd", "lion")):
    """`bytes_per_param` for every precision and optimizer (mixed precision once with fp32 and once with fp16
    gradients): one row each, bytes per parameter by component and in all."""
    import pandas as pd

    from perflab.core.readout import plain

    rows = []
    for prec in precisions:
        for opt in optimizers:
            for g in (("fp32", "fp16") if prec == "mixed" else (precision_of(prec).default_grad,)):
                per = bytes_per_param(prec, opt, g)
                rows.append({"precision": prec, "optimizer": opt, "gradients in": g,
                             **{f"{k.replace('_', ' ')} (B)": plain(v, 5) for k, v in per.items()},
                             "total (B per parameter)": plain(sum(per.values()), 5)})
    return pd.DataFrame(rows)


def _zero_divisors(zero: int, dp: int) -> dict[str, int]:
    """What ZeRO-DP stage `zero` partitions over `dp` ranks (ZeRO paper §5.1–5.3):
    stage 1 (P_os) the optimizer states — the fp32 master weights are one of them —, stage 2
    (P_os+g) also the gradients, stage 3 (P_os+g+p) also the weights."""
    return {"weights": dp if zero >= 3 else 1, "master_weights": dp if zero >= 1 else 1,
            "gradients": dp if zero >= 2 else 1, "optimizer_states": dp if zero >= 1 else 1}


def model_state_bytes(params: float, precision: str = "mixed", optimizer: str = "adamw",
                      grad_dtype: str | None = None, zero: int = 0, dp: int = 1) -> dict[str, float]:
    """Bytes of weights, master weights, gradients and optimizer states on one GPU."""
    n = positive_number("params", params)
    zero = _zero_stage(zero)
    dp = positive_int("dp", dp)
    per = bytes_per_param(precision, optimizer, grad_dtype)
    div = _zero_divisors(zero, dp)
    return {k: n * v / div[k] for k, v in per.items()}




def _zero_stage(zero) -> int:
    if zero not in (0, 1, 2, 3) and str(zero) not in ("0", "1", "2", "3"):
        raise InputError(f"ZeRO stage must be 0, 1, 2 or 3 (got {zero!r})")
    return int(zero)


# ---------------------------------------------------------------- activations (Korthikanti et al. 2022)

RECOMPUTE = ("none", "selective", "full")


def activations_per_layer_bytes(s: int, b: int, h: int, a: int, *, t: int = 1, sp: bool = False,
                                recompute: str = "none") -> float:
    """Bytes one transformer layer keeps for the backward pass (Korthikanti et al. 2022, Table 2).

    Their GPT layer: 16-bit activations, 1-byte dropout masks, attention scores materialized
    (no FlashAttention). Per element of the s×b×h layer input:

    * attention block 11sbh + 5as²b: QKV input 2sbh, Q and K 4sbh, V 2sbh, softmax output 2as²b,
      its dropout mask as²b, dropout output 2as²b, projection input 2sbh, dropout mask sbh;
    * MLP block 19sbh: two linear inputs 2sbh + 8sbh, GELU input 8sbh, dropout mask sbh;
    * two LayerNorm inputs 4sbh.

    Together sbh(34 + 5as/h) (§4.1, eq. 1). Tensor parallelism over t splits all but the 10sbh of
    LayerNorms, dropouts and block inputs: sbh(10 + 24/t + 5as/(ht)) (§4.2.1, eq. 2); sequence
    parallelism splits those too: sbh/t·(34 + 5as/h) (§4.2.2). Selective recomputation drops the
    5as/h attention term (§5); full recomputation keeps only each layer's input, 2sbh.
    """
    s, b, h, a, t = (positive_int(n, v) for n, v in (("seq", s), ("batch", b), ("hidden", h), ("heads", a), ("tp", t)))
    if recompute not in RECOMPUTE:
        raise InputError(f"recompute must be one of {', '.join(RECOMPUTE)} (got {recompute!r})")
    if a % t:
        raise InputError(f"heads ({a}) must be divisible by the tensor-parallel degree tp={t}: choose tp among "
                         f"{', '.join(str(d) for d in range(1, a + 1) if a % d == 0 and d <= 64)}")
    sbh = s * b * h
    attn = 5 * a * s / h
    if recompute == "full":
        return 2.0 * sbh
    if recompute == "selective":
        return sbh * 34 / t if sp else sbh * (10 + 24 / t)
    if sp:
        return sbh / t * (34 + attn)
    return sbh * (10 + 24 / t + attn / t)


def output_activation_bytes(s: int, b: int, h: int, v: int, *, t: int = 1, p: int = 1) -> float:
    """Activations outside the layers (Korthikanti et al. 2022, §4.3): the embedding dropout mask
    sbh·p/t, and on the last stage (only counted when p = 1) the final LayerNorm input 2sbh/t, the
    output layer's input 2sbh/t and the **fp32 logits** the cross-entropy keeps, 4sbv/t."""
    s, b, h, v, t, p = (positive_int(n, x) for n, x in (("seq", s), ("batch", b), ("hidden", h), ("vocab", v),
                                                        ("tp", t), ("pp", p)))
    extra = s * b * h * p / t
    if p == 1:
        extra += 4 * s * b * h / t * (1 + v / h)
    return extra


def logits_fp32_bytes(s: int, b: int, v: int, t: int = 1) -> float:
    """The fp32 logits (and their softmax) that the cross-entropy loss keeps: 4·s·b·V/t bytes."""
    return 4.0 * s * b * v / t


# ---------------------------------------------------------------- activations of perflab's own model


def model_activation_bytes(cfg, batch: int, seq: int | None = None, *, dtype: str = "fp32",
                           recompute: str = "none", device: str = "cpu") -> dict[str, int]:
    """Bytes `perflab.workload.models.build_model(cfg)` keeps for backward, component by component.

    Exact for the eager model on CPU (tests compare every term with the storages the autograd
    graph holds, for GPT- and Llama-like shapes, fp32 and bf16). It differs from Korthikanti's layer
    in three ways that the notebook shows: no dropout (no masks), attention through
    `scaled_dot_product_attention` (FlashAttention-style: it saves its output and a log-sum-exp of
    b·a·s fp32 numbers, not the s×s scores), and norm statistics are counted. `recompute='full'`
    matches `model.checkpointing = True` (each block keeps only its input). `dtype` is the dtype of
    the model's weights and activations (pure precision, no autocast). `device` matters for one
    detail: LayerNorm's per-token statistics are kept in the input dtype on CPU and in fp32 on CUDA.

    N = b·s tokens, e = bytes per activation element, f the MLP width, d the head size.
    """
    b = positive_int("batch", batch)
    s = positive_int("seq", seq if seq is not None else cfg.seq_len, maximum=cfg.seq_len)
    if recompute not in ("none", "full"):
        raise InputError("perflab's model supports recompute 'none' or 'full' (model.checkpointing = True)")
    e = DTYPE_BYTES[_choose(dtype, {k: 1 for k in ("fp32", "bf16", "fp16")}, "activation dtype")[0]]
    N, h, f, d = b * s, cfg.hidden, cfg.d_ff, cfg.d_head
    qw, kvw = cfg.heads * d, cfg.n_kv * d  # widths of q and of k, v
    rotary = cfg.positions == "rotary"

    stat = e if str(device).startswith("cpu") else 4

    def norm_bytes() -> int:
        # LayerNorm saves its input and per-token mean and rstd; perflab's RMSNorm saves
        # the fp32 input (a copy when e < 4), the per-token rsqrt (fp32) and the normalized x (in
        # the model dtype) that multiplies the weight. The output is counted with the next linear.
        if cfg.norm == "layernorm":
            return N * h * e + 2 * N * stat
        return N * h * 4 + N * 4 + N * h * e

    layer: dict[str, int] = {}
    layer["norms"] = 2 * norm_bytes()
    layer["linear inputs (normed x)"] = 2 * N * h * e  # q/k/v input and MLP input
    # q, k, v as SDPA sees them: rotary makes new q and k; grouped-query attention repeats k and v to
    # a heads (the repeats are what SDPA keeps)
    layer["q, k, v"] = N * qw * e + 2 * N * (qw if cfg.n_kv != cfg.heads else kvw) * e
    layer["attention output"] = N * qw * e
    layer["attention log-sum-exp (fp32)"] = b * cfg.heads * s * 4
    # The output projection reads the attention output transposed to (b, s, a·d). torch's CPU kernel
    # writes its output in q's layout: a view when q was itself a transposed view, a copy when
    # rotary made q contiguous. CUDA's flash/efficient kernels write (b, s, a, d): always a view.
    layer["output-projection input copy"] = N * qw * e if (rotary and str(device).startswith("cpu")) else 0
    layer["MLP"] = (4 if cfg.glu else 2) * N * f * e  # GELU: its input and output; SwiGLU: gate, silu, up, product
    per_layer = sum(layer.values())

    out: dict[str, int] = {}
    if recompute == "full":
        out["layers (block inputs only)"] = cfg.layers * N * h * e
    else:
        out["layers"] = cfg.layers * per_layer
    out["final norm + its output"] = norm_bytes() + N * h * e
    out["log-softmax of the logits (fp32)"] = N * cfg.vocab * 4
    out["position ids"] = s * 8 if cfg.positions == "learned" else 0
    out["loss"] = 4 + 4  # the scalar loss and the cross-entropy's total weight
    out["per_layer"] = per_layer  # not summed: see activation_total()
    out["per_layer_detail"] = layer  # type: ignore[assignment]
    return out


def activation_total(parts: dict[str, Any]) -> int:
    """Sum of `model_activation_bytes` components (the per-layer entries are details, not extra)."""
    return int(sum(v for k, v in parts.items() if not k.startswith("per_layer")))


def loss_gradient_bytes(b: int, s: int, v: int, logits_bytes: int = 4) -> int:
    """Temporaries at the start of backward: the gradient of the fp32 log-softmax output and of the
    logits, both b·s·V (plus a cast back when the logits were computed in 16 bits)."""
    n = b * s * v
    return 2 * n * 4 + (n * logits_bytes if logits_bytes != 4 else 0)


# ---------------------------------------------------------------- the whole estimate


@dataclass
class MemoryEstimate:
    """Predicted bytes on one GPU, by component; `total_bytes` is their sum (the textbook peak:
    weights + gradients + optimizer states + activations)."""

    components: dict[str, float]
    inputs: dict[str, Any]
    per_param: dict[str, float]
    activations_per_layer_bytes: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> float:
        return float(sum(self.components.values()))

    @property
    def model_state_bytes(self) -> float:
        return float(sum(v for k, v in self.components.items() if k != "activations"))

    def as_dict(self) -> JSON:
        return {"inputs": self.inputs, "bytes_per_param": self.per_param,
                "bytes_per_param_total": sum(self.per_param.values()),
                "components_bytes": {k: int(round(v)) for k, v in self.components.items()},
                "activations_per_layer_bytes": None if self.activations_per_layer_bytes is None
                else int(round(self.activations_per_layer_bytes)),
                "total_bytes": int(round(self.total_bytes)), "total_gb": self.total_bytes / GB,
                "total_gib": self.total_bytes / GiB, "notes": self.notes}

    def table(self):
        """The components as a DataFrame (GB and GiB), with a total row."""
        import pandas as pd

        rows = [{"component": k, "bytes": int(round(v)), "GB": v / GB, "GiB": v / GiB}
                for k, v in self.components.items()]
        rows.append({"component": "total", "bytes": int(round(self.total_bytes)), "GB": self.total_bytes / GB,
                     "GiB": self.total_bytes / GiB})
        return pd.DataFrame(rows)

    def text(self) -> str:
        width = max(len(k) for k in self.components) + 2
        lines = [f"{k:<{width}}{_fmt(v)}" for k, v in self.components.items()]
        lines.append(f"{'total':<{width}}{_fmt(self.total_bytes)}")
        per = " + ".join(f"{v:g} {k.replace('_', ' ')}" for k, v in self.per_param.items() if v)
        head = f"bytes per parameter before partitioning: {per} = {sum(self.per_param.values()):g}"
        return "\n".join([head] + lines + self.notes)


def _fmt(n: float) -> str:
    return f"{n / GB:10.3f} GB  ({n / GiB:9.3f} GiB, {int(round(n)):,} bytes)"


def estimate(params: float | None = None, *, cfg=None, precision: str = "mixed", grad_dtype: str | None = None,
             optimizer: str = "adamw", zero: int = 0, dp: int = 1, batch: int | None = None,
             seq: int | None = None, tp: int = 1, sp: bool = False, recompute: str = "none",
             layers: int | None = None, hidden: int | None = None, heads: int | None = None,
             vocab: int | None = None, activation_model: str = "paper") -> MemoryEstimate:
    """Predict the memory of one training step on one GPU.

    Give `params` (a count) or `cfg` (a `ModelConfig`, whose exact count is used). Activations are
    added when the shape is known (batch and seq, with layers/hidden/heads or a cfg), after
    Korthikanti et al. 2022; the fp32 logits of the loss come in when the vocabulary is known.
    Model states are divided by tp (Megatron splits every weight matrix t ways).
    `activation_model='perflab'` counts the activations of perflab's own model instead
    (`model_activation_bytes`: needs `cfg`, no tensor parallelism, recompute 'none' or 'full'),
    in fp32 for precision fp32 and in bf16 otherwise.
    """
    from perflab.workload.models import param_count

    if cfg is not None:
        layers, hidden, heads = layers or cfg.layers, hidden or cfg.hidden, heads or cfg.heads
        vocab = vocab or cfg.vocab
        if params is None:
            params = param_count(cfg)
        if seq is None and batch is not None:
            seq = cfg.seq_len
    if params is None:
        if layers and hidden:
            # 12h² per layer (attention 4h², MLP 8h²) + V·h embedding (Kaplan et al. 2020)
            params = 12 * layers * hidden**2 + (vocab or 0) * hidden
        else:
            raise InputError("give --params N, a --preset, or --layers and --hidden")
    tp = positive_int("tp", tp)
    states = model_state_bytes(params, precision, optimizer, grad_dtype, zero, dp)
    comps = {k: v / tp for k, v in states.items()}
    notes = []
    per_layer = None
    if batch is not None or seq is not None:
        if not (batch and seq and layers and hidden and heads):
            raise InputError("activations need --batch and --seq with --layers, --hidden and --heads (or --preset)")
        if activation_model == "perflab":
            if cfg is None or tp != 1 or sp:
                raise InputError("activation model 'perflab' needs a preset and no tensor/sequence parallelism")
            parts = model_activation_bytes(cfg, batch, seq, dtype="fp32" if precision == "fp32" else "bf16",
                                           recompute=recompute)
            per_layer = parts["per_layer"] if recompute == "none" else batch * seq * cfg.hidden * (
                4 if precision == "fp32" else 2)
            comps["activations"] = activation_total(parts)
            notes.append("activations of perflab's model (no dropout, SDPA attention, norm statistics counted)")
        elif activation_model == "paper":
            per_layer = activations_per_layer_bytes(seq, batch, hidden, heads, t=tp, sp=sp, recompute=recompute)
            act = positive_int("layers", layers) * per_layer
            if vocab:
                act += output_activation_bytes(seq, batch, hidden, vocab, t=tp)
            comps["activations"] = act
            notes.append("activations after Korthikanti et al. 2022 (16-bit activations, dropout, attention scores "
                          "materialized); FlashAttention removes the 5as/h term")
        else:
            raise InputError(f"activation model must be 'paper' or 'perflab' (got {activation_model!r})")
    o = optimizer_of(optimizer)
    if o.note:
        notes.append(f"{o.name}: {o.note}")
    inputs = {"params": params, "precision": precision, "grad_dtype": grad_dtype or precision_of(precision).default_grad,
              "optimizer": optimizer, "zero": int(zero), "dp": dp, "tp": tp, "sp": sp, "recompute": recompute,
              "batch": batch, "seq": seq, "layers": layers, "hidden": hidden, "heads": heads, "vocab": vocab,
              "activation_model": activation_model}
    return MemoryEstimate(comps, inputs, bytes_per_param(precision, optimizer, grad_dtype), per_layer, notes)


# ---------------------------------------------------------------- a training step, phase by phase

CPU_RNG_STATE_BYTES = 5056  # torch.get_rng_state(): the mt19937 state that checkpointing stashes per block on CPU


def param_sizes(cfg) -> list[int]:
    """Element count of every parameter tensor of `build_model(cfg)` (built on the meta device:
    no memory, no time)."""
    import torch

    from perflab.workload.models import Transformer

    with torch.device("meta"):
        m = Transformer(cfg)
    return [p.numel() for p in m.parameters()]


def _round_block(nbytes: int, device: str) -> int:
    """The CUDA caching allocator hands out blocks in multiples of 512 bytes; the CPU allocator
    reports the bytes asked for."""
    if str(device).startswith("cuda"):
        return max(512, -(-nbytes // 512) * 512) if nbytes else 0
    return nbytes


@dataclass
class StepPhase:
    """Predicted bytes alive at the end of a phase and the peak within it, with the parts."""

    phase: str
    iteration: int
    end_bytes: int
    peak_bytes: int
    parts: dict[str, int]
    peak_note: str

    def as_dict(self) -> JSON:
        return {"phase": self.phase, "iteration": self.iteration, "end_bytes": self.end_bytes,
                "peak_bytes": self.peak_bytes, "peak_note": self.peak_note, **{f"{k}_bytes": v for k, v in self.parts.items()}}


STEP_PHASES = ("build", "forward", "backward", "optimizer step", "zero_grad")
MEASURED_OPTIMIZERS = ("adamw", "adamw-fused", "sgd")


def step_phases(cfg, batch: int, seq: int | None = None, *, dtype: str = "fp32", optimizer: str = "adamw",
                recompute: str = "none", device: str = "cpu", iterations: int = 2) -> list[StepPhase]:
    """Predict `perflab.memory.probe.measure_step_phases` for perflab's model: for each phase of each
    iteration, the bytes still allocated at its end and the peak inside it.

    Parts: W weights and buffers; D the batch (token ids and their next-token targets, int64 each); A activations
    (`model_activation_bytes`); G gradients (same dtype as the weights); O optimizer states (created
    by the first step). Transients: the fp32 logits during the forward (4·b·s·V); at the start of
    backward the gradients of the log-softmax and of the logits (2 × 4·b·s·V) while every activation
    is still alive; during the step, the optimizer's temporaries (torch's default AdamW makes two
    copies of the largest tensor per step on CPU (one tensor at a time), one copy of all parameters
    on CUDA (foreach); fused AdamW and SGD none).
    """
    _, opt = _choose(optimizer, OPTIMIZERS, "optimizer")
    key = _choose(optimizer, OPTIMIZERS, "optimizer")[0]
    if key not in MEASURED_OPTIMIZERS:
        raise InputError(f"phase predictions cover the optimizers torch ships: {', '.join(MEASURED_OPTIMIZERS)} "
                         f"(got {optimizer!r}; use estimate() for the others)")
    b = positive_int("batch", batch)
    s = positive_int("seq", seq if seq is not None else cfg.seq_len, maximum=cfg.seq_len)
    e = DTYPE_BYTES[_choose(dtype, {k: 1 for k in ("fp32", "bf16", "fp16")}, "dtype")[0]]
    cuda = str(device).startswith("cuda")
    sizes = param_sizes(cfg)
    W = sum(_round_block(n * e, device) for n in sizes)
    if cfg.positions == "rotary":
        W += 2 * _round_block(cfg.seq_len * (cfg.d_head // 2) * e, device)  # cos/sin tables (buffers)
    D = 2 * _round_block(b * s * 8, device)  # inputs and targets (perflab.workload.train.make_batches)
    acts = model_activation_bytes(cfg, b, s, dtype=dtype, recompute=recompute, device=device)
    A = activation_total(acts)
    if recompute == "full" and not cuda:
        A += cfg.layers * CPU_RNG_STATE_BYTES
    G = W - (2 * _round_block(cfg.seq_len * (cfg.d_head // 2) * e, device) if cfg.positions == "rotary" else 0)
    P = G  # bytes of the parameters alone
    if key == "sgd":
        opt_states, steps, T_step = P, 0, 0
    else:
        fused = key == "adamw-fused"
        steps = len(sizes) * _round_block(4, device) if (fused or not cuda) else 0  # 'step' counters
        opt_states = 2 * P + steps
        if fused:
            T_step = 0
        elif cuda:
            T_step = P  # foreach: torch._foreach_sqrt(exp_avg_sq) is a copy of every state at once
        else:
            T_step = 2 * max(sizes) * e  # for-loop: sqrt and the division, one tensor at a time
    V4 = b * s * cfg.vocab * 4
    # build_model makes the fp32 model on the CPU and then casts it: on a CPU, a model in 16 bits
    # passes through its fp32 self plus one cast tensor at a time; on a GPU only the cast copies land there
    build_peak = W + D
    if e != 4 and not cuda:
        build_peak = max(W + D, sum(n * 4 for n in sizes) + (W - P) // e * 4 + max(sizes) * e)
    rows: list[StepPhase] = [StepPhase("build", 0, W + D, build_peak, {"weights": W, "batch": D},
                                       "the fp32 model before its cast" if build_peak > W + D else "")]
    for it in range(1, positive_int("iterations", iterations) + 1):
        o = opt_states if it > 1 else 0
        base = W + D + o
        parts = {"weights": W, "batch": D, "optimizer_states": o}
        rows.append(StepPhase("forward", it, base + A, base + A + V4, {**parts, "activations": A},
                              "fp32 logits before the log-softmax (4·b·s·V)"))
        bwd_peak = max(base + A + 2 * V4, base + G)
        rows.append(StepPhase("backward", it, base + G, bwd_peak, {**parts, "gradients": G},
                              "gradients of the log-softmax and of the logits (2 × 4·b·s·V) while all activations live"))
        full = W + D + opt_states + G
        rows.append(StepPhase("optimizer step", it, full, full + T_step,
                              {"weights": W, "batch": D, "optimizer_states": opt_states, "gradients": G},
                              f"{opt.name} step temporaries"))
        rows.append(StepPhase("zero_grad", it, W + D + opt_states, full,
                              {"weights": W, "batch": D, "optimizer_states": opt_states}, "gradients before they are freed"))
    return rows
