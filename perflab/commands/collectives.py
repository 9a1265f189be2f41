"""`perflab collectives`: run every collective primitive on N ranks under torchrun and verify each."""

from __future__ import annotations

import sys

from perflab.commands._args import emit, positive_float, positive_int


def register(sub) -> None:
    p = sub.add_parser("collectives", help="run and verify every collective (broadcast ... barrier) on N ranks")
    p.add_argument("--nproc", type=positive_int, default=2, help="ranks to start (default 2)")
    p.add_argument("--backend", help="gloo (CPU tensors) or nccl (one GPU per rank); default: nccl when every rank has a GPU")
    p.add_argument("--timeout", type=positive_float, default=180.0, help="seconds before every rank is stopped (default 180)")
    p.add_argument("--elements", type=positive_int, default=4096, help="elements per rank in the large checks (default 4096)")
    p.add_argument("--slow-s", type=float, default=0.2, help="rank r works r×this before the barrier (default 0.2)")
    p.add_argument("--json", action="store_true", help="print JSON: {ok, primitives: [{primitive, ok, native, ...}], ...}")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.distributed.collectives import run_all

    rep = run_all(args.nproc, backend=args.backend, timeout=args.timeout, check_k=args.elements,
                  slow_s=args.slow_s, ring_numel=args.elements)
    d = rep.as_dict()
    lines = [f"{d['nproc']} ranks, backend {d['backend']} ({d['backend_reason']}); {rep.launch.message}"]
    for p in d["primitives"]:
        mark = "✓" if p["ok"] else "✗"
        how = "native" if p["native"] else f"not in {d['backend']}: via {p['equivalent']}"
        lines.append(f"  {mark} {p['primitive']:<15} {how}; equivalent ({p['equivalent']}) "
                     f"{'also checks out' if p['equivalent_ok'] else 'FAILED'}")
    if "barrier_with_slow_ranks" in d:
        b = d["barrier_with_slow_ranks"]
        waits = ", ".join(f"rank {r['rank']} waited {r['waited_s']:.2f} s" for r in b["ranks"])
        lines.append(f"  {'✓' if b['ok'] else '✗'} barrier with rank r working r×{b['delay_s']:g} s: {waits}")
    if "ring_all_reduce" in d:
        r0 = d["ring_all_reduce"]["ranks"][0]
        lines.append(f"  {'✓' if d['ring_all_reduce']['ok'] else '✗'} ring all-reduce (point-to-point) = all_reduce: "
                     f"max relative error {max(r['max_rel_error'] for r in d['ring_all_reduce']['ranks']):.1e}; "
                     f"each rank sent {r0['bytes_sent']} B = 2(N−1)K/N × 4 B = {r0['bytes_formula']:.0f} B")
    if not rep.launch.ok:
        lines.append(rep.launch.report())
    emit(d, args.json, "\n".join(lines))
    if not rep.ok and not args.json:
        sys.stderr.write(f"perflab collectives: not every check passed: {rep.launch.message}\n")
    return 0 if rep.ok else 1
