"""`perflab mamf`: search matmul shapes for the maximum achievable TFLOP/s on this device."""

from __future__ import annotations

from perflab.commands._args import (
    device_dtype,
    dtype,
    emit,
    positive_float,
    positive_int,
    whole_number,
)


def register(sub) -> None:
    p = sub.add_parser("mamf", help="maximum achievable matmul TFLOP/s: search shapes, keep the best as this device's ceiling")
    for ax, what in (("m", "rows of A"), ("n", "columns of B"), ("k", "the reduction dimension")):
        p.add_argument(f"--{ax}-range", nargs=3, type=whole_number, metavar=("START", "STOP", "STEP"),
                       help=f"sizes of {what}: START, START+STEP, ... ≤ STOP (sizes < 1 skipped)")
    p.add_argument("--dtype", type=dtype, default=None,
                   help="bf16, fp16, tf32, fp32 or fp8 (default: bf16 where the device runs it natively, else fp16 or fp32)")
    p.add_argument("--search", choices=("refine", "grid"), default="refine",
                   help="refine: coarse pass then refinement around the best (default); grid: every shape (brute force)")
    p.add_argument("--stat", choices=("mean", "median", "max"), default="mean",
                   help="rank shapes by mean (default, as the published MAMF table), median or max TFLOP/s")
    p.add_argument("--top", type=positive_int, default=3, help="how many of the best points the refinement follows (default 3)")
    p.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: the best available)")
    p.add_argument("--warmup-ms", type=positive_float, default=20.0, help="warm-up budget per shape in ms (default 20)")
    p.add_argument("--rep-ms", type=positive_float, default=60.0, help="timing budget per shape in ms (default 60)")
    flush = p.add_mutually_exclusive_group()
    flush.add_argument("--flush", dest="flush", action="store_true", default=None,
                       help="flush the cache before every timed call (default on a GPU)")
    flush.add_argument("--no-flush", dest="flush", action="store_false", help="do not flush the cache")
    p.add_argument("--fresh", action="store_true",
                   help="start over: set the results of earlier searches aside (renamed, not deleted) instead of resuming")
    p.add_argument("--smoke", action="store_true", help="tiny default ranges (a quick check that everything works)")
    p.add_argument("--json", action="store_true",
                   help="print JSON: best {m, n, k, tflops, mean, median, max}, grid_points, evaluated, elapsed_s, ...")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.core.device import describe, pick_device
    from perflab.core.errors import InputError
    from perflab.core.hardware import peaks_for
    from perflab.core.results import set_aside, sweep_path
    from perflab.core.sweepnoise import quietness_of
    from perflab.course.reference import published_mamf
    from perflab.gemm.mamf import default_ranges, parse_range, search

    dev = pick_device(args.device)
    given = {ax: getattr(args, f"{ax}_range") for ax in ("m", "n", "k")}
    if any(v is not None for v in given.values()) and not all(v is not None for v in given.values()):
        missing = ", ".join(f"--{ax}-range" for ax, v in given.items() if v is None)
        raise InputError(f"give all three ranges or none (missing {missing})")
    if all(v is not None for v in given.values()):
        ranges = {ax: parse_range(*v, name=ax) for ax, v in given.items()}
    else:
        ranges = default_ranges(dev.type == "cuda", smoke=args.smoke)
    dt, why = device_dtype(args.dtype, dev)
    info = describe(dev)
    if args.fresh:  # the search and its confirmations, renamed aside (never deleted)
        set_aside(sweep_path(f"mamf_{dt.name}", info.slug))
        set_aside(sweep_path(f"mamf_{dt.name}_confirm", info.slug))
    r = search(ranges["m"], ranges["n"], ranges["k"], dtype=dt, device=dev, strategy=args.search, stat=args.stat,
               flush_l2=args.flush, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, top=args.top,
               progress=not args.json)
    peaks = peaks_for(info)
    peak = peaks.get(dt.name)
    pub = published_mamf(peaks.spec.id if peaks.spec else None, dt.name)
    out = {**r.as_dict(), "ranges": {ax: [v[0], v[-1], len(v)] for ax, v in ranges.items()}, "peak_tflops": peak,
           "peak_source": peaks.source,
           "peak_fraction": (r.best["tflops"] / peak) if (r.best and peak) else None, "published": pub}
    if r.best is None:
        lines = [f"no shape could be measured ({r.evaluated} tried): see {r.path}"]
    else:
        b = r.best
        frac = f" = {b['tflops'] / peak:.1%} of the {peak:.4g} TFLOP/s peak ({peaks.source})" if peak else " (peak unknown)"
        lines = [f"MAMF {dt.name} on {info.name}: {b['tflops']:.4g} TFLOP/s ({args.stat}) at m×n×k = "
                 f"{b['m']}×{b['n']}×{b['k']}{frac}",
                 f"  mean {b['mean']:.4g}, median {b['median']:.4g}, max {b['max']:.4g} TFLOP/s",
                 f"  {args.search} search: {r.evaluated} of {r.grid_points} shapes ({r.fraction:.1%}), "
                 f"{r.measured} measured now, {r.elapsed_s:.1f} s; points in {r.path}"]
        if pub:
            lines.append(f"  published MAMF for {pub['accelerator']}: {pub['tflops']:g} TFLOP/s at {pub['best_shape']} "
                         f"(torch {pub['torch']}; {pub['source']})")
        q = b.get("quietness")
        said = (f"repeated over {b.get('measurements', 1)} measurements" if b.get("confirmed") else
                f"none of the best {args.top} shapes repeated its figure when measured again")
        lines.append(f"  {said} (noise σ {b.get('noise', float('nan')):.1%}); "
                     + (("machine quiet" if quietness_of(q).quiet else quietness_of(q).cause) if q else "quietness not measured"))
        if r.ceiling_path:
            lines.append(f"  {r.stored_note()} ({r.ceiling_path})")
        if r.saved_note():
            lines.append(f"  {r.saved_note()}")
        if r.interrupted:
            lines.append("  interrupted: run the same command again to resume")
    out["dtype_reason"] = why
    if why:
        lines.append(f"{dt.name} by default: {why} (--dtype chooses another)")
    emit(out, args.json, "\n".join(lines))
    return 130 if r.interrupted else 0
