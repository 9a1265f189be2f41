"""`perflab shuffle`: entries of the O(1)-memory LCG permutation, by random access."""

from __future__ import annotations

from perflab.commands._args import emit, positive_int, whole_number


def register(sub) -> None:
    p = sub.add_parser("shuffle", help="entries of an LCG permutation of N items (O(1) memory, random access)")
    p.add_argument("--n", type=positive_int, required=True, help="number of items")
    p.add_argument("--seed", type=whole_number, default=0, help="seed (default 0)")
    p.add_argument("--start", type=whole_number, default=0, help="first position (default 0)")
    p.add_argument("--count", type=whole_number, help="how many entries (default: all, for N ≤ 1e6)")
    p.add_argument("--shard", help="RANK/WORLD: only this shard's positions (start, start+W, ... from start+RANK)")
    p.add_argument("--measure", action="store_true", help="also time generating the whole permutation (peak_bytes, seconds)")
    p.add_argument("--json", action="store_true", help='print JSON: {"n", "seed", "indices", ...}')
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.core.errors import InputError
    from perflab.dataloading.shuffle import LCGPermutation, measure_whole, parse_shard

    perm = LCGPermutation(args.n, args.seed)
    if args.start >= args.n:
        raise InputError(f"--start {args.start} is past the end (n = {args.n})")
    count = args.count
    if count is None:
        if args.n > 1_000_000:
            raise InputError(f"n = {args.n} is over 1e6: pass --count C to list C entries")
        count = args.n - args.start
    rank, world = parse_shard(args.shard) if args.shard else (0, 1)
    positions = range(args.start + rank, min(args.n, args.start + count * world), world) if args.shard \
        else range(args.start, min(args.n, args.start + count))
    out = {"n": args.n, "seed": args.seed, "indices": [perm.index(i) for i in positions]}
    if args.shard:
        out["shard"] = f"{rank}/{world}"
    if args.measure:
        m = measure_whole("lcg", args.n, args.seed)
        out["peak_bytes"], out["seconds"] = m["peak_bytes"], m["seconds"]
    shown = out["indices"] if len(out["indices"]) <= 20 else out["indices"][:20] + ["…"]
    text = f"LCG permutation of n = {args.n} (seed {args.seed}, m = 2^{perm.bits}, a = {perm.a}, c = {perm.c}): {shown}"
    if args.measure:
        text += f"\nwhole permutation: {out['seconds']:.3g} s, peak {out['peak_bytes'] / 1e6:.3g} MB (tracemalloc)"
    emit(out, args.json, text)
    return 0
