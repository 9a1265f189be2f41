"""`perflab hunt`: the teacher's view of lesson 14's draws (each learner's hidden regressions), and the pool's costs here."""

from __future__ import annotations

from perflab.commands._args import emit


def register(sub) -> None:
    p = sub.add_parser("hunt", help="lesson 14: each learner's drawn regressions (teacher), the pool and its costs here")
    p.add_argument("--learners", help="comma-separated user names: show each one's draw")
    p.add_argument("--k", type=int, help="regressions per learner (default: PERFLAB_HUNT_K or 3)")
    p.add_argument("--pool", help="comma-separated regressions to draw from (default: PERFLAB_HUNT_POOL or all)")
    p.add_argument("--salt", help="the class's salt (default: PERFLAB_HUNT_SALT or the course's)")
    p.add_argument("--costs", action="store_true", help="measure each pool member's cost here (slow: ~a minute)")
    p.add_argument("--smoke", action="store_true", help="the lesson's smoke mode: its pool (no per-step full "
                                                       "collection) and, with --costs, the tiny step of the tests")
    p.add_argument("--json", action="store_true", help='print JSON: {"pool", "not_here", "draws", "costs"}')
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.core.errors import InputError
    from perflab.hunt.draw import default_k, lesson_pool, max_drawable, teacher_view
    from perflab.hunt.pool import KEEP_SHARE, NOT_HERE, parse_pool

    pool = parse_pool(args.pool) if args.pool else lesson_pool(args.smoke)  # the notebook's pool, mode for mode
    k = default_k() if args.k is None else args.k
    if k < 1:
        raise InputError(f"--k {k}: draw at least one regression")
    if k > max_drawable(pool):
        raise InputError(f"--k {k}: a draw from this pool holds at most {max_drawable(pool)} regressions")
    out: dict = {"pool": list(pool), "k": k, "not_here": NOT_HERE, "draws": [], "costs": {}}
    lines = [f"pool ({len(pool)}): {', '.join(pool)}; k = {k}"]
    costs = None
    if args.costs:
        from perflab.hunt.sizes import named
        from perflab.hunt.step import measure_costs

        costs = measure_costs(pool, named("smoke" if args.smoke else "lesson"))
        out["costs"] = {n: c.as_dict() for n, c in costs.items()}
        lines.append(f"costs here (extra time over the clean step; kept at ≥ {KEEP_SHARE:.0%}):")
        lines += [f"  {n:<16} {c.share:+.0%}  {'kept' if c.kept else 'left out here'}" for n, c in costs.items()]
    if args.learners:
        users = [u.strip() for u in args.learners.split(",") if u.strip()]
        out["draws"] = teacher_view(users, k, pool, costs=costs, salt_=args.salt)
        lines += [f"  {r['learner']:<16} {r['regressions']}  (fixes: {r['fixes']})" for r in out["draws"]]
        if costs is None:
            lines.append(f"without --costs: each learner's first k of their order ({'; '.join(r['learner'] + ': ' + r['order'] for r in out['draws'])}); "
                         f"a notebook passes over a member that costs under {KEEP_SHARE:.0%} of the step on its "
                         "machine and takes the next (--costs applies this machine's costs)")
    emit(out, args.json, "\n".join(lines))
    return 0
