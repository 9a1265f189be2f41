"""`perflab env`: the device and its peaks."""

from __future__ import annotations

from perflab.commands._args import emit


def register(sub) -> None:
    p = sub.add_parser("env", help="describe the device and its peak TFLOP/s per dtype")
    p.add_argument("--json", action="store_true", help="print JSON: {device: {...}, peak_tflops: {dtype: number|null}}")
    p.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: the best available)")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.core.device import describe, pick_device
    from perflab.core.dtypes import supported_matmul_dtypes
    from perflab.core.hardware import peaks_for

    dev = pick_device(args.device)
    info = describe(dev)
    peaks = peaks_for(info)
    supported = supported_matmul_dtypes(dev)
    out = {
        "device": info.as_dict(),
        "peak_tflops": peaks.as_dict(),
        "peak_source": peaks.source,
        "supported_dtypes": supported,
        "spec_id": peaks.spec.id if peaks.spec else None,
    }
    if peaks.cpu_estimate:
        out["peak_inputs"] = {"cores": peaks.cpu_estimate.cores, "clock_ghz": peaks.cpu_estimate.clock_ghz,
                              "clock_source": peaks.cpu_estimate.clock_source,
                              "flops_per_cycle": peaks.cpu_estimate.flops_per_cycle, "basis": peaks.cpu_estimate.basis}
    lines = [str(info), "", f"peak TFLOP/s ({peaks.source}):"]
    for d in ("fp32", "tf32", "bf16", "fp16", "fp8"):
        mark = "" if d in supported else "  (not supported here)"
        lines.append("  " + peaks.describe(d) + mark)
    lines += ["  " + n for n in peaks.notes]
    emit(out, args.json, "\n".join(lines))
    return 0
