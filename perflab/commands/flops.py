"""`perflab flops`: FLOPs of a transformer training step under every common convention."""

from __future__ import annotations

from perflab.commands._args import emit, positive_int


def add_shape_arguments(p) -> None:
    """The flags that describe a transformer's shape (shared by flops, mfu and memory)."""
    p.add_argument("--layers", type=positive_int, help="L, transformer layers")
    p.add_argument("--hidden", type=positive_int, help="h, hidden size")
    p.add_argument("--heads", type=positive_int, help="a, attention heads")
    p.add_argument("--kv-heads", type=positive_int, help="K/V heads (grouped-query attention; default: = heads)")
    p.add_argument("--head-dim", type=positive_int, help="head size (default: hidden / heads)")
    p.add_argument("--ffn", type=positive_int, help="MLP width (default: 4h, or 8h/3 rounded up to 256 with --glu)")
    p.add_argument("--glu", action="store_true", default=None, help="SwiGLU MLP (three matrices)")
    p.add_argument("--vocab", type=positive_int, help="V, vocabulary size")
    p.add_argument("--tied", action="store_true", default=None, help="output layer shares the input embedding")
    p.add_argument("--no-bias", action="store_true", help="no biases in linear layers and norms")
    p.add_argument("--rotary", action="store_true", help="rotary positions (no learned position table)")


def add_model_arguments(p, *, seq_help: str = "sequence length (default: the model's context)") -> None:
    """The model flags `perflab flops` and `perflab mfu` share: a preset, the shape, s and b."""
    p.add_argument("--preset", help="a named shape (gpt2-small, llama2-7b, palm-540b, ...); flags below override its fields")
    add_shape_arguments(p)
    p.add_argument("--seq", type=positive_int, help=seq_help)
    p.add_argument("--batch", type=positive_int, default=1, help="b, sequences per step (default 1)")


def shape_changes(args) -> dict:
    """The ModelConfig fields the shape flags set (only those given)."""
    changes = {}
    for flag, field in (("layers", "layers"), ("hidden", "hidden"), ("heads", "heads"), ("kv_heads", "kv_heads"),
                        ("head_dim", "head_dim"), ("ffn", "ffn"), ("vocab", "vocab")):
        v = getattr(args, flag, None)
        if v is not None:
            changes[field] = v
    if getattr(args, "glu", None):
        changes["glu"] = True
    if getattr(args, "tied", None):
        changes["tied"] = True
    if getattr(args, "no_bias", False):
        changes["bias"] = False
    if getattr(args, "rotary", False):
        changes["positions"] = "rotary"
    return changes


def config_from_args(args):
    """A ModelConfig from --preset and/or the shape flags; a missing required flag is one line."""
    from perflab.core.errors import InputError
    from perflab.workload.models import ModelConfig, preset

    changes = shape_changes(args)
    if args.preset:
        cfg = preset(args.preset)
        return cfg.with_(**changes) if changes else cfg
    missing = [f"--{f}" for f in ("layers", "hidden", "heads", "vocab") if f not in changes]
    if missing:
        raise InputError(f"give --preset NAME or the model's shape: missing {', '.join(missing)}")
    seq = getattr(args, "seq", None) or 2048
    changes.setdefault("tied", False)
    return ModelConfig(name="custom", seq_len=seq, **changes)


def register(sub) -> None:
    p = sub.add_parser("flops", help="FLOPs per token and per step of a transformer under every convention")
    add_model_arguments(p)
    p.add_argument("--checkpointing", action="store_true", help="activation checkpointing (for the exact hardware count)")
    p.add_argument("--json", action="store_true",
                   help="print JSON: {flops_per_token: {megatron_recompute, megatron, korthikanti_selective, palm, kaplan, exact}, params, ...}")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.flops.transformer import (
        CONVENTION_INFO,
        CONVENTIONS,
        conventions_frame,
        exact_flops,
        flops_per_token,
        palm_params,
    )
    from perflab.workload.models import non_embedding_params, param_count

    cfg = config_from_args(args)
    seq = args.seq or cfg.seq_len
    if seq > cfg.seq_len:
        cfg = cfg.with_(seq_len=seq)
    per_tok = flops_per_token(cfg, seq)
    tokens = args.batch * seq
    ex = exact_flops(cfg, args.batch, seq, checkpointing=args.checkpointing)
    out = {
        "config": cfg.as_dict(), "params": param_count(cfg), "params_palm": palm_params(cfg),
        "params_non_embedding": non_embedding_params(cfg), "seq": seq, "batch": args.batch, "tokens_per_step": tokens,
        "flops_per_token": per_tok,
        "flops_per_step": {k: v * tokens for k, v in per_tok.items()},
        "exact": ex.as_dict(),
        "exact_hardware_flops_per_token": ex.hardware / tokens,
        "sources": {k: CONVENTION_INFO[k].source for k in CONVENTIONS},
    }
    df = conventions_frame(cfg, seq, args.batch, checkpointing=args.checkpointing)
    lines = [f"{cfg.name}: L={cfg.layers} h={cfg.hidden} a={cfg.heads} kv={cfg.n_kv} d={cfg.d_head} f={cfg.d_ff}"
             f"{' GLU' if cfg.glu else ''} V={cfg.vocab} {'tied' if cfg.tied else 'untied'} · N = {param_count(cfg):,} parameters"
             f" · b={args.batch} s={seq} ({tokens:,} tokens per step)", "",
             f"{'convention':46s} {'FLOPs/token':>12s} {'FLOPs/step':>12s} {'vs exact':>9s}  source"]
    for name, r in df.iterrows():
        lines.append(f"{name:46s} {r.flops_per_token:12.4g} {r.flops_per_step:12.4g} {r.vs_exact_model:+9.1%}  {r.source}")
    lines += ["", "exact count by component (FLOPs per step; matmul-class: norms, softmax, elementwise not included):"]
    lines.append(f"{'component':12s} {'forward':>12s} {'backward':>12s} {'recompute':>12s}")
    for comp, r in ex.frame().iterrows():
        lines.append(f"{comp:12s} {r.forward:12.4g} {r.backward:12.4g} {r.recompute:12.4g}")
    emit(out, args.json, "\n".join(lines))
    return 0
