"""`perflab compile`: eager vs compiled training step, graph breaks, recompiles and loss parity."""

from __future__ import annotations

from perflab.commands._args import emit, positive_int


def register(sub) -> None:
    p = sub.add_parser("compile", help="torch.compile on a training step: speed, compile time, graph breaks, parity")
    p.add_argument("--preset", default="tiny-gpt", help="model preset (default tiny-gpt)")
    p.add_argument("--steps", type=positive_int, default=5, help="timed steps and parity steps (default 5)")
    p.add_argument("--mode", default="default", choices=("default", "reduce-overhead", "max-autotune"),
                   help="torch.compile mode (reduce-overhead and max-autotune need a CUDA GPU)")
    p.add_argument("--checkpointing", default="none", choices=("none", "full", "selective"),
                   help="activation checkpointing of each block (default none)")
    p.add_argument("--explain", metavar="MODULE:FACTORY",
                   help="only report the graph breaks of the model FACTORY() builds (MODULE: a .py path or module)")
    p.add_argument("--json", action="store_true",
                   help="print JSON: {eager_step_s, compiled_step_s, speedup, compile_s, graph_breaks, recompiles, "
                        "max_loss_abs_diff, max_loss_rel_diff}")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.core.errors import InputError

    if args.explain:
        from perflab.compiler.breaks import explain_factory

        rep = explain_factory(args.explain)
        emit({"model": args.explain, **rep.as_dict()}, args.json, f"{args.explain}: " + rep.describe())
        return 0

    import torch

    from perflab.compiler import checkpointing, speed
    from perflab.workload.models import build_model, preset
    from perflab.workload.train import make_batches

    cfg = preset(args.preset)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    reason = speed.mode_skip_reason(args.mode, device)
    if reason:
        raise InputError(f"--mode {args.mode} {reason}")
    seq = min(cfg.seq_len, 64)
    batches = make_batches(cfg, 2, seq, n=2, device=device)

    def fresh():
        return checkpointing.apply(build_model(cfg, device=device), args.checkpointing)

    with checkpointing.quiet_policy_warning():
        return _measure(args, cfg, device, batches, fresh)


def _measure(args, cfg, device, batches, fresh) -> int:
    import torch

    from perflab.compiler import parity, speed
    from perflab.compiler.breaks import RecompileCounter, explain

    with torch.no_grad():
        rep = explain(fresh(), batches[0][0])
    sp = speed.measure(fresh, batches, args.steps, mode=args.mode)
    # recompiles over the timed steps (same shapes: should be the one first compile)
    torch._dynamo.reset()
    counter = RecompileCounter()
    m = torch.compile(fresh(), backend=counter)
    with torch.no_grad():
        for x, _ in batches:
            m(x)
    recompiles = counter.frames - 1
    torch._dynamo.reset()
    kw = {"mode": args.mode} if args.mode != "default" else {}
    par = parity.check(fresh(), batches, args.steps, compile_kw=kw)
    out = {"eager_step_s": sp.eager_step_s, "compiled_step_s": sp.compiled_step_s, "speedup": sp.speedup,
           "compile_s": sp.compile_s, "graph_breaks": rep.graph_breaks, "recompiles": recompiles,
           "max_loss_abs_diff": par.max_abs, "max_loss_rel_diff": par.max_rel}
    text = (f"{cfg.name} on {device.type}, mode {args.mode}, checkpointing {args.checkpointing}\n"
            f"step: eager {sp.eager_step_s * 1e3:.2f} ms, compiled {sp.compiled_step_s * 1e3:.2f} ms "
            f"(speedup {sp.speedup:.2f}×); compile {sp.compile_s:.1f} s; break-even after "
            f"{sp.break_even_steps} steps\ngraph breaks: {rep.graph_breaks}; recompiles: {recompiles}\n"
            f"parity over {args.steps} steps: max |Δloss| {par.max_abs:.2e}, max rel {par.max_rel:.2e} "
            f"(tolerance {par.tol:.0e}: {'ok' if par.ok else 'FAILED'})")
    emit(out, args.json, text)
    return 0 if par.ok else 1
