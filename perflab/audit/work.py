"""What the learner's step computes: its parameters (total and active), 6N·T, the counted FLOPs and the
terms of the gap between the two, and the cost of products that ran in float64.

Counted FLOPs are perflab's counter's (`perflab.flops.counter`): matmul-class FLOPs per phase and dtype,
attention counted dense. 6N·T is Kaplan's: N the active parameters (a mixture of experts' routed
experts a token does not visit left out), T the tokens of one step; an encoder–decoder counts each
side's parameters on its own stream's tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from perflab.audit.report import GapTerm, Work

if TYPE_CHECKING:
    from perflab.flops.counter import FlopCount
    from perflab.flops.mfu import Utilization


def first_int(cfg: Any, names: tuple[str, ...]) -> int | None:
    """The first of a config's attributes `names` that is a positive whole number, else None."""
    for n in names:
        v = getattr(cfg, n, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def count_params(model: torch.nn.Module, cfg: Any = None) -> tuple[int, int, str]:
    """(total, active, how) parameters. Total counts every parameter once (tied weights once; a DTensor
    of an FSDP-sharded model by its global shape, so the count is the model's, not the local shard's).
    Active: for a mixture of experts, total less the routed experts a token does not visit, (E − k) of E
    per MoE layer, with E and k from the config (num_local_experts/num_experts/n_routed_experts,
    num_experts_per_tok/top_k); so active = routed × k/E + everything else. Shared experts (DeepSeek's
    `shared_experts`, Qwen2-MoE's `shared_expert`), which every token visits, are counted whole."""
    total = 0
    for p in model.parameters():
        total += int(p.numel())  # a DTensor reports its global numel
    e = first_int(cfg, ("num_local_experts", "num_experts", "n_routed_experts"))
    k = first_int(cfg, ("num_experts_per_tok", "top_k", "moe_topk"))
    if not e or not k or e <= k:
        return total, total, "dense: every parameter is used by every token"
    idle = 0
    layers = 0
    done: list[str] = []
    for name, mod in model.named_modules():
        last = name.rpartition(".")[2].lower()
        if not last.endswith("experts") or "shared" in last or any(name.startswith(d + ".") for d in done):
            continue
        n = sum(int(p.numel()) for p in mod.parameters())
        if n == 0:
            continue
        done.append(name)
        layers += 1
        idle += n * (e - k) // e
    return total, total - idle, f"mixture of experts: {layers} MoE layer(s), top-{k} of {e} experts per token"


def _embedding_only(model: torch.nn.Module) -> list[torch.Tensor]:
    """Weights of embedding tables that no product uses as a weight (untied token and position
    embeddings), each once: in N for 6N, but a lookup does no multiply-add."""
    lin = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    out: dict[int, torch.Tensor] = {}
    for m in model.modules():
        if isinstance(m, torch.nn.Embedding) and id(m.weight) not in lin:
            out[id(m.weight)] = m.weight
    return list(out.values())


def _encoder_only_params(model: torch.nn.Module) -> set[int]:
    """ids of the parameters only an encoder–decoder's encoder uses (not its decoder, not its output
    head: a token embedding shared by both sides and tied to the head belongs to the decoder's tokens)."""
    get_enc, get_dec = getattr(model, "get_encoder", None), getattr(model, "get_decoder", None)
    if not callable(get_enc) or not callable(get_dec):
        return set()
    try:
        enc, dec = get_enc(), get_dec()
    except Exception:  # noqa: BLE001 - a model that cannot say: no split
        return set()
    if not isinstance(enc, torch.nn.Module) or not isinstance(dec, torch.nn.Module):
        return set()
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    others = {id(p) for p in dec.parameters()}
    if isinstance(head, torch.nn.Module):
        others |= {id(p) for p in head.parameters()}
    return {id(p) for p in enc.parameters()} - others


def six_n_t(model: torch.nn.Module, params_active: int, tokens: int,
            streams: tuple[int, int] | None = None) -> tuple[int, int, str]:
    """(6N·T, the embedding lookups' share of it, how it was made). One stream: 6 · N_active · T. An
    encoder–decoder (`streams` = (T_enc, T_dec)): each parameter works on its own stream's tokens, so
    6 · (N_enc · T_enc + N_dec · T_dec), N_enc the encoder's own parameters and N_dec the rest (decoder,
    output head, shared embedding). The lookups' share is −6 · (table parameters) · (their stream's T)."""
    tables = _embedding_only(model)
    enc_only = _encoder_only_params(model) if streams else set()
    if not streams or not enc_only:
        return 6 * params_active * tokens, -6 * sum(int(w.numel()) for w in tables) * tokens, ""
    t_enc, t_dec = streams
    n_enc = sum(int(p.numel()) for p in model.parameters() if id(p) in enc_only)
    n_dec = params_active - n_enc
    emb = -6 * sum(int(w.numel()) * (t_enc if id(w) in enc_only else t_dec) for w in tables)
    how = (f"encoder–decoder: 6·(N_enc·T_enc + N_dec·T_dec), N_enc = {n_enc:,} encoder parameters on "
           f"T_enc = {t_enc:,} encoder tokens, N_dec = {n_dec:,} (decoder, output head, shared embedding) on "
           f"T_dec = {t_dec:,} decoder tokens")
    return 6 * (n_enc * t_enc + n_dec * t_dec), emb, how


def count_work(fc: FlopCount, model: torch.nn.Module, cfg: Any, tokens: int | None,
               streams: tuple[int, int] | None = None) -> Work:
    """The step's `Work` from the FLOP counter's result `fc` (`perflab.flops.counter.count_flops`) on
    `model` (its config `cfg`, for a mixture of experts' E and k), `tokens` per step (None: no 6N·T) and
    an encoder–decoder's (encoder, decoder) token `streams`. Its `uncounted` ops are filled in later,
    from the profiled step (`perflab.audit.ops.uncounted`)."""
    params_total, params_active, moe_how = count_params(model, cfg)
    model_flops = fc.model
    six_n, emb, six_n_how = six_n_t(model, params_active, tokens, streams) if tokens else (None, 0, "")
    gap: list[GapTerm] = []
    if six_n is not None:
        attn = sum(v for k, v in fc.by_op.items() if "attention" in k and "recomputed" not in k)
        bmm = sum(v for k, v in fc.by_op.items() if k in ("bmm", "baddbmm"))
        gap.append(GapTerm("attention (scores and values products, not in 6N; counted dense)", attn + bmm))
        gap.append(GapTerm("embedding tables (in N, but a lookup does no multiply-add)", emb))
        if params_active != params_total:
            gap.append(GapTerm(f"experts not visited ({params_total - params_active:,} parameters): left out of N "
                               f"already ({moe_how})", 0))
        rest = "the rest (biases and norm weights in N; routers, convolutions, anything else"
        if streams and streams[0] != streams[1]:
            rest += ("; the decoder's cross-attention keys and values, in N_dec at T_dec but run on the encoder's "
                     "T_enc tokens")
        if fc.uncounted:
            rest += "; less the FLOPs of the uncounted ops named above"
        gap.append(GapTerm(rest + ")", model_flops - six_n - (attn + bmm) - emb))
    return Work(int(model_flops), {d: int(v) for d, v in fc.hardware_by_dtype().items()}, int(fc.hardware),
                int(fc.model_causal_halved), params_total, params_active, six_n, six_n_how, gap)


def float64_cause(fc: FlopCount, u: Utilization, dev: torch.device) -> list[str]:
    """A step whose products ran in float64: named as a cause with what it costs against float32 on this
    device (each dtype's FLOPs at its own rate; float32's is its MFU basis, `perflab.flops.mfu.mfu_basis`:
    the datasheet peak, or the measured ceiling)."""
    f64 = fc.hardware_by_dtype().get("fp64", 0)
    if not f64 or "fp64" not in u.bases:
        return []
    from perflab.flops.mfu import mfu_basis

    r64 = float(u.bases["fp64"].tflops or 0.0)
    try:
        b32 = mfu_basis(dev, "fp32")
        r32, how = float(b32.tflops or 0.0), f"fp32's basis, {b32.label()}"
    except Exception:  # noqa: BLE001 - without a float32 rate the cost is not said, the cause still is
        r32, how = 0.0, "fp32"
    share = f64 / max(fc.hardware, 1)
    line = f"float64: {share:.0%} of the step's matmul-class FLOPs ran in float64"
    if r64 > 0 and r32 > 0:
        lost = f64 / (r64 * 1e12) - f64 / (r32 * 1e12)
        if lost > 0:
            line += (f", at {r64:.3g} TFLOP/s against {how} ({r32 / r64:.2g}× the rate): at those rates they take "
                     f"{lost * 1e3:.3g} ms more per step than in float32")
    return [line + "; training rarely needs float64: build the model and batches in float32 (model.float())"]
