"""The FLOPs of one aten call, as perflab's counter books them (`perflab.flops.counter`).

Products and convolutions take torch's own formulas (`torch.utils.flop_counter.flop_registry`), with
perflab's for what torch's counter misses or gets wrong: every fused attention kernel (forward, and a
backward that recomputes the scores), grouped products (mixture-of-experts layers), fused recurrent
layers (oneDNN's `mkldnn_rnn_layer`, cuDNN's `_cudnn_rnn`), matrix-vector products, and a grouped
convolution's weight gradient (`groups` times too large in torch's). `op_flops` is one call's total,
for a cost per operator (`perflab.plan`); the counter books the same formulas per phase.

Which ops are products (`is_uncounted`: a name that says product, or an op from outside torch's own
namespaces, with no formula here is named, never left at 0), the dtype a product ran in
(`operand_dtype`), and the rough FLOPs of everything else (`other_flops`: one per element written or
read) are here too.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def _ops(names: list[str]) -> list:
    return [getattr(aten, n) for n in names if hasattr(aten, n)]


# fused attention kernels (forward): outputs exclude the s×s probability matrix
SDPA_FWD = _ops([
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable", "_flash_attention_forward", "_efficient_attention_forward",
])
SDPA_BWD = _ops([
    "_scaled_dot_product_flash_attention_for_cpu_backward", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_cudnn_attention_backward",
    "_scaled_dot_product_fused_attention_overrideable_backward", "_flash_attention_backward",
    "_efficient_attention_backward",
])

# grouped products (mixture-of-experts layers run every expert's tokens in one call); torch's own
# counter has no formula for them, so an MoE's experts would count 0
GROUPED = _ops(["_grouped_mm"])

# recurrent layers run as one fused kernel per layer (oneDNN on a CPU, cuDNN on a GPU); torch's own counter
# has no formula for them, so an LSTM would count 0
RNN_FWD = _ops(["mkldnn_rnn_layer", "_cudnn_rnn"])
RNN_BWD = _ops(["mkldnn_rnn_layer_backward", "_cudnn_rnn_backward"])

# matrix-vector and vector products (nn.Linear on a 1-D input runs `mv`), not in torch's counter either
VECTOR = _ops(["mv", "addmv", "dot", "vdot", "addbmm"])

# the words of an op name (split at '_') that mark a product: an op named so that the counter has no formula
# for is *uncounted* and named as such (`FlopCount.uncounted`), never silently left at 0
PRODUCT_WORDS = {"mm", "bmm", "baddbmm", "addbmm", "matmul", "mv", "addmv", "dot", "vdot", "tensordot", "einsum",
                 "linear", "conv", "conv1d", "conv2d", "conv3d", "convolution", "depthwise2d", "depthwise3d", "rnn",
                 "lstm", "gru", "attention", "attn", "cdist", "gemm", "gemv"}
# torch's own op namespaces; an op from any other (a library's or the learner's custom op, such as
# flash_attn::_flash_attn_forward) is opaque to the counter, so it is named as uncounted whatever its name
TORCH_NAMESPACES = {"aten", "prims", "c10d", "_c10d_functional", "_c10d_functional_autograd", "profiler", "_dtensor",
                    "quantized_decomposed", "higher_order", "_quantized", "quantized", "rngprims", "debugprims"}

IGNORED = {
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


def sdpa_forward_flops(func, args) -> int:
    """FLOPs of a fused attention forward: scores Q·Kᵀ + attention over values P·V."""
    q, k, v = _operands(func, args[0], args[1], args[2])
    bh, sq, sk, dq, dv = _qkv_dims(q, k, v)
    return 2 * bh * sq * sk * dq + 2 * bh * sq * sk * dv


def sdpa_backward_flops(func, args) -> tuple[int, int]:
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


def grouped_mm_flops(args, kwargs) -> int:
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


def conv_backward_flops(registry_formula, args, kwargs, out) -> int:
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


def rnn_flops(func, args) -> int:
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


def vector_flops(func, args) -> int:
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


def is_causal_kernel(func, args, kwargs) -> bool:
    """Whether an attention kernel ran with its causal mask (`is_causal`, or a non-zero
    `custom_mask_type` for the memory-efficient kernels), read from its schema by name."""
    for i, a in enumerate(func._schema.arguments):
        if a.name not in ("is_causal", "custom_mask_type"):
            continue
        v = kwargs[a.name] if a.name in kwargs else args[i] if i < len(args) else a.default_value
        return bool(v)
    return False



def is_product_name(op: str) -> bool:
    """Whether an op's name says it multiplies matrices (a word such as mm, conv, rnn, attention)."""
    return bool(set(op.strip("_").split("_")) & PRODUCT_WORDS)


def is_uncounted(packet) -> bool:
    """An op with no formula here whose FLOPs would go missing: one named as a product, or any op from
    outside torch's own namespaces (a library's custom kernel, opaque to the counter)."""
    namespace = getattr(packet, "_qualified_op_name", "aten::").partition("::")[0]
    return namespace not in TORCH_NAMESPACES or is_product_name(packet.__name__)


def other_flops(func, args, out) -> int:
    """Rough FLOPs of a non-matmul op: one per element written (pointwise) or read (reductions)."""
    name = func._overloadpacket.__name__
    if name in IGNORED or name.startswith("_foreach"):
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



def op_flops(func, args, kwargs, out) -> int:
    """FLOPs of one aten call as this counter books them: torch's formulas for products and convolutions,
    fused attention forward and backward (its recomputed scores included) and grouped products; 0 for
    everything else (pointwise work is not in the count). Used where a cost per op is needed
    (perflab.plan's roofline)."""
    from torch.utils.flop_counter import flop_registry

    packet = func._overloadpacket
    kwargs = kwargs or {}
    if packet in GROUPED:
        return grouped_mm_flops(args, kwargs)
    if packet in RNN_FWD or packet in RNN_BWD:
        return rnn_flops(func, args)
    if packet in VECTOR:
        return vector_flops(func, args)
    if packet is aten.convolution_backward:  # torch's formula with the groups correction
        return conv_backward_flops(flop_registry[packet], args, kwargs, out)
    if packet in SDPA_FWD and args[1].dim() == 4:
        return sdpa_forward_flops(func, args)
    if packet in SDPA_BWD and args[1].dim() == 4:
        return sum(sdpa_backward_flops(func, args))
    if packet in flop_registry:
        return int(flop_registry[packet](*args, **kwargs, out_val=out))
    return 0



DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64"}


def operand_dtype(args, conv: bool = False) -> str:
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
    name = DTYPE_NAMES.get(t.dtype, str(t.dtype).replace("torch.", ""))
    if name == "fp32" and t.is_cuda and (torch.backends.cudnn.allow_tf32 if conv else torch.backends.cuda.matmul.allow_tf32):
        return "tf32"
    return name
