"""`perflab waves`: the tile and wave model of one GEMM (no measurement)."""

from __future__ import annotations

from perflab.commands._args import dtype, emit, positive_int


def register(sub) -> None:
    p = sub.add_parser("waves", help="tiles, waves and utilization of an m×k by k×n GEMM on a GPU (the model)")
    p.add_argument("--m", type=positive_int, required=True, help="rows of A and C")
    p.add_argument("--n", type=positive_int, required=True, help="columns of B and C")
    p.add_argument("--k", type=positive_int, required=True, help="the shared (reduction) dimension")
    p.add_argument("--sms", type=positive_int, help="streaming multiprocessors (default: the current GPU's, or --gpu's)")
    p.add_argument("--gpu", help="take SMs, peak and bandwidth from perflab's table, e.g. a100-sxm-80gb, h100-sxm")
    p.add_argument("--tile", default="256x128", help="thread-block tile TMxTN (default 256x128)")
    p.add_argument("--blocks-per-sm", type=positive_int, default=1, help="blocks resident per SM (default 1)")
    p.add_argument("--dtype", type=dtype, default="bf16", help="for intensity, roofline and alignment (default bf16)")
    p.add_argument("--arch", help="architecture for the alignment rule (volta, ampere, hopper, ... or 8.0); "
                                  "default: --gpu's or the current GPU's")
    p.add_argument("--json", action="store_true",
                   help="print JSON: tiles, waves, utilization, arithmetic_intensity, roofline, alignment, ...")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.core.errors import InputError
    from perflab.core.hardware import lookup
    from perflab.gemm.shapes import (
        arch_of,
        check_alignment,
        parse_tile,
        predicted_tflops,
        roofline_bound,
        wave_model,
    )

    dt = args.dtype
    tile = parse_tile(args.tile)
    spec, sms_source, device_name = None, None, None
    if args.gpu:
        spec = lookup(args.gpu)
        if spec is None:
            raise InputError(f"unknown GPU {args.gpu!r}: use an id from `perflab env`'s table, e.g. a100-sxm-80gb, h100-sxm")
        device_name = spec.name
    else:
        import torch

        if torch.cuda.is_available():
            from perflab.core.device import describe

            info = describe("cuda")
            device_name, spec = info.name, lookup(info.name)
            if args.sms is None:
                sms_source = f"{info.name} (reported by the driver)"
                args.sms = int(info.details["sm_count"])
    if args.sms is not None:
        sms = args.sms
        sms_source = sms_source or "--sms"
    elif spec is not None and spec.sm_count:
        sms, sms_source = int(spec.sm_count), f"{spec.name} ({spec.sources.get('sm_count', 'datasheet')})"
    else:
        raise InputError("no CUDA GPU here to read the SM count from: pass --sms N or --gpu ID "
                         "(e.g. --gpu a100-sxm-80gb for 108 SMs, --gpu h100-sxm for 132)")
    itemsize = 4 if dt.name == "tf32" else dt.itemsize
    w = wave_model(args.m, args.n, args.k, sms=sms, tile=tile, blocks_per_sm=args.blocks_per_sm, itemsize=itemsize)
    out = {**w.as_dict(), "tile": f"{tile[0]}x{tile[1]}", "dtype": dt.name, "sms_source": sms_source,
           "gpu": device_name}
    lines = [w.describe(), f"arithmetic intensity: {w.arithmetic_intensity:.1f} FLOPs/byte ({dt.name}, "
             f"reading A and B and writing C once)", f"SM count from: {sms_source}"]
    if spec is not None:
        rb = roofline_bound(args.m, args.n, args.k, dt.name, spec).to_json()
        if rb["peak_tflops"]:
            pred = predicted_tflops(args.m, args.n, args.k, sms=sms, tile=tile, blocks_per_sm=args.blocks_per_sm,
                                    peak_tflops=rb["peak_tflops"], bandwidth_gbps=rb["bandwidth_gbps"], itemsize=itemsize)
            rb["predicted_tflops"] = pred
            lines.append(f"roofline on {spec.name} ({dt.name}): peak {rb['peak_tflops']:g} TFLOP/s, ridge "
                         f"{rb['ridge']:.0f} FLOPs/byte → {rb['bound']}; model: {pred:.4g} TFLOP/s "
                         f"({pred / rb['peak_tflops']:.0%} of peak)")
        else:
            lines.append(f"{spec.name} has no dense {dt.name} mode: no roofline")
        out["roofline"] = rb
    arch = args.arch or (spec.id if spec is not None else None)
    if arch:
        name, cc = arch_of(arch)
        checks = check_alignment(args.m, args.n, args.k, dt.name, arch)
        out["alignment"] = {"arch": name, "compute_capability": cc,
                            "checks": [c.__dict__ for c in checks]}
        lines.append(f"Tensor Core alignment ({dt.name} on {name}):")
        lines += [f"  [{'ok' if c.ok_recommended else ('--' if c.ok_recommended is None else 'no')}] {c.reason}"
                  for c in checks]
    emit(out, args.json, "\n".join(lines))
    return 0
