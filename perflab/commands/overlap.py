"""`perflab overlap`: is communication hidden behind computation for DP, ZeRO-3, TP and PP?"""

from __future__ import annotations

from perflab.commands._args import dtype, emit, positive_float, positive_int


def register(sub) -> None:
    p = sub.add_parser("overlap", help="t_comm / t_compute for DP, ZeRO-3, TP, PP (Ultra-Scale Playbook's overlap math)")
    p.add_argument("--h", type=positive_int, default=8192, help="hidden size (default 8192)")
    p.add_argument("--layers", type=positive_int, default=80, help="transformer layers L (default 80)")
    p.add_argument("--seq", type=positive_int, default=4096, help="sequence length s (default 4096)")
    p.add_argument("--mbs", type=positive_int, default=1, help="micro-batch b (default 1)")
    p.add_argument("--dp", type=positive_int, default=8, help="data-parallel degree (DP and ZeRO-3; default 8)")
    p.add_argument("--tp", type=positive_int, default=8, help="tensor-parallel degree (default 8)")
    p.add_argument("--pp-layers", type=positive_int, default=4, help="layers in the next pipeline stage (default 4)")
    p.add_argument("--accelerator", default="h100-sxm", help="accelerator id from the hardware table (default h100-sxm)")
    p.add_argument("--dtype", type=dtype, default="bf16", help="dtype whose dense peak is used (default bf16)")
    p.add_argument("--peak-tflops", type=positive_float, help="peak TFLOP/s instead of the table's")
    p.add_argument("--link", default="nvlink4-h100", help="link id (nvlink4-h100, ib-ndr-400, pcie5-x16, ...)")
    p.add_argument("--bw-gbps", type=positive_float, help="link bandwidth per direction in GB/s instead of the table's")
    p.add_argument("--bytes-per-element", type=int, default=2, help="2 for bf16/fp16 (default), 4 for fp32, 1 = the playbook's count")
    p.add_argument("--json", action="store_true", help="print JSON: hardware and one entry per strategy with ratio and hidden")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.distributed import overlap as O

    hw = O.hardware(args.accelerator, args.link, dtype=args.dtype, peak_tflops=args.peak_tflops, link_gbps=args.bw_gbps)
    res = O.all_four(args.h, args.layers, args.seq, args.mbs, args.dp, args.tp, args.pp_layers, hw,
                     bytes_per_element=args.bytes_per_element)
    d = {"hardware": {"peak_tflops": hw.peak_tflops, "link_gbps": hw.link_gbps, "label": hw.label},
         "shape": {"h": args.h, "layers": args.layers, "seq": args.seq, "mbs": args.mbs, "dp": args.dp, "tp": args.tp,
                   "pp_layers": args.pp_layers, "bytes_per_element": args.bytes_per_element},
         "strategies": [o.as_dict() for o in res]}
    lines = [hw.label, f"{'strategy':<8} {'t_comm':>11} {'t_compute':>11} {'ratio':>9}  hidden?"]
    for o in res:
        lines.append(f"{o.strategy:<8} {o.t_comm_s * 1e3:>8.3f} ms {o.t_compute_s * 1e3:>8.3f} ms {o.ratio:>9.3g}  "
                     f"{'yes' if o.hidden else 'NO'}   ({o.closed_form})")
    emit(d, args.json, "\n".join(lines))
    return 0
