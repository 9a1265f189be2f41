"""`perflab busbw`: algbw and busbw of a collective, measured over message sizes or converted from one timing."""

from __future__ import annotations

from perflab.commands._args import emit, positive_float, positive_int


def register(sub) -> None:
    p = sub.add_parser("busbw", help="measure a collective's algbw/busbw over sizes, or convert bytes+seconds (nccl-tests' rules)")
    p.add_argument("--op", default="all_reduce",
                   help="all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, gather, scatter, send_recv")
    p.add_argument("--nproc", type=positive_int, default=2, help="ranks to start when measuring (default 2)")
    p.add_argument("--sizes", nargs="+", help="message sizes S in bytes, e.g. 64K 1M 16M (default 1 KiB … 64 MiB)")
    p.add_argument("--backend", help="gloo or nccl (default: nccl when every rank has a GPU)")
    p.add_argument("--budget-s", type=positive_float, default=0.2, help="seconds of timing per size (default 0.2)")
    p.add_argument("--timeout", type=positive_float, help="seconds before every rank is stopped")
    p.add_argument("--bytes", type=positive_int, help="convert only: the size S of one measurement, in bytes")
    p.add_argument("--seconds", type=positive_float, help="convert only: its time per call, in seconds")
    p.add_argument("--ranks", type=positive_int, help="convert only: how many ranks took part")
    p.add_argument("--json", action="store_true", help="print JSON (algbw_gbps, busbw_gbps, ...)")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.core.errors import InputError
    from perflab.core.jsonable import to_json
    from perflab.distributed import busbw as B

    convert = [args.bytes, args.seconds, args.ranks]
    if any(v is not None for v in convert):
        if any(v is None for v in convert):
            raise InputError("to convert, give all three of --bytes, --seconds and --ranks")
        c = B.convert(args.op, args.bytes, args.seconds, args.ranks)
        emit(to_json(c), args.json, c.text())
        return 0
    res = B.measure(args.op, args.nproc, args.sizes, backend=args.backend, timeout=args.timeout, budget_s=args.budget_s)
    d = res.as_dict()
    lines = [f"{res.op} on {res.nproc} ranks ({res.backend}); busbw = algbw × {d['factor_formula']} = "
             f"algbw × {d['factor']:.4g}; S = {d['size_means']}",
             f"{'size':>10} {'time (us)':>11} {'algbw GB/s':>11} {'busbw GB/s':>11}  ok"]
    for r in res.rows:
        if r.get("status", "ok") != "ok":
            lines.append(f"{B.size_label(r['bytes']):>10}  not measured: {r.get('reason')}")
            continue
        lines.append(f"{B.size_label(r['bytes']):>10} {r['seconds'] * 1e6:>11.1f} {r['algbw_gbps']:>11.4g} "
                     f"{r['busbw_gbps']:>11.4g}  {'✓' if r['correct'] else '✗ wrong result'}")
    if res.launch is not None and not res.launch.ok:
        lines.append(res.launch.report())
    emit(d, args.json, "\n".join(lines))
    return 0 if d["ok"] else 1
