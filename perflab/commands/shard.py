"""`perflab shard`: FSDP, tensor or pipeline parallelism on N ranks, each rank measured beside its prediction."""

from __future__ import annotations

import sys

from perflab.commands._args import emit, positive_float, positive_int


def _ints(text: str) -> list[int]:
    import argparse

    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"micro-batch counts must be ≥ 1 (got {text!r})")
    return values


def register(sub) -> None:
    p = sub.add_parser("shard", help="FSDP (ZeRO-3), tensor or pipeline parallelism on N ranks: per-rank memory, "
                                     "collectives, idle time, beside the prediction")
    p.add_argument("--strategy", choices=("fsdp", "tp", "pp"), default="fsdp", help="fsdp, tp or pp (default fsdp)")
    p.add_argument("--nproc", type=positive_int, default=2, help="ranks (default 2; at most 8)")
    p.add_argument("--microbatches", type=_ints, default=[1, 2, 4, 8],
                   help="pp: micro-batch counts, comma-separated (default 1,2,4,8)")
    p.add_argument("--schedule", choices=("gpipe", "1f1b"), default="gpipe", help="pp schedule (default gpipe)")
    p.add_argument("--preset", default="tiny-gpt", help="fsdp/tp: the course's transformer shape (default tiny-gpt)")
    p.add_argument("--batch", type=positive_int, default=2, help="fsdp/tp: sequences per rank (default 2)")
    p.add_argument("--seq", type=positive_int, default=32, help="fsdp/tp: tokens per sequence (default 32)")
    p.add_argument("--forward-ms", type=positive_float, default=100.0, help="pp: each stage's forward time (default 100)")
    p.add_argument("--backward-ms", type=positive_float, default=200.0, help="pp: each stage's backward time (default 200)")
    p.add_argument("--timeout", type=positive_float, default=180.0, help="seconds before every rank is stopped")
    p.add_argument("--backend", help="gloo or nccl (default: nccl when every rank has a GPU)")
    p.add_argument("--json", action="store_true", help="print JSON: rows (one per rank), checks, details")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.shard.run import shard

    rep = shard(args.strategy, args.nproc, preset=args.preset, microbatches=args.microbatches, schedule=args.schedule,
                batch=args.batch, seq=args.seq, forward_ms=args.forward_ms, backward_ms=args.backward_ms,
                timeout=args.timeout, backend=args.backend)
    d = rep.as_dict()
    if args.json:
        for run_ in d["details"].get("runs", []):
            run_.pop("events", None)
    emit(d, args.json, rep.text())
    if not rep.ok:
        failed = next((c for c in rep.checks if not c.ok), None)
        sys.stderr.write(f"perflab shard: {failed.name if failed else 'a check'} did not hold"
                         f"{': ' + failed.note.splitlines()[0] if failed and failed.note else ''}\n")
    return 0 if rep.ok else 1
