"""`perflab audit TARGET`: your own training step, measured by every lesson's instrument."""

from __future__ import annotations

import sys

from perflab.commands._args import emit, positive_float, positive_int

FACTORY_TIMEOUT_S = 120.0  # perflab.audit.target.FACTORY_TIMEOUT_S (not imported here: the parser stays light)


def register(sub) -> None:
    p = sub.add_parser("audit", help="audit your own training step: time, FLOPs, honest MFU/HFU, where the time goes, "
                                     "memory, graph breaks, energy, what to try")
    p.add_argument("target", nargs="?", metavar="TARGET",
                   help="path/to/file.py:FACTORY or module:FACTORY; FACTORY() returns {'model', 'batches'} and "
                        "optionally 'loss_fn', 'optimizer', 'tokens_per_batch' (see the README)")
    p.add_argument("--hf-config", metavar="TYPE_OR_PATH",
                   help="a Hugging Face model from its config instead: a model type (gpt2, llama, mixtral) or a local "
                        "config.json; random weights, no download")
    p.add_argument("--hf-set", nargs="+", default=[], metavar="KEY=VALUE",
                   help="config overrides for --hf-config, e.g. n_layer=4 n_embd=256")
    p.add_argument("--batch", type=positive_int, default=2, help="sequences per batch with --hf-config (default 2)")
    p.add_argument("--seq", type=positive_int, default=64, help="tokens per sequence with --hf-config (default 64)")
    p.add_argument("--steps", type=positive_int, default=5, help="timed steps (default 5)")
    p.add_argument("--factory-timeout", type=positive_float, default=FACTORY_TIMEOUT_S, metavar="SECONDS",
                   help=f"give up on a factory that has not returned after SECONDS (default {FACTORY_TIMEOUT_S:g})")
    p.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: the best available)")
    p.add_argument("--try", dest="try_rungs", action="store_true",
                   help="measure each recommended rung on your step, with loss parity")
    p.add_argument("--no-breaks", action="store_true", help="skip the graph-break report (dynamo's trace)")
    p.add_argument("--gpu", metavar="ID",
                   help="the GPU to predict fp8 against bf16 on, for each GEMM of the step: an id of perflab's hardware "
                        "table, e.g. h100-sxm (default: the GPU audited, when the table knows it; a CPU has no fp8 units)")
    p.add_argument("--json", action="store_true",
                   help="print JSON on stdout (progress still goes to stderr): {step_s, step_s_spread, tokens_per_s, flops_per_step, flops_by_dtype, "
                        "flops_6n_per_step, params_total, params_active, peak_tflops, mfu, hfu, mfu_basis, breakdown_s, "
                        "top_ops, memory_bytes, graph_breaks, energy_j_per_step, recommendations, flops_uncounted, "
                        "flops_per_step_causal_halved, fp8_gemms}")
    p.add_argument("--html", metavar="FILE", help="also write a one-page HTML report")
    p.add_argument("--trace", metavar="DIR",
                   help="audit a job that ran from its ranks' profiler traces instead (the folder "
                        "tensorboard_trace_handler wrote on each rank): step time, compute/communication/copy/idle "
                        "shares, exposed communication, stragglers; MFU with TARGET or --hf-config and --tokens-per-step")
    p.add_argument("--tokens-per-step", type=positive_int, metavar="N",
                   help="with --trace and a model: the tokens all ranks together train on in one step")
    p.add_argument("--peak-dtype", default="bf16", choices=("fp32", "tf32", "bf16", "fp16", "fp8"),
                   help="with --trace: the dtype whose dense peak MFU divides by (default bf16)")
    p.set_defaults(func=run)


def build_target(args, progress=None):
    from perflab.audit.target import from_factory, from_hf_config, parse_overrides
    from perflab.core.errors import InputError

    if bool(args.target) == bool(args.hf_config):
        raise InputError("give TARGET (path/to/file.py:FACTORY or module:FACTORY) or --hf-config TYPE_OR_PATH, one of them")
    if args.hf_set and not args.hf_config:
        raise InputError("--hf-set goes with --hf-config")
    if args.hf_config:
        return from_hf_config(args.hf_config, parse_overrides(args.hf_set), batch=args.batch, seq=args.seq)
    return from_factory(args.target, timeout_s=args.factory_timeout, progress=progress)


def run_trace(args) -> int:
    import contextlib

    from perflab.audit.trace import audit_traces, model_flops_per_token
    from perflab.core.errors import InputError

    if args.html or args.try_rungs:
        raise InputError("--html and --try go with a step run here, not with --trace")
    if args.gpu:
        raise InputError("--gpu goes with a step run here (its GEMMs are predicted for that GPU), not with --trace")
    flops = six_n = None
    if args.target or args.hf_config:
        if not args.tokens_per_step:
            raise InputError("MFU from traces needs --tokens-per-step N: the tokens all ranks train on in one step")
        with contextlib.redirect_stdout(sys.stderr):
            per_token, six_n_per_token = model_flops_per_token(build_target(args))
        flops, six_n = per_token * args.tokens_per_step, six_n_per_token * args.tokens_per_step
    elif args.tokens_per_step:
        raise InputError("--tokens-per-step goes with TARGET or --hf-config (the model whose FLOPs MFU counts)")
    rep = audit_traces(args.trace, flops_per_step=flops, six_n_flops_per_step=six_n, dtype=args.peak_dtype)
    emit(rep.to_json(), args.json, rep.summary())
    return 0


def run(args) -> int:
    import contextlib

    from perflab.audit.run import run_audit

    if args.trace:
        return run_trace(args)
    from perflab.audit.fp8 import gpu_spec

    gpu = gpu_spec(args.gpu) if args.gpu else None  # parsed here, before the step is built: one line if unknown

    def progress(msg: str) -> None:  # on stderr, with --json too: stdout holds only the report
        sys.stderr.write(f"[audit] {msg}\n")
        sys.stderr.flush()

    # the learner's code may print: keep stdout for the report (and its JSON)
    with contextlib.redirect_stdout(sys.stderr):
        target = build_target(args, progress)
        rep = run_audit(target, device=args.device, steps=args.steps, try_rungs=args.try_rungs,
                        explain_breaks=not args.no_breaks, gpu=gpu, progress=progress)
    if args.html:
        from perflab.course.audit_html import write_html

        write_html(rep, args.html)
    emit(rep.to_json(), args.json, rep.summary() + (f"\nHTML report: {args.html}" if args.html else ""))
    return 0
