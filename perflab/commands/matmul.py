"""`perflab matmul`: time one GEMM and compare it with the device's peak."""

from __future__ import annotations

from perflab.commands._args import dtype, emit, positive_float, positive_int


def register(sub) -> None:
    p = sub.add_parser("matmul", help="measure one m×k by k×n matmul (TFLOP/s against peak)")
    p.add_argument("--m", type=positive_int, required=True, help="rows of A and C")
    p.add_argument("--n", type=positive_int, required=True, help="columns of B and C")
    p.add_argument("--k", type=positive_int, required=True, help="the shared (reduction) dimension")
    p.add_argument("--dtype", type=dtype, default="fp32", help="fp32, tf32, bf16, fp16 or fp8 (default fp32)")
    p.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: the best available)")
    p.add_argument("--warmup-ms", type=positive_float, default=25.0, help="warm-up budget in ms (default 25)")
    p.add_argument("--rep-ms", type=positive_float, default=100.0, help="timing budget in ms (default 100)")
    p.add_argument("--no-flush", action="store_true", help="do not flush the GPU's L2 between calls")
    p.add_argument("--json", action="store_true", help="print JSON (median_s, tflops, peak_fraction, ...)")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.core.device import pick_device
    from perflab.core.measure import measure_matmul

    dev = pick_device(args.device)
    r = measure_matmul(args.m, args.n, args.k, args.dtype, dev, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms,
                       flush_l2=False if args.no_flush else None)
    frac = f"{r.peak_fraction:.1%} of the {r.peak_tflops:.3g} TFLOP/s peak ({r.peak_source})" if r.peak_fraction else "peak unknown"
    text = (f"matmul {r.m}×{r.k} · {r.k}×{r.n} {r.dtype} on {r.device_name}: median {r.median_s * 1e3:.3f} ms "
            f"(IQR {r.iqr_s * 1e3:.3f} ms, n={r.n_reps}) → {r.tflops:.3f} TFLOP/s, {frac}; "
            f"checked: relative error {r.rel_error:.1e}")
    emit(r.as_dict(), args.json, text)
    return 0
