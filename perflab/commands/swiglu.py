"""`perflab swiglu`: measure SwiGLU MLP widths near 8/3·h and rank them."""

from __future__ import annotations

from perflab.commands._args import device_dtype, dtype, emit, positive_float, positive_int


def register(sub) -> None:
    p = sub.add_parser("swiglu", help="time a SwiGLU MLP's GEMMs (fwd+bwd) for widths near 8/3·h and rank them")
    p.add_argument("--hidden", type=positive_int, required=True, help="hidden size h")
    p.add_argument("--tokens", type=positive_int,
                   help="tokens per micro-batch, b·s (default 8192 on a GPU, 256 on a CPU)")
    p.add_argument("--radius", type=positive_int, default=100, help="search ⌊8/3·h⌋ ± radius (default 100)")
    p.add_argument("--step", type=positive_int, default=4, help="candidates are multiples of step (default 4)")
    p.add_argument("--widths", type=positive_int, nargs="+", help="measure exactly these widths (plus the baseline)")
    p.add_argument("--dtype", type=dtype, default=None,
                   help="bf16, fp16, tf32 or fp32 (default: bf16 where the device runs it natively, else fp16 or fp32)")
    p.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: the best available)")
    p.add_argument("--warmup-ms", type=positive_float, default=25.0, help="warm-up budget per width in ms (default 25)")
    p.add_argument("--rep-ms", type=positive_float, default=100.0, help="timing budget per width in ms (default 100)")
    p.add_argument("--fresh", action="store_true",
                   help="measure every width again: set the saved results aside (renamed, not deleted) instead of serving them")
    p.add_argument("--show", type=positive_int, default=10, help="rows to print (default 10)")
    p.add_argument("--json", action="store_true",
                   help="print JSON: baseline width, candidates [{d_ff, tflops, seconds, params_delta, ...}] best first")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from perflab.core.device import pick_device
    from perflab.gemm.swiglu import baseline_width, eight_thirds, search

    dev = pick_device(args.device)
    dt, why = device_dtype(args.dtype, dev)
    tokens = args.tokens or (8192 if dev.type == "cuda" else 256)
    if args.tokens is None and dev.type != "cuda":
        sys.stderr.write(f"perflab swiglu: no GPU here, measuring at --tokens {tokens} on the CPU (pass --tokens to change)\n")
    s = search(args.hidden, tokens, widths=args.widths, radius=args.radius, step=args.step, dtype=dt.name,
               device=dev, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, fresh=args.fresh, progress=not args.json)
    out = s.as_dict()
    base = s.baseline_row
    lines = [f"SwiGLU MLP, h={args.hidden}, tokens={tokens}, {s.dtype} on {s.device_name}: 8/3·h = "
             f"{eight_thirds(args.hidden):.2f}, baseline d_ff = {baseline_width(args.hidden)}"
             + (f" at {base.tflops:.4g} TFLOP/s" if base else ""),
             "timed: 3 GEMMs forward + 6 backward (18·tokens·h·d_ff FLOPs); ranked by TFLOP/s:",
             f"{'rank':>4} {'d_ff':>7} {'TFLOP/s':>9} {'ms/step':>9} {'vs base':>8} {'params Δ vs 8/3·h':>19} {'2^k |':>6}"]
    marks = {"unstable": "  (did not repeat: cannot win)", "confirmed": "  (repeated: a real step)",
             "unconfirmed": "  (stood out, measured once: cannot win)"}
    for r in s.frame.head(args.show).to_dict("records"):
        mark = ("  ← ⌊8/3·h⌋" if r["is_baseline"] else "") + marks.get(r["status"], "") + (
            "  (machine busy every time)" if r["disturbed"] else "")
        lines.append(f"{r['rank_tflops']:>4} {r['d_ff']:>7} {r['tflops']:>9.4g} {r['seconds'] * 1e3:>9.3f} "
                     f"{r['speedup_vs_baseline']:>7.2f}× {r['params_delta']:>+12,} ({r['params_delta_pct']:+.2f}%) "
                     f"{r['multiple_of']:>5}{mark}")
    lines.append(s.finding())
    lines.append(f"noise σ = {s.noise:.1%} of a point's TFLOP/s ({s.remeasured} re-measurement(s)); rule: {s.rule}")
    lines.extend(s.notes)
    if s.saved_note():
        lines.append(s.saved_note())
    if s.failed:
        lines.append(f"{len(s.failed)} width(s) failed: " + "; ".join(s.failed))
    out["dtype_reason"] = why
    if why:
        lines.append(f"{dt.name} by default: {why} (--dtype chooses another)")
    emit(out, args.json, "\n".join(lines))
    return 0
