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
device.

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
    result: Any = None  # what the function returned

    @property
    def model(self) -> int:
        """Forward + backward (recomputed work left out): the model FLOPs MFU counts."""
        return self.by_phase["forward"] + self.by_phase["backward"]

    @property
    def hardware(self) -> int:
        """Everything that ran, recomputation included: the hardware FLOPs HFU counts."""
        return self.total

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
                "by_op": dict(self.by_op), "by_dtype": self.hardware_by_dtype(), "other_estimate": self.other}

    def __str__(self) -> str:
        p = self.by_phase
        return (f"{self.total:,} FLOPs (matmul-class): forward {p['forward']:,}, backward {p['backward']:,}, "
                f"recompute {p['recompute']:,}; softmax/norm/elementwise ≈ {self.other:,} more (estimate, not in total)")

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


class _CountingMode(TorchDispatchMode):
    def __init__(self, tracker: _ModuleTracker, result: FlopCount):
        super().__init__()
        from torch.utils.flop_counter import flop_registry

        self.tracker = tracker
        self.res = result
        self.registry = {k: v for k, v in flop_registry.items() if isinstance(k, torch._ops.OpOverloadPacket)}
        self.fwd = set(_SDPA_FWD)
        self.bwd = set(_SDPA_BWD)
        self.grouped = set(_GROUPED)
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
        counted = packet in self.fwd or packet in self.bwd or packet in self.registry or packet in self.grouped
        if not counted:
            try:
                self.res.other += _other_flops(func, args, out)
            except Exception:  # an estimate must never break the run it measures
                pass
            return out
        owners = _with_ancestors(self.tracker.owner(phase))
        dt = _operand_dtype(args, conv="convolution" in op)
        if packet in self.grouped:
            self._book(phase, _grouped_mm_flops(args, kwargs), op, owners, dt)
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
        return out


_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64"}


def _operand_dtype(args, conv: bool = False) -> str:
    """The dtype a product ran in: that of its first floating-point operand of two or more dimensions
    (addmm's 1-D bias is passed over; autocast gives a product's operands one dtype). fp32 on CUDA with
    TF32 allowed counts as 'tf32': for matmuls `torch.backends.cuda.matmul.allow_tf32` (off by
    default), for convolutions (`conv`) `torch.backends.cudnn.allow_tf32` (on by default, so an fp32
    conv net's GPU MFU is against the TF32 peak). Any float8 counts as 'fp8'."""
    t = next((a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dim() >= 2), None)
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
    with tracker, _CountingMode(tracker, res) as mode:
        res.result = fn(*args, **kwargs)
    res.by_module = {k: dict(v) for k, v in mode.mod_counts.items()}
    return res
