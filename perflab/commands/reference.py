"""`perflab reference`: record GPU reference data into data/ (with provenance), or list what is there."""

from __future__ import annotations

from perflab.commands._args import emit


def register(sub) -> None:
    p = sub.add_parser("reference", help="record lesson reference data on a GPU into data/, or list the files there")
    p.add_argument("action", choices=("record", "list"), help="record: measure and write; list: show what is shipped")
    p.add_argument("--what", default="all", choices=("all", "waves", "heads", "swiglu", "mamf"),
                   help="which lesson's data to record (default all)")
    p.add_argument("--out", help="folder to write to (default: data/ of the course checkout)")
    p.add_argument("--device", help="cuda or cuda:N (default: the best available)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the recorder, not a reference")
    p.add_argument("--allow-cpu", action="store_true",
                   help="record on a CPU (to test the recorder; notebooks show GPU references only)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.core.errors import UnsupportedError
    from perflab.course.reference import KINDS, load_references, record

    if args.action == "list":
        found = [{"kind": r.kind, "label": r.label, "file": str(r.path)}
                 for kind in KINDS for r in load_references(kind, args.out, gpu_only=False)]
        text = "\n".join(f"{f['kind']:>7}: {f['label']}  [{f['file']}]" for f in found) or \
            "no reference files yet (record them on a GPU with `perflab reference record`)"
        emit({"references": found}, args.json, text)
        return 0
    from perflab.core.device import pick_device

    dev = pick_device(args.device)
    if dev.type != "cuda" and not args.allow_cpu:
        raise UnsupportedError("reference data must be measured on a GPU and this machine has none "
                               "(--allow-cpu --out DIR records on the CPU, to test the recorder)")
    kinds = KINDS if args.what == "all" else (args.what,)
    written = []
    for kind in kinds:
        path = record(kind, dev, smoke=args.smoke, root=args.out, progress=not args.json)
        written.append({"kind": kind, "file": str(path)})
        if not args.json:
            print(f"{kind}: wrote {path}")
    if args.json:
        emit({"written": written}, True)
    return 0
