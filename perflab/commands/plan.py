"""`perflab plan TARGET --gpu h100 --gpus 64 [--fsdp] [--tp N [--sp]] [--ac none|full|auto]`: will it fit, how fast."""

from __future__ import annotations

import sys

from perflab.commands._args import emit, positive_float, positive_int
from perflab.commands.audit import FACTORY_TIMEOUT_S


def register(sub) -> None:
    p = sub.add_parser("plan", help="predict a training job's per-GPU memory by part, step time, tokens/s and MFU on a "
                                    "cluster (FSDP2, tensor and sequence parallel, recompute) without allocating the "
                                    "model")
    p.add_argument("target", nargs="?", metavar="TARGET",
                   help="path/to/file.py:FACTORY or module:FACTORY, as for `perflab audit` (called on the meta device)")
    p.add_argument("--hf-config", metavar="TYPE_OR_PATH",
                   help="a Hugging Face model from its config instead (a model type or a local config.json)")
    p.add_argument("--hf-set", nargs="+", default=[], metavar="KEY=VALUE",
                   help="config overrides for --hf-config (a key the config does not have is refused)")
    p.add_argument("--factory-timeout", type=positive_float, default=FACTORY_TIMEOUT_S, metavar="SECONDS",
                   help=f"give up on a factory that has not returned after SECONDS (default {FACTORY_TIMEOUT_S:g})")
    p.add_argument("--gpu", default="h100", help="the GPU: h100, h200, a100, b200 or an id of perflab's hardware table "
                                                 "(default h100: the SXM part)")
    p.add_argument("--gpus", type=positive_int, help="GPUs in the job (default 8, or --nodes × --gpus-per-node)")
    p.add_argument("--nodes", type=positive_int, help="nodes in the job (GPUs = nodes × GPUs per node)")
    p.add_argument("--gpus-per-node", type=positive_int, metavar="N",
                   help="GPUs per node, joined by the GPU's NVLink (default 8, a DGX/HGX board)")
    p.add_argument("--nics-per-node", type=positive_int, metavar="N",
                   help="network cards per node (default 8: one per GPU, as DGX systems have)")
    p.add_argument("--nic", metavar="LINK_OR_GBPS",
                   help="the network card: ib-ndr-400, ib-hdr-200, or its GB/s per direction (default: the GPU's DGX)")
    p.add_argument("--fsdp", action="store_true", help="shard parameters, gradients and optimizer state (FSDP2)")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel degree, inside a node (default 1)")
    p.add_argument("--sp", action="store_true",
                   help="with --tp: sequence and loss parallelism, as torchtitan's tensor-parallel plan applies them")
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
    p.add_argument("--whole", action="store_true",
                   help="trace every block of the model (default: two depths, extrapolated; exact for identical blocks)")
    p.add_argument("--json", action="store_true",
                   help="print JSON: {memory_bytes, peak_bytes, usable_bytes, fits, step_s, compute_s, comm_s, "
                        "comm_hidden_s, comm_exposed_s, tokens_per_s, mfu, mfu_causal_halved, recompute, saved, "
                        "suggestions, ...}")
    p.set_defaults(func=run)


def gpus_of(gpus: int | None, nodes: int | None, per_node: int | None) -> int:
    """--gpus, or --nodes × --gpus-per-node (8 by default); refused in one line when they disagree."""
    from perflab.core.errors import InputError

    if nodes is None:
        return gpus if gpus is not None else 8
    total = nodes * (per_node or 8)
    if gpus is not None and gpus != total:
        raise InputError(f"--gpus {gpus} is not --nodes {nodes} × {per_node or 8} GPUs per node ({total}): give one "
                         "of them, or make them agree")
    return total


def run(args) -> int:
    import contextlib

    from perflab.audit.target import parse_overrides
    from perflab.core.errors import InputError
    from perflab.plan.run import plan
    from perflab.plan.target import from_factory_on_meta, from_hf, hf_override_keys

    if bool(args.target) == bool(args.hf_config):
        raise InputError("give TARGET (path/to/file.py:FACTORY or module:FACTORY) or --hf-config TYPE_OR_PATH, one of them")
    if args.hf_set and not args.hf_config:
        raise InputError("--hf-set goes with --hf-config")
    if args.target and (args.micro_batch != 1 or args.seq != 2048):
        raise InputError("--micro-batch and --seq size the batch of --hf-config; a factory's batches are its own")
    gpus = gpus_of(args.gpus, args.nodes, args.gpus_per_node)
    if args.hf_config:
        overrides = parse_overrides(args.hf_set)
        hf_override_keys(args.hf_config, overrides)  # a bad config or key: one line, before any planning

        def build():
            return from_hf(args.hf_config, overrides, batch=args.micro_batch, seq=args.seq)
    else:
        def build():
            return from_factory_on_meta(args.target, args.factory_timeout)

    with contextlib.redirect_stdout(sys.stderr):  # the learner's code may print: stdout is the report's
        p = plan(build, gpu=args.gpu, gpus=gpus, tp=args.tp, fsdp=args.fsdp, ac=args.ac, dtype=args.dtype,
                 headroom=args.headroom, budget_gb=args.budget, sp=args.sp, gpus_per_node=args.gpus_per_node,
                 nics_per_node=args.nics_per_node, nic=args.nic, whole=args.whole)
    emit(p.to_json(), args.json, p.text())
    return 0
