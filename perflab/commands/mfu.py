"""`perflab mfu`: model (and hardware) FLOPs utilization from throughput, or of a step measured here."""

from __future__ import annotations

from perflab.commands._args import dtype, emit, positive_float, positive_int
from perflab.commands.flops import add_model_arguments, config_from_args


def register(sub) -> None:
    p = sub.add_parser("mfu", help="MFU/HFU from tokens/s and FLOPs per token, or of a training step measured here")
    p.add_argument("--tokens-per-s", type=positive_float, help="observed throughput, tokens per second (all devices)")
    p.add_argument("--step-time", type=positive_float, help="seconds per step (with --tokens-per-step, or --batch and --seq)")
    p.add_argument("--tokens-per-step", type=positive_float, help="tokens per step (global batch × sequence length)")
    p.add_argument("--flops-per-token", type=positive_float, help="model FLOPs per token (fwd + bwd)")
    p.add_argument("--hardware-flops-per-token", type=positive_float, help="hardware FLOPs per token (with recompute) for HFU")
    p.add_argument("--params", type=positive_float, help="N for PaLM's 6N + 12·L·H·Q·T (with --layers --heads --head-dim --seq)")
    p.add_argument("--convention", default=None,
                   help="with --preset/shape flags: exact (default), palm, megatron, kaplan, megatron_recompute, korthikanti_selective")
    p.add_argument("--devices", type=positive_int, default=1, help="number of accelerators (default 1)")
    p.add_argument("--peak", type=positive_float, help="peak TFLOP/s per device (dense)")
    p.add_argument("--accelerator", help="take the peak from perflab's table (h100-sxm, a100-sxm-80gb, ...)")
    p.add_argument("--dtype", type=dtype, default=None, help="dtype of the peak (default: bf16 for an accelerator, this device's for --measure)")
    p.add_argument("--measure", action="store_true", help="measure a training step of --preset on this device")
    p.add_argument("--steps", type=positive_int, default=5, help="timed steps with --measure (default 5)")
    p.add_argument("--checkpointing", action="store_true", help="activation checkpointing (HFU counts the recompute)")
    p.add_argument("--device", help="cpu, cuda, cuda:N or mps for --measure (default: the best available)")
    add_model_arguments(p, seq_help="sequence length T")
    p.add_argument("--json", action="store_true", help="print JSON: {mfu, achieved_tflops, peak_tflops, hfu, ...}")
    p.set_defaults(func=run)


def _pct(x):
    return "n/a" if x is None else f"{x:.1%}"


def run(args) -> int:
    if args.measure:
        return _measure(args)
    from perflab.core.errors import InputError
    from perflab.flops.mfu import run_utilization
    from perflab.flops.transformer import (
        CONVENTIONS,
        exact_flops,
        flops_per_token,
        palm_flops_per_token,
    )

    if args.tokens_per_s is not None:
        tps = args.tokens_per_s
    elif args.step_time is not None and (args.tokens_per_step or (args.seq and args.batch)):
        tps = (args.tokens_per_step or args.batch * args.seq) / args.step_time
    else:
        raise InputError("give --tokens-per-s, or --step-time with --tokens-per-step (or --batch and --seq)")

    hw = args.hardware_flops_per_token
    if args.flops_per_token is not None:
        fpt, how = args.flops_per_token, "given"
    elif args.params is not None:
        missing = [f"--{f.replace('_', '-')}" for f in ("layers", "heads", "head_dim", "seq") if getattr(args, f) is None]
        if missing:
            raise InputError(f"PaLM's formula 6N + 12·L·H·Q·T needs {', '.join(missing)} with --params")
        fpt = palm_flops_per_token(args.params, args.layers, args.heads, args.head_dim, args.seq)
        how = "palm: 6N + 12·L·H·Q·T (Chowdhery et al. 2022, App. B)"
    elif args.preset or args.layers:
        cfg = config_from_args(args)
        seq = args.seq or cfg.seq_len
        if seq > cfg.seq_len:
            cfg = cfg.with_(seq_len=seq)
        conv = args.convention or "exact"
        if conv not in CONVENTIONS:
            raise InputError(f"unknown convention {conv!r}: use one of {', '.join(CONVENTIONS)}")
        fpt, how = flops_per_token(cfg, seq)[conv], f"{conv} for {cfg.name} at s={seq}"
        if hw is None:
            ex = exact_flops(cfg, 1, seq, checkpointing=args.checkpointing)
            hw = ex.hardware / seq
    else:
        raise InputError("give --flops-per-token, or --params with --layers --heads --head-dim --seq, or --preset")

    peak, accel = args.peak, args.accelerator
    if peak is None and accel is None:
        from perflab.core.device import describe, pick_device
        from perflab.core.hardware import peaks_for
        from perflab.workload.train import default_dtype

        dev = pick_device(args.device)
        d = args.dtype or default_dtype(dev)
        peak = peaks_for(describe(dev)).get(d)
        if peak is None:
            raise InputError(f"this device's {d} peak is unknown: give --peak or --accelerator")
    u = run_utilization(tps, fpt, devices=args.devices, peak_tflops=peak, accelerator=accel, dtype=args.dtype or "bf16",
                    hardware_flops_per_token=hw)
    out = u.as_dict() | {"flops_counted_as": how}
    text = (f"{tps:,.6g} tokens/s × {fpt:.4g} FLOPs/token ({how}) over {u.devices} device(s) = "
            f"{u.achieved_tflops:.4g} TFLOP/s per device; peak {u.peak_tflops:g} TFLOP/s ({u.peak_source})\n"
            f"MFU = {_pct(u.mfu)}" + (f"   HFU = {_pct(u.hfu)} (hardware FLOPs/token {u.hardware_flops_per_token:.4g})" if u.hfu else "")
            + (f"\nno MFU shown: {u.suspect}" if u.suspect else ""))
    emit(out, args.json, text)
    return 0


def _measure(args) -> int:
    from perflab.core.errors import InputError
    from perflab.flops.step import measure_step

    if not args.preset:
        raise InputError("--measure needs --preset (e.g. tiny-gpt, tiny-llama, small-gpt, small-llama)")
    cfg = config_from_args(args)
    r = measure_step(cfg, batch=args.batch if args.batch else 8, seq=args.seq, steps=args.steps,
                     checkpointing=args.checkpointing, device=args.device, dtype=args.dtype)
    out = r.as_dict() | {"mfu": r.mfu_spec, "hfu": r.hfu_spec, "achieved_tflops": r.model_tflops}
    emit(out, args.json, str(r))
    return 0
