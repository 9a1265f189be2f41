"""`perflab memory`: predict the memory of a training step on one GPU.

    perflab memory --params 7.5e9 --precision mixed --grad-dtype fp16 --zero 1 --dp 64
    perflab memory --preset llama2-7b --batch 1 --seq 4096 --recompute selective --json
    perflab memory --layers 32 --hidden 4096 --heads 32 --vocab 32000 --batch 1 --seq 4096 --tp 8 --sp
    perflab memory --params 7e9 --gpus 64 --tp 8 --pp 2 --mbs 2 --gbs 1024     # batch arithmetic too
    perflab memory --measure --preset small-gpt --batch 2 [--seq 128] [--checkpointing] --json   # measured here
"""

from __future__ import annotations

import argparse

from perflab.commands._args import emit, positive_float, positive_int
from perflab.commands.flops import add_shape_arguments, shape_changes
from perflab.core.errors import InputError


def add_model_args(p: argparse.ArgumentParser) -> None:
    """Flags that describe a model: a preset, or its shape (flags override a preset's fields)."""
    g = p.add_argument_group("model")
    g.add_argument("--params", type=positive_float, help="parameter count N (e.g. 7.5e9); or give a shape/preset")
    g.add_argument("--preset", help="a named shape: gpt2-small … gpt3-175b, llama2-7b/13b/70b, tiny-gpt, small-llama, ...")
    add_shape_arguments(g)


def model_config_from_args(args):
    """A `ModelConfig` from --preset (with the shape flags and a longer --seq overriding its
    fields), or from a full shape (--layers --hidden --heads --vocab, read as `perflab flops` reads
    it, so the parameter count is exact); None when neither is given (then --params, or the shape
    alone for activations)."""
    from perflab.commands.flops import config_from_args
    from perflab.workload.models import preset

    if not getattr(args, "preset", None):
        if args.params is None and all(getattr(args, f, None) for f in ("layers", "hidden", "heads", "vocab")):
            return config_from_args(args)
        return None
    cfg = preset(args.preset)
    changes = shape_changes(args)
    if getattr(args, "seq", None) and args.seq > cfg.seq_len:
        changes["seq_len"] = args.seq
    if ("heads" in changes or "hidden" in changes) and "kv_heads" not in changes:
        changes["kv_heads"] = None
    return cfg.with_(**changes) if changes else cfg


def register(sub) -> None:
    p = sub.add_parser("memory", help="predict the memory of a training step (model states, ZeRO, activations, batch sizes)",
                       description="Bytes on one GPU: weights, master weights, gradients, optimizer states (per ZeRO "
                                   "stage) and activations (Korthikanti et al. 2022); GB = 1e9 bytes.")
    add_model_args(p)
    t = p.add_argument_group("training")
    t.add_argument("--precision", default=None, choices=["fp32", "mixed", "bf16"],
                   help="fp32; mixed (16-bit weights + fp32 master weights and states); bf16 (pure). Default mixed "
                        "(with --measure: fp32; mixed is not measured)")
    t.add_argument("--grad-dtype", choices=["fp32", "bf16", "fp16"],
                   help="gradient dtype (default: fp32 for fp32 and mixed → 18 bytes/param with AdamW; fp16 gives the ZeRO paper's 16)")
    t.add_argument("--optimizer", default="adamw",
                   help="adamw, adamw-fused, adam8bit, sgd (with momentum), lion, adafactor (default adamw)")
    t.add_argument("--zero", type=int, default=0, choices=[0, 1, 2, 3], help="ZeRO-DP stage (default 0)")
    t.add_argument("--dp", type=positive_int, help="data-parallel degree (default: gpus/(tp·pp), else 1)")
    a = p.add_argument_group("activations")
    a.add_argument("--batch", type=positive_int, help="micro-batch size b (MBS)")
    a.add_argument("--seq", type=positive_int, help="sequence length s (default: the preset's)")
    a.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel degree t (default 1)")
    a.add_argument("--sp", action="store_true", help="sequence parallelism (with tensor parallelism)")
    a.add_argument("--recompute", default="none", choices=["none", "selective", "full"],
                   help="activation recomputation (default none)")
    a.add_argument("--activations", default="paper", choices=["paper", "perflab"],
                   help="paper: Korthikanti et al. 2022's GPT layer (default); perflab: perflab's own model, "
                        "exactly (needs --preset; recompute none or full)")
    c = p.add_argument_group("batch arithmetic: DP = GPUs/(TP·PP), GBS = MBS·DP·GAS")
    c.add_argument("--gpus", type=positive_int, help="number of GPUs")
    c.add_argument("--pp", type=positive_int, default=1, help="pipeline-parallel degree (default 1)")
    c.add_argument("--mbs", type=positive_int, help="micro-batch size (default: --batch, else 1)")
    c.add_argument("--gas", type=positive_int, help="gradient-accumulation steps (default 1)")
    c.add_argument("--gbs", type=positive_int, help="target global batch size (solves for GAS)")
    m = p.add_argument_group("measured: a real training step of perflab's model, phase by phase (lesson 03)")
    m.add_argument("--measure", action="store_true", help="build --preset, run two training steps here and measure "
                   "the bytes and seconds of every phase (build, forward, backward, optimizer step, zero_grad)")
    m.add_argument("--checkpointing", action="store_true", help="with --measure: recompute every block in the backward")
    m.add_argument("--device", help="with --measure: cpu, cuda, cuda:N or mps (default: the best available)")
    p.add_argument("--json", action="store_true", help="print JSON: components_bytes, total_bytes, activations_per_layer_bytes, ...")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.measure:
        return _measure(args)
    if args.checkpointing or args.device:
        raise InputError("--checkpointing and --device describe a measured step: add --measure "
                         "(for a prediction use --recompute full)")
    from perflab.memory.estimate import batch_plan, estimate

    args.precision = args.precision or "mixed"

    cfg = model_config_from_args(args)
    if cfg is None and args.params is None and not (args.layers and args.hidden):
        raise InputError("describe the model: --params N, --preset NAME, or --layers/--hidden/--heads")
    plan = None
    dp = args.dp
    if args.gpus:
        if args.gas and args.gbs:
            raise InputError("give --gas or --gbs, not both")
        plan = batch_plan(args.gpus, tp=args.tp, pp=args.pp, mbs=args.mbs or args.batch or 1, gas=args.gas or 1,
                          gbs=args.gbs, seq=args.seq or (cfg.seq_len if cfg else None))
        if dp is not None and dp != plan.dp:
            raise InputError(f"--dp {dp} disagrees with --gpus {args.gpus}/(tp·pp = {args.tp * args.pp}) = {plan.dp}: drop --dp")
        dp = plan.dp
    elif args.gas or args.gbs:
        raise InputError("batch arithmetic needs --gpus (DP = GPUs/(TP·PP))")
    # activations when a micro-batch is named, or a sequence length with a known shape
    shape_known = cfg is not None or bool(args.layers and args.hidden and args.heads)
    batch = args.batch or (args.mbs if shape_known else None)
    seq = args.seq
    if seq and not batch and shape_known:
        batch = 1
    if batch and not shape_known:
        raise InputError("activations need the model's shape: add --layers, --hidden and --heads (or --preset)")
    if not batch:
        seq = None
    est = estimate(args.params, cfg=cfg, precision=args.precision, grad_dtype=args.grad_dtype,
                   optimizer=args.optimizer, zero=args.zero, dp=dp or 1, batch=batch, seq=seq, tp=args.tp,
                   sp=args.sp, recompute=args.recompute, layers=args.layers, hidden=args.hidden, heads=args.heads,
                   vocab=args.vocab, activation_model=args.activations)
    out = est.as_dict()
    if cfg is not None:
        out["model"] = cfg.as_dict()
    if plan is not None:
        out["batch"] = plan.as_dict()
    text = est.text()
    if plan is not None:
        text += "\n" + plan.text()
    emit(out, args.json, text)
    return 0


def _measure(args) -> int:
    from perflab.core.readout import binary_bytes
    from perflab.memory.probe import measure_step_phases

    if not args.preset:
        raise InputError("--measure needs --preset (e.g. tiny-gpt, tiny-llama, small-gpt, small-llama)")
    if args.precision == "mixed":
        raise InputError("--measure runs a pure fp32 or bf16 step: give --precision fp32 or bf16 (mixed is predicted only)")
    if args.recompute != "none":
        raise InputError("--measure takes --checkpointing (every block recomputed), not --recompute")
    cfg = model_config_from_args(args)
    assert cfg is not None  # --preset was given, so there is a config
    rep = measure_step_phases(cfg, batch=args.batch or 8, seq=args.seq, dtype=args.precision or "fp32",
                              optimizer=args.optimizer, checkpointing=args.checkpointing, device=args.device)
    out = rep.summary()
    lines = [f"{cfg.name} b={out['batch']} s={out['seq']} {out['dtype']} {out['optimizer']}"
             f"{' with checkpointing' if args.checkpointing else ''} on {out['device']}: loss {out['loss']:.3f}, "
             f"step {out['step_s'] * 1e3:.1f} ms (forward {out['forward_s'] * 1e3:.1f}, backward "
             f"{out['backward_s'] * 1e3:.1f}, optimizer {out['optimizer_s'] * 1e3:.1f} ms)",
             f"peak {binary_bytes(out['peak_bytes'])} measured, {binary_bytes(out['predicted_peak_bytes'])} predicted"]
    lines += [f"  {r['phase']:<15} #{r['iteration']}  end {binary_bytes(r['allocated_bytes']):>11} "
              f"(predicted {binary_bytes(r['predicted_end_bytes'])})  peak {binary_bytes(r['peak_bytes']):>11} "
              f"(predicted {binary_bytes(r['predicted_peak_bytes'])})  {r['seconds'] * 1e3:8.1f} ms" for r in out["phases"]]
    emit(out, args.json, "\n".join(lines))
    return 0
