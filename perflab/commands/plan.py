"""`perflab plan TARGET --gpu h100 --gpus 64 [--fsdp] [--tp N] [--ac none|full|auto]`: will it fit, how fast."""

from __future__ import annotations

import sys
from types import SimpleNamespace

from perflab.commands._args import emit, positive_float, positive_int
from perflab.commands.audit import FACTORY_TIMEOUT_S


def register(sub) -> None:
    p = sub.add_parser("plan", help="predict a training job's per-GPU memory by part, step time, tokens/s and MFU on a "
                                    "cluster (FSDP2, tensor parallel, recompute) without allocating the model")
    p.add_argument("target", nargs="?", metavar="TARGET",
                   help="path/to/file.py:FACTORY or module:FACTORY, as for `perflab audit`")
    p.add_argument("--hf-config", metavar="TYPE_OR_PATH",
                   help="a Hugging Face model from its config instead (a model type or a local config.json)")
    p.add_argument("--hf-set", nargs="+", default=[], metavar="KEY=VALUE", help="config overrides for --hf-config")
    p.add_argument("--factory-timeout", type=positive_float, default=FACTORY_TIMEOUT_S, metavar="SECONDS",
                   help=f"give up on a factory that has not returned after SECONDS (default {FACTORY_TIMEOUT_S:g})")
    p.add_argument("--gpu", default="h100", help="the GPU: h100, h200, a100, b200 or an id of perflab's hardware table "
                                                 "(default h100: the SXM part)")
    p.add_argument("--gpus", type=positive_int, default=8, help="GPUs in the job (default 8)")
    p.add_argument("--fsdp", action="store_true", help="shard parameters, gradients and optimizer state (FSDP2)")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel degree, inside a node (default 1)")
    p.add_argument("--ac", default="none", choices=("none", "full", "auto"),
                   help="activation recompute: none, full (every block), auto (the operators that fit the budget)")
    p.add_argument("--micro-batch", type=positive_int, default=1, help="sequences per GPU with --hf-config (default 1)")
    p.add_argument("--seq", type=positive_int, default=2048, help="tokens per sequence with --hf-config (default 2048)")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"),
                   help="training precision: bf16 (FSDP2's mixed precision, fp32 master weights) or fp32")
    p.add_argument("--headroom", type=float, default=0.10,
                   help="fraction of the GPU's memory kept free for what no tracker sees (default 0.10)")
    p.add_argument("--budget", type=float, metavar="GB",
                   help="memory a GPU may use, in GB (1e9 bytes), below the GPU's less the headroom; --ac auto fits it")
    p.add_argument("--json", action="store_true",
                   help="print JSON: {memory_bytes, peak_bytes, usable_bytes, fits, step_s, compute_s, comm_s, "
                        "comm_hidden_s, comm_exposed_s, tokens_per_s, mfu, recompute, suggestions, ...}")
    p.set_defaults(func=run)


def run(args) -> int:
    import contextlib

    from perflab.commands.audit import build_target
    from perflab.plan.run import plan

    spec = SimpleNamespace(target=args.target, hf_config=args.hf_config, hf_set=args.hf_set, batch=args.micro_batch,
                           seq=args.seq, factory_timeout=args.factory_timeout)
    if args.target and (args.micro_batch != 1 or args.seq != 2048):
        from perflab.core.errors import InputError

        raise InputError("--micro-batch and --seq size the batch of --hf-config; a factory's batches are its own")
    with contextlib.redirect_stdout(sys.stderr):  # the learner's code may print: stdout is the report's
        p = plan(lambda: build_target(spec), gpu=args.gpu, gpus=args.gpus, tp=args.tp, fsdp=args.fsdp, ac=args.ac,
                 dtype=args.dtype, headroom=args.headroom, budget_gb=args.budget)
    emit(p.to_json(), args.json, p.text())
    return 0
