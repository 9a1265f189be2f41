"""`perflab numa`: this machine's NUMA topology, a saved `nvidia-smi topo -m` parsed, a binding plan.

    perflab numa [--sysfs ROOT] [--json]                 # nodes, distances, GPUs, this process's affinity
    perflab numa --topo FILE [--json]                    # parse a saved `nvidia-smi topo -m`
    perflab numa --plan --nproc 8 [--topo FILE] [--sysfs ROOT] [--json]   # cores per local rank

With --topo alone, hyperthread siblings come from this machine's /sys when the table is this
machine's, else they are guessed from the numbering and a note says so; --sysfs ROOT gives them.
"""

from __future__ import annotations

from perflab.commands._args import emit, positive_int
from perflab.core.errors import InputError


def register(sub) -> None:
    p = sub.add_parser("numa", help="NUMA topology (sysfs or nvidia-smi topo -m) and a per-rank core binding plan")
    p.add_argument("--sysfs", metavar="ROOT", help="read this folder as /sys (default /sys); with --topo, where the "
                                                   "table's machine's hyperthread siblings are read")
    p.add_argument("--topo", metavar="FILE", help="parse a saved `nvidia-smi topo -m` output")
    p.add_argument("--plan", action="store_true", help="which cores each local rank gets, with numactl lines")
    p.add_argument("--nproc", type=positive_int, help="local ranks to plan for (with --plan; default: one per GPU)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from perflab.core.jsonable import to_json
    from perflab.numa.plan import plan, plan_table
    from perflab.numa.smi_topo import parse_topo, table_matches_sysfs, topology_from_topo
    from perflab.numa.topology import format_cpulist, read_topology

    if args.nproc and not args.plan:
        raise InputError("--nproc goes with --plan")
    parsed = None
    if args.topo:
        path = Path(args.topo).expanduser()
        if not path.is_file():
            raise InputError(f"--topo {args.topo}: no such file")
        parsed = parse_topo(path.read_text(errors="replace"))
        if args.sysfs and not table_matches_sysfs(parsed, args.sysfs):
            raise InputError(f"--sysfs {args.sysfs} is not the machine of --topo {args.topo}: its online CPUs or "
                             "NUMA nodes differ from the table's; give that machine's /sys")
        topo = topology_from_topo(parsed, args.sysfs or "/sys")
    else:
        root = Path(args.sysfs or "/sys")
        if not (root / "devices" / "system").is_dir():
            raise InputError(f"--sysfs {root}: no devices/system folder there (ROOT stands in for /sys)")
        topo = read_topology(root)
    if args.plan:
        nproc = args.nproc or len(topo.gpus)
        if not nproc:
            raise InputError("no GPU found to plan for: give --nproc N")
        p = plan(nproc, topo)
        rows = [{"rank": x.rank, "gpu": x.gpu, "node": x.node, "cpus": x.cpus, "numactl": x.numactl, "note": x.note} for x in p]
        notes = "".join(f"\nnote: {n}" for n in topo.notes)
        if args.json and topo.notes:  # JSON keeps its shape (a list of rows); the caveat still reaches the reader
            import sys

            sys.stderr.write(notes.lstrip("\n") + "\n")
        emit(rows, args.json,
             f"binding plan for {nproc} local ranks ({topo.source}):\n" + plan_table(p).to_string(index=False) + notes)
        return 0
    if parsed is not None:
        out = {"gpus": to_json(parsed.gpus), "links": parsed.links, "nics": parsed.nics, "legend": parsed.legend,
               "notes": topo.notes}
        text = "\n".join(f"GPU{g.gpu}: CPUs {format_cpulist(g.cpu_affinity) or 'N/A'}, NUMA node "
                         f"{g.numa_node if g.numa_node is not None else 'N/A'}" for g in parsed.gpus)
        emit(out, args.json, text + "".join(f"\nnote: {n}" for n in topo.notes))
        return 0
    out = {"nodes": [{"id": n.id, "cpus": n.cpus, "memory_bytes": n.memory_bytes} for n in topo.nodes],
           "distances": topo.distances,
           "gpus": [{"index": g.index, "bus_id": g.bus_id, "numa_node": g.numa_node, "cpus": g.cpus} for g in topo.gpus],
           "affinity": topo.affinity}
    lines = [f"node {n.id}: CPUs {format_cpulist(n.cpus) or 'none'}"
             + (f", {n.memory_bytes / 2**30:.1f} GiB" if n.memory_bytes else "") for n in topo.nodes]
    lines.append("distances: " + "; ".join(" ".join(str(x) for x in row) for row in topo.distances))
    lines += [f"GPU{g.index} ({g.bus_id}): node {g.numa_node if g.numa_node is not None else 'unknown'}, "
              f"local CPUs {format_cpulist(g.cpus) or 'unknown'}" for g in topo.gpus] or ["no GPU on the PCI bus"]
    lines.append(f"this process may run on CPUs {format_cpulist(topo.affinity)}")
    emit(out, args.json, "\n".join(lines))
    return 0
