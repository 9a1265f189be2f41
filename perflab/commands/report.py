"""`perflab report`: measure this machine the way the course does; report.json and report.html.

    perflab report [--quick] [--only PART ...] [--skip PART ...] [--out DIR] [--fresh] [--json]
    perflab report --compare a.json b.json [--json]
"""

from __future__ import annotations

from perflab.commands._args import emit


def register(sub) -> None:
    from perflab.course.report import PARTS

    p = sub.add_parser("report", help="measure this machine (peaks, matmul, MAMF, memory, waves, collectives, NUMA, "
                                      "DataLoader) into report.json + report.html; or --compare two reports")
    p.add_argument("--quick", action="store_true", help="small sizes: under a minute on a laptop CPU")
    p.add_argument("--only", nargs="+", metavar="PART", help=f"run only these parts ({', '.join(PARTS)})")
    p.add_argument("--skip", nargs="+", metavar="PART", help="leave these parts out")
    p.add_argument("--out", default=".", help="folder for report.json and report.html (default: here)")
    p.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: the best available)")
    p.add_argument("--fresh", action="store_true",
                   help="measure everything again (an earlier run's results file is set aside, not deleted)")
    p.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                   help="put two reports side by side: b / a for every figure (measures nothing)")
    p.add_argument("--json", action="store_true", help="print the report (or the comparison) as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.core.errors import InputError
    from perflab.core.jsonable import to_json
    from perflab.course import report as R

    if args.compare:
        if args.quick or args.only or args.skip or args.fresh:
            raise InputError("--compare reads two reports and measures nothing: leave out --quick/--only/--skip/--fresh")
        a, b = (R.load_report(x) for x in args.compare)
        rows = R.compare(a, b)
        out = {"a": {"file": args.compare[0], "device": a.device, "host": a.host, "quick": a.quick},
               "b": {"file": args.compare[1], "device": b.device, "host": b.host, "quick": b.quick},
               "rows": to_json(rows)}
        emit(R.clean(out), args.json, R.compare_text(a, b, rows))
        return 0
    import matplotlib

    matplotlib.use("Agg")  # the report draws into files, never onto a screen
    R.select_parts(args.only, args.skip)  # a bad part name fails before anything is measured
    doc = R.build_report(quick=args.quick, only=args.only, skip=args.skip, device=args.device, fresh=args.fresh,
                         progress=True)
    jp, hp = R.write_report(doc, args.out)
    doc.files = {"json": str(jp), "html": str(hp)}
    lines = [f"{p.title}: " + ((p.summary or "") if p.ok else f"FAILED ({p.reason})") for p in doc.parts.values()]
    lines += [f"wrote {jp} and {hp}"]
    emit(R.clean(doc.to_json()), args.json, "\n".join(lines))
    if doc.interrupted:
        return 130
    return 1 if doc.failed else 0
