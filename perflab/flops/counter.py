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
in `uncounted`, never silently left at 0. The formulas, one aten call at a time, are `perflab.flops.aten`'s
(`op_flops` gives one call's total, as the counter books it).

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

from perflab.core.jsonable import JSON
from perflab.flops import aten as ops
from perflab.flops.aten import op_flops

PHASES = ("forward", "backward", "recompute")

aten = torch.ops.aten

__all__ = ["PHASES", "FlopCount", "count_flops", "count_flops_with", "is_causal_mask", "op_flops"]

# the ops the counter has formulas for (`perflab.flops.aten`), read when a count starts
_SDPA_FWD = ops.SDPA_FWD
_SDPA_BWD = ops.SDPA_BWD
_GROUPED = ops.GROUPED
_RNN_FWD = ops.RNN_FWD
_RNN_BWD = ops.RNN_BWD
_VECTOR = ops.VECTOR


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

    def as_dict(self) -> JSON:
        """The counts, for a command's JSON."""
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



class _CountingMode(TorchDispatchMode):
    def __init__(self, tracker: _ModuleTracker, result: FlopCount, causal: _CausalCalls | None = None,
                 other: Callable[..., int] = ops.other_flops):
        super().__init__()
        self.causal = causal
        self.other = other
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
            if ops.is_uncounted(packet):
                name = getattr(packet, "_qualified_op_name", f"aten::{op}")
                self.res.uncounted[name] = self.res.uncounted.get(name, 0) + 1
                return out
            try:
                self.res.other += self.other(func, args, out)
            except Exception:  # an estimate must never break the run it measures
                pass
            return out
        owners = _with_ancestors(self.tracker.owner(phase))
        dt = ops.operand_dtype(args, conv="convolution" in op)
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
        if (packet in self.fwd or packet in self.bwd) and ops.is_causal_kernel(func, args, kwargs):
            return True
        if self.causal is None:
            return False
        if phase == "forward":
            return self.causal.depth > 0
        return self.causal.owns_backward()

    def _count(self, func, packet, phase, op, owners, dt, args, kwargs, out) -> None:
        if packet in self.grouped:
            self._book(phase, ops.grouped_mm_flops(args, kwargs), op, owners, dt)
        elif packet in self.rnn:
            self._book(phase, ops.rnn_flops(func, args), op, owners, dt)
        elif packet in self.vector:
            self._book(phase, ops.vector_flops(func, args), op, owners, dt)
        elif packet is aten.convolution_backward:
            self._book(phase, ops.conv_backward_flops(self.registry[packet], args, kwargs, out), op, owners, dt)
        elif (packet in self.fwd or packet in self.bwd) and args[1].dim() != 4:
            # variable-length (packed) attention: torch's own formula knows the layout
            if packet in self.registry:
                self._book(phase, int(self.registry[packet](*args, **kwargs, out_val=out)), op, owners, dt)
        elif packet in self.fwd:
            self._book(phase, ops.sdpa_forward_flops(func, args), op, owners, dt)
        elif packet in self.bwd:
            n, r = ops.sdpa_backward_flops(func, args)
            self._book(phase, n, op, owners, dt)
            self._book("recompute", r, op + " (scores recomputed)", owners, dt)
        else:
            self._book(phase, int(self.registry[packet](*args, **kwargs, out_val=out)), op, owners, dt)


def count_flops(fn: Callable[..., Any], *args, **kwargs) -> FlopCount:
    """Run `fn(*args, **kwargs)` and count the FLOPs of everything it ran.

    Call `.backward()` inside `fn` to count the backward pass too (and the recomputation of
    activation checkpointing, booked as 'recompute'). Returns a `FlopCount`; `.result` holds what
    `fn` returned. Works on CPU, CUDA and MPS alike; counts attention on every device.
    """
    return count_flops_with(ops.other_flops, fn, *args, **kwargs)


def count_flops_with(other: Callable[..., int], fn: Callable[..., Any], *args, **kwargs) -> FlopCount:
    """`count_flops`, with `other(func, args, out)` as the estimate of each non-product op's FLOPs (the
    `other` column; default `perflab.flops.aten.other_flops`). An estimate that raises is skipped: it
    never breaks the run it measures."""
    res = FlopCount()
    tracker = _ModuleTracker()
    causal = _CausalCalls()
    with tracker, causal, _CountingMode(tracker, res, causal, other) as mode:
        res.result = fn(*args, **kwargs)
    res.by_module = {k: dict(v) for k, v in mode.mod_counts.items()}
    return res
