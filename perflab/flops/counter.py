"""A FLOP counter that does not miss attention, with a per-module, per-phase table.

    >>> from perflab.flops.counting import count_flops
    >>> c = count_flops(lambda: model(x).sum().backward())
    >>> c.total, c.by_phase            # FLOPs of everything the function ran
    >>> c.table(depth=3)               # DataFrame: module × (forward, backward, recompute)

Why not torch's `FlopCounterMode`? In torch 2.13 it has no formula for the CPU attention kernels
(`aten._scaled_dot_product_flash_attention_for_cpu` and its backward), so on a CPU every
`F.scaled_dot_product_attention` counts 0 — for a transformer at s = 2048 that is a third of the
work gone. This counter uses torch's own formulas for mm / addmm / bmm / baddbmm / convolution
(`torch.utils.flop_counter.flop_registry`) and its own for every fused attention kernel, on every
device; for fused recurrent layers (LSTM/GRU/RNN: oneDNN's `mkldnn_rnn_layer`, cuDNN's `_cudnn_rnn`),
which torch's counter leaves at 0; for matrix-vector products; and for a grouped or depthwise
convolution's weight gradient, which torch's `conv_backward_flop` counts `groups` times too large. An op
whose name says it is a product (mm, conv, rnn, attention, …) but that has no formula here is *named*
in `uncounted`, never silently left at 0.

Causal attention is counted dense here, as torch's FlopCounterMode counts it: the masked upper
triangle as if computed. FlashAttention's benchmark (`flops()`: `// (2 if causal else 1)`), the
FlashAttention-2 paper (§4.1) and Megatron-LM (`attn_layer_flops`) halve it; `model_causal_halved`
gives that convention's figure (for every `scaled_dot_product_attention` call with `is_causal=True` or an exactly
causal mask, whichever kernel ran it; attention written out by hand, with its own masking, is not
recognised and stays dense in both).

What it counts (`total`): matrix products and convolutions, attention's two batched products
included — "matmul-class" FLOPs, 2 per multiply-add, the scope of
`perflab.flops.transformer.exact_flops`. Softmax, norms, activations and other elementwise work are
estimated separately in `other` (one FLOP per element an op writes, or reads for reductions) and
are *not* in `total`.

Phases: an op runs in the *forward* when no backward is running; in the *backward* when autograd's
engine is running it with grad mode off; as *recompute* when it runs inside the backward with grad
mode on, which is what activation checkpointing does to re-run a forward. The backward of a fused
attention kernel recomputes the scores Q·Kᵀ from Q and K (it keeps only the softmax statistics);
that one product is booked as recompute too, so model FLOPs = forward + backward and
hardware FLOPs = total.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

PHASES = ("forward", "backward", "recompute")

aten = torch.ops.aten


def _attention_ops(names: list[str]) -> list:
    return [getattr(aten, n) for n in names if hasattr(aten, n)]


# fused attention kernels (forward): outputs exclude the s×s probability matrix
_SDPA_FWD = _attention_ops([
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable", "_flash_attention_forward", "_efficient_attention_forward",
])
_SDPA_BWD = _attention_ops([
    "_scaled_dot_product_flash_attention_for_cpu_backward", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_cudnn_attention_backward",
    "_scaled_dot_product_fused_attention_overrideable_backward", "_flash_attention_backward",
    "_efficient_attention_backward",
])

# grouped products (mixture-of-experts layers run every expert's tokens in one call); torch's own
# counter has no formula for them, so an MoE's experts would count 0
_GROUPED = _attention_ops(["_grouped_mm"])

# recurrent layers run as one fused kernel per layer (oneDNN on a CPU, cuDNN on a GPU); torch's own counter
# has no formula for them, so an LSTM would count 0
_RNN_FWD = _attention_ops(["mkldnn_rnn_layer", "_cudnn_rnn"])
_RNN_BWD = _attention_ops(["mkldnn_rnn_layer_backward", "_cudnn_rnn_backward"])

# matrix-vector and vector products (nn.Linear on a 1-D input runs `mv`), not in torch's counter either
_VECTOR = _attention_ops(["mv", "addmv", "dot", "vdot", "addbmm"])

# the words of an op name (split at '_') that mark a product: an op named so that the counter has no formula
# for is *uncounted* and named as such (`FlopCount.uncounted`), never silently left at 0
_PRODUCT_WORDS = {"mm", "bmm", "baddbmm", "addbmm", "matmul", "mv", "addmv", "dot", "vdot", "tensordot", "einsum",
                  "linear", "conv", "conv1d", "conv2d", "conv3d", "convolution", "depthwise2d", "depthwise3d", "rnn",
                  "lstm", "gru", "attention", "attn", "cdist", "gemm", "gemv"}
# torch's own op namespaces; an op from any other (a library's or the learner's custom op, such as
# flash_attn::_flash_attn_forward) is opaque to the counter, so it is named as uncounted whatever its name
_TORCH_NAMESPACES = {"aten", "prims", "c10d", "_c10d_functional", "_c10d_functional_autograd", "profiler", "_dtensor",
                     "quantized_decomposed", "higher_order", "_quantized", "quantized", "rngprims", "debugprims"}

_IGNORED = {
    "detach", "view", "_unsafe_view", "reshape", "expand", "permute", "transpose", "t", "unsqueeze", "squeeze",
    "slice", "select", "split", "split_with_sizes", "chunk", "unbind", "as_strided", "alias", "clone", "copy_",
    "_to_copy", "contiguous", "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like",
    "full", "full_like", "fill_", "zero_", "new_empty", "new_zeros", "new_ones", "new_full", "arange",
    "embedding", "embedding_dense_backward", "index_select", "gather", "scatter", "index", "cat", "stack",
    "lift_fresh", "_local_scalar_dense", "detach_", "set_", "resize_", "randint", "random_", "normal_", "uniform_",
    "repeat_interleave", "repeat", "masked_fill", "where", "_has_compatible_shallow_copy_type", "scalar_tensor",
}


def _qkv_dims(q, k, v):
    """(b·h_q, s_q, s_k, d_q, d_v) for attention operands shaped [b, h, s, d]."""
    b, hq, sq, dq = q.shape
    sk, dv = k.shape[-2], v.shape[-1]
    return b * hq, sq, sk, dq, dv


_BSHD = ("_flash_attention_forward", "_efficient_attention_forward", "_flash_attention_backward",
         "_efficient_attention_backward")  # these take [b, s, h, d]; the others [b, h, s, d]


def _operands(func, q, k, v):
    if func._overloadpacket.__name__ in _BSHD:
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    return q, k, v


def _sdpa_forward_flops(func, args) -> int:
    """FLOPs of a fused attention forward: scores Q·Kᵀ + attention over values P·V."""
    q, k, v = _operands(func, args[0], args[1], args[2])
    bh, sq, sk, dq, dv = _qkv_dims(q, k, v)
    return 2 * bh * sq * sk * dq + 2 * bh * sq * sk * dv


def _sdpa_backward_flops(func, args) -> tuple[int, int]:
    """(backward FLOPs, recomputed FLOPs) of a fused attention backward.

    Backward proper: dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q (four products, twice the
    forward). A fused kernel also recomputes S = Q·Kᵀ first: one more product, booked as recompute.
    """
    # every attention backward takes (grad_out, q, k, v, ...)
    q, k, v = _operands(func, args[1], args[2], args[3])
    bh, sq, sk, dq, dv = _qkv_dims(q, k, v)
    backward = 2 * bh * sq * sk * dv * 2 + 2 * bh * sq * sk * dq * 2
    recompute = 2 * bh * sq * sk * dq
    return backward, recompute


def _grouped_mm_flops(args, kwargs) -> int:
    """FLOPs of `torch._grouped_mm(a, b, offs)`: each group's product, 2·m·k·n, summed. With `offs`
    (cumulative group ends along the ragged dimension), only the rows up to offs[-1] are computed:
    2-D·3-D [rows, k]·[g, k, n] → 2·rows·k·n; 3-D·2-D [g, m, k]·[k, cols] → 2·m·k·cols;
    2-D·2-D [m, rows]·[rows, n] (a weight gradient per group) → 2·m·rows·n; 3-D·3-D → 2·g·m·k·n."""
    a, b = args[0], args[1]
    offs = args[2] if len(args) > 2 else kwargs.get("offs")
    ragged = int(offs[-1]) if isinstance(offs, torch.Tensor) and offs.numel() else None
    if a.dim() == 3 and b.dim() == 3:
        g, m, k = a.shape
        return 2 * g * m * k * b.shape[-1]
    if a.dim() == 2 and b.dim() == 3:
        return 2 * (ragged if ragged is not None else a.shape[0]) * a.shape[1] * b.shape[-1]
    if a.dim() == 3 and b.dim() == 2:
        return 2 * a.shape[1] * a.shape[2] * (ragged if ragged is not None else b.shape[1])
    return 2 * a.shape[0] * (ragged if ragged is not None else a.shape[1]) * b.shape[1]


def _conv_backward_flops(registry_formula, args, kwargs, out) -> int:
    """FLOPs of `aten.convolution_backward` for any `groups`. torch's formula (`conv_backward_flop`)
    counts the weight gradient as if every input channel met every output channel, so a grouped
    convolution's weight gradient comes out `groups` times too large (a depthwise one by its channel
    count); the input gradient is right. Each group's weight gradient is 2·N·(C_in/g)·(C_out/g)·k·out
    elements, g groups of them: the whole is torch's figure ÷ g."""
    groups = int(args[9]) if len(args) > 9 else int(kwargs.get("groups", 1))
    total = int(registry_formula(*args, **kwargs, out_val=out))
    mask = list(args[10]) if len(args) > 10 else list(kwargs.get("output_mask", [True, True, True]))
    if groups <= 1 or not mask[1]:
        return total
    only_weight = [*args[:10], [False, True, False], *args[11:]]
    weight = int(registry_formula(*only_weight, **kwargs, out_val=out))
    return total - weight + weight // groups


def _rnn_flops(func, args) -> int:
    """FLOPs of a fused recurrent layer (LSTM, GRU or RNN: oneDNN's `mkldnn_rnn_layer`, cuDNN's `_cudnn_rnn`)
    and of its backward. Each time step multiplies the input by W_ih [gates·H, I] and the hidden state by
    W_hh [gates·H, H] (and by W_hr with a projection), for every sequence in the batch: forward =
    2 · (time steps × batch) · Σ numel(2-D weights), each layer and direction seeing every step. The
    backward computes the gradients of the inputs and hidden states (the same products transposed) and of
    the weights: twice the forward (once when the weights' gradient is not asked for)."""
    name = func._overloadpacket.__name__
    x = args[0]
    rows = x.numel() // max(int(x.shape[-1]), 1)  # time steps × batch (a packed input: its total length)
    if name.startswith("mkldnn"):
        weights = [args[1], args[2]]  # W_ih, W_hh of this one layer and direction
    else:
        weights = [w for w in args[1] if isinstance(w, torch.Tensor) and w.dim() == 2]
    fwd = 2 * rows * sum(int(w.numel()) for w in weights)
    if not name.endswith("_backward"):
        return fwd
    if name.startswith("mkldnn"):
        return 2 * fwd
    mask = args[21] if len(args) > 21 else (True, True, True, True)
    return fwd * (1 + bool(mask[3]))


def _vector_flops(func, args) -> int:
    """mv / addmv: 2·m·n; dot / vdot: 2·n; addbmm: 2·b·m·n·k."""
    name = func._overloadpacket.__name__
    if name in ("dot", "vdot"):
        return 2 * int(args[0].numel())
    if name == "mv":
        return 2 * int(args[0].numel())
    if name == "addmv":
        return 2 * int(args[1].numel())
    b, m, k = args[1].shape
    return 2 * int(b) * int(m) * int(k) * int(args[2].shape[-1])


def _is_causal(func, args, kwargs) -> bool:
    """Whether an attention kernel ran with its causal mask (`is_causal`, or a non-zero
    `custom_mask_type` for the memory-efficient kernels), read from its schema by name."""
    for i, a in enumerate(func._schema.arguments):
        if a.name not in ("is_causal", "custom_mask_type"):
            continue
        v = kwargs[a.name] if a.name in kwargs else args[i] if i < len(args) else a.default_value
        return bool(v)
    return False


def is_causal_mask(mask: Any, sq: int, sk: int) -> bool:
    """Whether an attention mask is exactly the causal one (query i sees keys j ≤ i + sk − sq, the
    bottom-right alignment SDPA uses), for every batch and head: a boolean mask (True: attend) or an
    additive one (0 where attending, a large negative number or −inf elsewhere). A padding mask mixed
    in, or any other pattern, is not."""
    if not isinstance(mask, torch.Tensor) or mask.dim() < 2 or tuple(mask.shape[-2:]) != (sq, sk):
        return False
    allowed = mask if mask.dtype == torch.bool else (mask > torch.finfo(mask.dtype).min / 2) if \
        mask.is_floating_point() else None
    if allowed is None or (not mask.dtype == torch.bool and bool((mask[allowed] != 0).any())):
        return False
    want = torch.ones(sq, sk, dtype=torch.bool, device=mask.device).tril(sk - sq)
    return bool((allowed == want).all())


class _CausalCalls(TorchFunctionMode):
    """Marks the calls of `F.scaled_dot_product_attention` that are causal (`is_causal=True`, or a mask that
    is exactly causal), whichever kernel then runs them: the fused ones, or the math path's batched
    products (which dispatch sees as plain `bmm`). Their forward runs while `depth` > 0; the autograd
    nodes they create get sequence numbers in `spans`, which is how their backward is recognised."""

    def __init__(self):
        super().__init__()
        self.depth = 0
        self.spans: list[tuple[int, int]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not torch.nn.functional.scaled_dot_product_attention:
            return func(*args, **kwargs)
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
        bound = dict(zip(names, args)) | {k: v for k, v in kwargs.items() if k in names}
        q, k = bound.get("query"), bound.get("key")
        causal = bool(bound.get("is_causal", False))
        if not causal and isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and q.dim() >= 2:
            causal = is_causal_mask(bound.get("attn_mask"), int(q.shape[-2]), int(k.shape[-2]))
        if not causal:
            return func(*args, **kwargs)
        outside_backward = torch._C._current_graph_task_id() == -1
        start = torch._C._autograd._get_sequence_nr() if outside_backward else -1  # pyright: ignore[reportAttributeAccessIssue]  # private binding, no stub
        self.depth += 1
        try:
            return func(*args, **kwargs)
        finally:
            self.depth -= 1
            if start >= 0:
                self.spans.append((start, torch._C._autograd._get_sequence_nr()))  # pyright: ignore[reportAttributeAccessIssue]  # private binding, no stub

    def owns_backward(self) -> bool:
        """Whether the autograd node running now was created inside a causal attention call."""
        node = torch._C._current_autograd_node()
        if node is None or not self.spans:
            return False
        seq = node._sequence_nr()
        return any(a <= seq < b for a, b in self.spans)


def is_product_name(op: str) -> bool:
    """Whether an op's name says it multiplies matrices (a word such as mm, conv, rnn, attention)."""
    return bool(set(op.strip("_").split("_")) & _PRODUCT_WORDS)


def is_uncounted(packet) -> bool:
    """An op with no formula here whose FLOPs would go missing: one named as a product, or any op from
    outside torch's own namespaces (a library's custom kernel, opaque to the counter)."""
    namespace = getattr(packet, "_qualified_op_name", "aten::").partition("::")[0]
    return namespace not in _TORCH_NAMESPACES or is_product_name(packet.__name__)


def _other_flops(func, args, out) -> int:
    """Rough FLOPs of a non-matmul op: one per element written (pointwise) or read (reductions)."""
    name = func._overloadpacket.__name__
    if name in _IGNORED or name.startswith("_foreach"):
        return _foreach_flops(name, out)
    tags = getattr(func, "tags", ())
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if torch.Tag.pointwise in tags:
        return sum(t.numel() for t in outs if isinstance(t, torch.Tensor))
    if any(w in name for w in ("norm", "softmax", "sum", "mean", "var", "std", "amax", "max", "min", "nll_loss",
                               "cross_entropy", "gelu", "silu", "sigmoid", "tanh")):
        ins = [a for a in args if isinstance(a, torch.Tensor)]
        return max([t.numel() for t in ins] + [t.numel() for t in outs if isinstance(t, torch.Tensor)] + [0])
    return 0


def _foreach_flops(name: str, out) -> int:
    if not name.startswith("_foreach"):
        return 0
    outs = out if isinstance(out, (tuple, list)) else ()
    return sum(t.numel() for t in outs if isinstance(t, torch.Tensor))


@dataclass
class FlopCount:
    """What `count_flops` saw. Every number is FLOPs (2 per multiply-add) for the whole call."""

    total: int = 0  # matmul-class FLOPs of everything that ran (= hardware FLOPs)
    by_phase: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    by_op: dict[str, int] = field(default_factory=dict)
    by_module: dict[str, dict[str, int]] = field(default_factory=dict)  # module → phase → FLOPs (inclusive)
    # dtype the product ran in ('fp32', 'bf16', 'fp16', 'fp8', 'fp64'; 'tf32' for fp32 on CUDA with TF32
    # matmuls allowed) → phase → FLOPs: what a peak per dtype divides
    by_dtype: dict[str, dict[str, int]] = field(default_factory=dict)
    other: int = 0  # estimated softmax / norm / elementwise FLOPs, not in `total`
    # products (and custom ops) the counter has no formula for ('aten::name' → calls): FLOPs missing from `total`
    uncounted: dict[str, int] = field(default_factory=dict)
    # attention FLOPs of kernels that ran with their causal mask, per phase (counted dense in `total`)
    causal: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    result: Any = None  # what the function returned

    @property
    def model(self) -> int:
        """Forward + backward (recomputed work left out): the model FLOPs MFU counts."""
        return self.by_phase["forward"] + self.by_phase["backward"]

    @property
    def hardware(self) -> int:
        """Everything that ran, recomputation included: the hardware FLOPs HFU counts."""
        return self.total

    @property
    def model_causal_halved(self) -> int:
        """Model FLOPs with causal attention counted at half (the skipped upper triangle left out), the
        convention of FlashAttention's benchmark (`flops()`: `// (2 if causal else 1)`), the FlashAttention-2
        paper (§4.1) and Megatron-LM (`attn_layer_flops`). `model` counts it dense, as torch's
        FlopCounterMode does. What is halved: every `scaled_dot_product_attention` call with
        `is_causal=True` or an exactly causal mask (see `_CausalCalls`)."""
        return self.model - (self.causal["forward"] + self.causal["backward"]) // 2

    def model_by_dtype(self) -> dict[str, int]:
        """Model FLOPs (forward + backward) per dtype the products ran in."""
        return {d: p["forward"] + p["backward"] for d, p in self.by_dtype.items()}

    def hardware_by_dtype(self) -> dict[str, int]:
        """Hardware FLOPs (recompute included) per dtype the products ran in."""
        return {d: sum(p.values()) for d, p in self.by_dtype.items()}

    def table(self, depth: int | None = 2, root: bool = True):
        """Per-module DataFrame (inclusive counts: a block includes its layers), to `depth` levels.

        Module names are the class name of the outermost module followed by attribute names
        (`Transformer.blocks.0.attn.q`); 'Global' holds everything, including ops outside any module.
        """
        import pandas as pd

        rows = []
        for name, phases in self.by_module.items():
            level = 0 if name == "Global" else name.count(".") + 1
            if depth is not None and level > depth:
                continue
            if not root and name == "Global":
                continue
            tot = sum(phases.values())
            rows.append({"module": name, "level": level, **{p: phases.get(p, 0) for p in PHASES}, "total": tot,
                         "share": tot / self.total if self.total else 0.0})
        df = pd.DataFrame(rows, columns=["module", "level", *PHASES, "total", "share"])
        order = sorted(range(len(df)), key=lambda i: _module_sort_key(df.loc[i, "module"]))
        df = df.loc[order].reset_index(drop=True)
        df["module"] = [("  " * max(lv - 1, 0)) + m for m, lv in zip(df["module"], df["level"])]
        return df.drop(columns="level").set_index("module")

    def as_dict(self) -> dict[str, Any]:
        return {"total": self.total, "model": self.model, "hardware": self.hardware, "by_phase": dict(self.by_phase),
                "by_op": dict(self.by_op), "by_dtype": self.hardware_by_dtype(), "other_estimate": self.other,
                "model_causal_halved": self.model_causal_halved, "uncounted": dict(self.uncounted)}

    def __str__(self) -> str:
        p = self.by_phase
        text = (f"{self.total:,} FLOPs (matmul-class): forward {p['forward']:,}, backward {p['backward']:,}, "
                f"recompute {p['recompute']:,}; softmax/norm/elementwise ≈ {self.other:,} more (estimate, not in total)")
        if self.uncounted:
            text += "; not counted (no formula): " + ", ".join(f"{k} ×{n}" for k, n in self.uncounted.items())
        return text

    def _repr_html_(self) -> str:
        return f"<p>{self}</p>" + self.table()._repr_html_()


def _module_sort_key(name: str):
    if name == "Global":
        return (0,)
    parts = name.split(".")
    return (1, *[(0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts])


class _ModuleTracker:
    """Which module an op belongs to, in the forward, the backward and the recompute.

    Forward (and recompute): a stack of the modules whose forward is running, kept by global
    forward pre/post hooks. Backward: autograd numbers every graph node it creates
    (`sequence_nr`); each module's forward covers a range of those numbers, so the node the
    engine is executing (`torch._C._current_autograd_node()`) says which module's backward runs —
    residual branches and checkpointing cannot confuse it the way entry/exit hooks can.
    Names are the outermost module's class name followed by attribute names, and an op counts
    for its module and every enclosing one.
    """

    def __init__(self):
        self.names: dict[int, str] = {}
        self.stack: list[tuple[str, int]] = []
        self.spans: list[tuple[int, int, str]] = []  # (first, end) sequence numbers of a module's forward
        self._starts: list[tuple[int, int]] = []
        self._node_owner: dict[int, str | None] = {}
        self._handles: list = []

    def _name(self, mod) -> str:
        key = id(mod)
        if key not in self.names:
            self.names[key] = type(mod).__name__
            self._name_children(mod, self.names[key])
        return self.names[key]

    def _name_children(self, mod, prefix: str) -> None:
        for child_name, child in mod.named_children():
            if id(child) not in self.names:
                self.names[id(child)] = f"{prefix}.{child_name}"
                self._name_children(child, self.names[id(child)])

    def _pre(self, mod, _inputs) -> None:
        outside_backward = torch._C._current_graph_task_id() == -1
        seq = torch._C._autograd._get_sequence_nr() if outside_backward else -1  # pyright: ignore[reportAttributeAccessIssue]  # private binding, no stub
        self.stack.append((self._name(mod), seq))

    def _post(self, mod, _inputs, _output) -> None:
        if not self.stack:
            return
        name, start = self.stack.pop()
        if start >= 0:
            end = torch._C._autograd._get_sequence_nr()  # pyright: ignore[reportAttributeAccessIssue]  # private binding, no stub
            if end > start:
                import bisect

                # sorted by start, and for equal starts the outer (longer) span first, so that walking
                # back from the last span starting at or before a node meets the innermost one first
                key = (start, -end)
                i = bisect.bisect_right(self._starts, key)
                self._starts.insert(i, key)
                self.spans.insert(i, (start, end, name))

    def owner(self, phase: str) -> str | None:
        """The innermost module of the op running now (None: outside every module)."""
        if phase != "backward":
            return self.stack[-1][0] if self.stack else None
        if self.stack:  # a recomputation that stopped early leaves entries behind
            self.stack.clear()
        node = torch._C._current_autograd_node()
        if node is None:
            return None
        seq = node._sequence_nr()
        if seq in self._node_owner:
            return self._node_owner[seq]
        import bisect

        i = bisect.bisect_right(self._starts, (seq, float("inf"))) - 1
        found = None
        while i >= 0:
            first, end, name = self.spans[i]
            if first <= seq < end:
                found = name
                break
            i -= 1
        self._node_owner[seq] = found
        return found

    def __enter__(self):
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        self._handles = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post)]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []


def _with_ancestors(name: str | None) -> list[str]:
    out = ["Global"]
    if name:
        parts = name.split(".")
        out += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return out


def op_flops(func, args, kwargs, out) -> int:
    """FLOPs of one aten call as this counter books them: torch's formulas for products and convolutions,
    fused attention forward and backward (its recomputed scores included) and grouped products; 0 for
    everything else (pointwise work is not in the count). Used where a cost per op is needed
    (perflab.plan's roofline)."""
    from torch.utils.flop_counter import flop_registry

    packet = func._overloadpacket
    kwargs = kwargs or {}
    if packet in _GROUPED:
        return _grouped_mm_flops(args, kwargs)
    if packet in _RNN_FWD or packet in _RNN_BWD:
        return _rnn_flops(func, args)
    if packet in _VECTOR:
        return _vector_flops(func, args)
    if packet is aten.convolution_backward:  # torch's formula with the groups correction
        return _conv_backward_flops(flop_registry[packet], args, kwargs, out)
    if packet in _SDPA_FWD and args[1].dim() == 4:
        return _sdpa_forward_flops(func, args)
    if packet in _SDPA_BWD and args[1].dim() == 4:
        return sum(_sdpa_backward_flops(func, args))
    if packet in flop_registry:
        return int(flop_registry[packet](*args, **kwargs, out_val=out))
    return 0


class _CountingMode(TorchDispatchMode):
    def __init__(self, tracker: _ModuleTracker, result: FlopCount, causal: _CausalCalls | None = None):
        super().__init__()
        self.causal = causal
        from torch.utils.flop_counter import flop_registry

        self.tracker = tracker
        self.res = result
        self.registry = {k: v for k, v in flop_registry.items() if isinstance(k, torch._ops.OpOverloadPacket)}
        self.fwd = set(_SDPA_FWD)
        self.bwd = set(_SDPA_BWD)
        self.grouped = set(_GROUPED)
        self.rnn = set(_RNN_FWD) | set(_RNN_BWD)
        self.vector = set(_VECTOR)
        self.mod_counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(PHASES, 0))

    def _book(self, phase: str, n: int, op: str, owners: list[str], dtype: str = "fp32") -> None:
        if not n:
            return
        self.res.total += n
        per = self.res.by_dtype.setdefault(dtype, dict.fromkeys(PHASES, 0))
        per[phase] += n
        self.res.by_phase[phase] += n
        self.res.by_op[op] = self.res.by_op.get(op, 0) + n
        for name in owners:
            self.mod_counts[name][phase] += n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        in_backward = torch._C._current_graph_task_id() != -1
        phase = "forward" if not in_backward else ("recompute" if torch.is_grad_enabled() else "backward")
        op = packet.__name__
        counted = (packet in self.fwd or packet in self.bwd or packet in self.registry or packet in self.grouped
                   or packet in self.rnn or packet in self.vector)
        if not counted:
            if is_uncounted(packet):
                name = getattr(packet, "_qualified_op_name", f"aten::{op}")
                self.res.uncounted[name] = self.res.uncounted.get(name, 0) + 1
                return out
            try:
                self.res.other += _other_flops(func, args, out)
            except Exception:  # an estimate must never break the run it measures
                pass
            return out
        owners = _with_ancestors(self.tracker.owner(phase))
        dt = _operand_dtype(args, conv="convolution" in op)
        if self._causal(func, packet, phase, args, kwargs):
            before = dict(self.res.by_phase)
            self._count(func, packet, phase, op, owners, dt, args, kwargs, out)
            for ph in PHASES:
                self.res.causal[ph] += self.res.by_phase[ph] - before[ph]
            return out
        self._count(func, packet, phase, op, owners, dt, args, kwargs, out)
        return out

    def _causal(self, func, packet, phase, args, kwargs) -> bool:
        """Whether this product is part of a causal attention: a fused kernel run with its causal flag, or
        any product inside (or, in the backward, created by) a causal `scaled_dot_product_attention`."""
        if (packet in self.fwd or packet in self.bwd) and _is_causal(func, args, kwargs):
            return True
        if self.causal is None:
            return False
        if phase == "forward":
            return self.causal.depth > 0
        return self.causal.owns_backward()

    def _count(self, func, packet, phase, op, owners, dt, args, kwargs, out) -> None:
        if packet in self.grouped:
            self._book(phase, _grouped_mm_flops(args, kwargs), op, owners, dt)
        elif packet in self.rnn:
            self._book(phase, _rnn_flops(func, args), op, owners, dt)
        elif packet in self.vector:
            self._book(phase, _vector_flops(func, args), op, owners, dt)
        elif packet is aten.convolution_backward:
            self._book(phase, _conv_backward_flops(self.registry[packet], args, kwargs, out), op, owners, dt)
        elif (packet in self.fwd or packet in self.bwd) and args[1].dim() != 4:
            # variable-length (packed) attention: torch's own formula knows the layout
            if packet in self.registry:
                self._book(phase, int(self.registry[packet](*args, **kwargs, out_val=out)), op, owners, dt)
        elif packet in self.fwd:
            self._book(phase, _sdpa_forward_flops(func, args), op, owners, dt)
        elif packet in self.bwd:
            n, r = _sdpa_backward_flops(func, args)
            self._book(phase, n, op, owners, dt)
            self._book("recompute", r, op + " (scores recomputed)", owners, dt)
        else:
            self._book(phase, int(self.registry[packet](*args, **kwargs, out_val=out)), op, owners, dt)


_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64"}


def _operand_dtype(args, conv: bool = False) -> str:
    """The dtype a product ran in: that of its first floating-point operand of two or more dimensions
    (addmm's 1-D bias is passed over; autocast gives a product's operands one dtype). fp32 on CUDA with
    TF32 allowed counts as 'tf32': for matmuls `torch.backends.cuda.matmul.allow_tf32` (off by
    default), for convolutions (`conv`) `torch.backends.cudnn.allow_tf32` (on by default, so an fp32
    conv net's GPU MFU is against the TF32 peak). Any float8 counts as 'fp8'."""
    t = next((a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dim() >= 2), None)
    if t is None:  # a vector product (dot): its vectors' dtype
        t = next((a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()), None)
    if t is None:
        return "fp32"
    if "float8" in str(t.dtype):
        return "fp8"
    name = _DTYPE_NAMES.get(t.dtype, str(t.dtype).replace("torch.", ""))
    if name == "fp32" and t.is_cuda and (torch.backends.cudnn.allow_tf32 if conv else torch.backends.cuda.matmul.allow_tf32):
        return "tf32"
    return name


def count_flops(fn: Callable[..., Any], *args, **kwargs) -> FlopCount:
    """Run `fn(*args, **kwargs)` and count the FLOPs of everything it ran.

    Call `.backward()` inside `fn` to count the backward pass too (and the recomputation of
    activation checkpointing, booked as 'recompute'). Returns a `FlopCount`; `.result` holds what
    `fn` returned. Works on CPU, CUDA and MPS alike; counts attention on every device.
    """
    res = FlopCount()
    tracker = _ModuleTracker()
    causal = _CausalCalls()
    with tracker, causal, _CountingMode(tracker, res, causal) as mode:
        res.result = fn(*args, **kwargs)
    res.by_module = {k: dict(v) for k, v in mode.mod_counts.items()}
    return res
